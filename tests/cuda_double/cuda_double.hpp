// cuda_double.hpp: TEST DOUBLES of the CUDA runtime and driver libraries, for
// tests only.
//
// Two libraries, NOT CUDA, that export a small part of the CUDA runtime API
// (libcudart_double.so) and of the CUDA driver API (libcuda.so.1), with the
// CUDA 13.0 signatures (compiled against the real cuda_runtime_api.h and
// cuda.h), and implement it on the host: "device" memory is ordinary host
// memory, there is no GPU, no kernel ever runs and nothing is asynchronous
// (every call has completed when it returns). They exist so that the CPU test
// tier can run programs and the asyncshim preload library without a GPU and
// can look inside what they did. Never ship them, never put them on a
// production library path.
//
// Both libraries work on ONE model (one set of devices, contexts, allocations,
// pools, streams, events, captures and counters per process): memory from
// cudaMalloc can be freed with cuMemFree_v2 and memory from cuMemAlloc_v2 with
// cudaFree. The model lives in the driver double; libcudart_double.so links
// against it (NEEDED libcuda.so.1) and reaches it in two ways, as the real
// runtime reaches the real driver:
//   * memory, pools, copies (cudaMalloc, cudaFree, cudaMemcpy, cudaMemset,
//     cudaPointerGetAttributes, the cudaMemPool* calls but those of access and
//     exports, the stream-ordered calls, ...): through an internal C++ API (model.hpp, operations.hpp), never
//     through an exported CUDA function;
//   * streams, events, stream capture, graphs, synchronization, reset, peer
//     access, pool access, exports and imports, legacy IPC (cudaStreamCreate*,
//     cudaStreamDestroy,
//     cudaStreamGetFlags, cudaStreamSynchronize, cudaStreamQuery,
//     cudaLaunchHostFunc, cudaMemcpyAsync, cudaMemsetAsync (through cuMemcpyAsync and
//     cuMemsetD8Async), cudaGraphInstantiate, cudaGraphLaunch, cudaGraphExecDestroy,
//     cudaStreamWaitEvent, cudaEvent*, cudaStreamBeginCapture/EndCapture/
//     IsCapturing, cudaThreadExchangeStreamCaptureMode,
//     cudaGraphDestroy/GetNodes, cudaDeviceSynchronize, cudaDeviceReset,
//     cudaDeviceCanAccessPeer, cudaDeviceEnable/DisablePeerAccess,
//     cudaMemPoolSetAccess/GetAccess, cudaMemPoolExportToShareableHandle,
//     cudaMemPoolExportPointer, cudaMemPoolImportFromShareableHandle,
//     cudaMemPoolImportPointer, cudaIpcGetMemHandle, cudaIpcOpenMemHandle,
//     cudaIpcCloseMemHandle, cudaMemGetInfo): through driver function
//     pointers that it fetched once with cuGetProcAddress_v2 (see "The
//     runtime's driver entry points" below).
// No exported function of either library calls an exported one by its
// symbol, so an interposer (the shim) sees exactly the calls the program and
// the shim make, plus the driver calls that the runtime makes through the
// pointers cuGetProcAddress_v2 handed out (which an interposer answering
// cuGetProcAddress lookups can replace, as with the real runtime).
//
// The driver double is built as <build>/tests/cuda_double/driver/libcuda.so.1
// (SONAME libcuda.so.1), a folder of its own so that nothing loads it by
// accident; what links libcudart_double.so finds it through an RPATH. The
// introspection functions at the end of this file are exported by the driver
// double; linking against cudart_double in CMake links it too.
//
// ===================================================================== runtime
//
// Exported CUDA runtime functions (everything else is missing on purpose):
//   cudaMalloc cudaFree cudaGetDevice cudaSetDevice cudaGetDeviceCount
//   cudaDeviceGetAttribute cudaMemGetInfo cudaDeviceGetDefaultMemPool
//   cudaMemPoolCreate cudaMemPoolDestroy cudaMemPoolSetAttribute
//   cudaMemPoolGetAttribute cudaMemPoolTrimTo cudaMallocFromPoolAsync cudaMallocAsync
//   cudaFreeAsync cudaStreamCreate cudaStreamCreateWithFlags
//   cudaStreamCreateWithPriority cudaStreamDestroy cudaStreamGetFlags cudaLaunchHostFunc
//   cudaMemcpyAsync cudaMemsetAsync
//   cudaGraphInstantiate cudaGraphLaunch cudaGraphExecDestroy
//   cudaStreamSynchronize cudaStreamQuery cudaStreamWaitEvent cudaEventCreate
//   cudaEventCreateWithFlags cudaEventRecord cudaEventDestroy cudaEventQuery
//   cudaEventSynchronize cudaStreamBeginCapture cudaStreamEndCapture
//   cudaStreamIsCapturing cudaThreadExchangeStreamCaptureMode cudaGraphDestroy
//   cudaGraphGetNodes cudaDeviceSynchronize cudaDeviceReset cudaGetLastError
//   cudaPeekAtLastError cudaGetErrorName cudaGetErrorString
//   cudaDriverGetVersion cudaRuntimeGetVersion cudaMemcpy cudaMemset
//   cudaDeviceCanAccessPeer cudaDeviceEnablePeerAccess
//   cudaDeviceDisablePeerAccess cudaMemPoolSetAccess cudaMemPoolGetAccess
//   cudaMemPoolExportToShareableHandle cudaMemPoolExportPointer
//   cudaMemPoolImportFromShareableHandle cudaMemPoolImportPointer
//   cudaIpcGetMemHandle cudaIpcOpenMemHandle cudaIpcCloseMemHandle
//   cudaPointerGetAttributes
//
// Controls: environment variables, read once, at the first call into either
// library (changing them later in the same process has no effect). What they
// do to the driver API is in the driver section below.
//   CUDA_DOUBLE_DEVICES=N          number of devices (default 1, at most 1024).
//                                  0 = "no device": every call except
//                                  cudaGetErrorName/String, cudaGetLastError,
//                                  cudaPeekAtLastError, cudaDriverGetVersion and
//                                  cudaRuntimeGetVersion fails with
//                                  cudaErrorNoDevice (cudaGetDeviceCount also
//                                  stores 0 in *count).
//   CUDA_DOUBLE_NO_DRIVER=1        as if no driver were installed: the same calls
//                                  fail with cudaErrorInsufficientDriver, and
//                                  cudaDriverGetVersion succeeds with 0. Wins over
//                                  CUDA_DOUBLE_DEVICES.
//   CUDA_DOUBLE_MEMORY=BYTES       memory per device (default 8589934592 = 8 GiB).
//                                  Accounting only: host memory is allocated just
//                                  for the bytes handed out to the caller, so a
//                                  pool reserving 4 GiB costs nothing (an
//                                  exportable pool's arena, below, is this size
//                                  but sparse: only written pages cost memory).
//   CUDA_DOUBLE_NO_POOLS=1         cudaDevAttrMemoryPoolsSupported reads 0 and the
//                                  pool calls (cudaMemPool*, cudaMallocAsync,
//                                  cudaMallocFromPoolAsync, cudaFreeAsync,
//                                  cudaDeviceGetDefaultMemPool) fail with
//                                  cudaErrorNotSupported.
//   CUDA_DOUBLE_NO_POOL_MAX_SIZE=1 cudaMemPoolCreate/cuMemPoolCreate with a
//                                  maxSize fail with cudaErrorInvalidValue, as
//                                  a driver older than the field may.
//   CUDA_DOUBLE_POOL_HANDLE_TYPES=N value of cudaDevAttrMemoryPoolSupportedHandleTypes
//                                  (default 9 = posix fd | fabric, as on an H200);
//                                  cudaMemPoolCreate refuses other handle types
//                                  with cudaErrorNotSupported.
//   CUDA_DOUBLE_NO_PEER=1          no pair of devices can access each other:
//                                  cuDeviceCanAccessPeer (cudaDeviceCanAccessPeer)
//                                  reports 0, enabling peer access fails with
//                                  CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
//                                  (cudaErrorPeerAccessUnsupported) and granting
//                                  another device access to a pool with
//                                  CUDA_ERROR_INVALID_DEVICE.
//   CUDA_DOUBLE_FABRIC_OK=1        fabric handles can be exported (as with an
//                                  IMEX channel); without it
//                                  cuMemPoolExportToShareableHandle of a fabric
//                                  handle fails with CUDA_ERROR_NOT_PERMITTED, as
//                                  on an H200 without IMEX.
//   CUDA_DOUBLE_SHARED_MEMORY=FILE processes that name the same file share their
//                                  devices' memory, as processes on one GPU do:
//                                  what the other live processes take (their
//                                  cudaMalloc/cuMemAlloc allocations and their
//                                  pools' reservations, on the first 8 devices)
//                                  is free to none of them (allocations fail,
//                                  cudaMemGetInfo reports it taken). The file
//                                  (created, 0600) holds one slot per process
//                                  (at most 64 at a time); a process that has
//                                  ended counts for nothing.
//   CUDA_DOUBLE_SIMULATE=SEED      the virtual GPU (below) runs, its every choice
//                                  drawn from SEED.
//   CUDA_DOUBLE_SIMULATE_LAZY=1    the virtual GPU runs no task but those a
//                                  synchronization waits for: work on a stream
//                                  nobody waits for stays pending.
//   CUDA_DOUBLE_TIGHT_POOL=1       under the virtual GPU, a block a pool keeps
//                                  after its free holds its bytes until an
//                                  allocation of its size takes it or a trim
//                                  gives it back (a trim: only once its free
//                                  has run): a pool whose free memory is in
//                                  pieces, or behind frees still pending, must
//                                  grow to serve any other size.
//   CUDA_DOUBLE_TEXTURE_ALIGNMENT=N  the device's texture alignment (default 512):
//                                  pitched allocations (cudaMallocPitch,
//                                  cudaMalloc3D, cuMemAllocPitch_v2) round each
//                                  row up to it and start on it. Every other
//                                  block starts on 512 bytes.
//   CUDA_DOUBLE_NO_HOST_POOLS=1    pools in host memory (location type host)
//                                  are not supported (a driver before 12.6).
//                                  Pinned host memory (cudaMallocHost & co.)
//                                  is host memory every device may use; the
//                                  host's pool blocks, those of the devices
//                                  given access (cuMemPoolSetAccess).
//   CUDA_DOUBLE_NEWER_ABI=NAMES    as a driver newer than the headers: NAMES are
//                                  base names, comma-separated ("cuMemAlloc,
//                                  cuStreamDestroy"); cuDriverGetVersion and
//                                  cudaDriverGetVersion report 13010, and
//                                  cuGetProcAddress(_v2) of one of NAMES at
//                                  cudaVersion 13010 or above hands out a newer ABI
//                                  of it (see the driver's cuGetProcAddress_v2).
//   CUDA_DOUBLE_RUNTIME_PRIVATE_SUBMISSIONS=1
//                                  the runtime's cudaLaunchHostFunc puts its
//                                  task on the stream through the driver's
//                                  internals, not cuLaunchHostFunc, as a runtime
//                                  using cuGetExportTable would: an interposer
//                                  of the driver's functions never sees it.
// Booleans accept 1/true/yes/on; numbers are decimal or 0x-hex. A value that
// cannot be parsed is reported on stderr and the default is used.
//
// The model, in short:
//   * Each thread has its own runtime device (default 0) and its own last
//     error. Every failing call records its error as the last error;
//     cudaGetLastError returns and clears it, cudaPeekAtLastError returns it.
//   * Contexts, as the real runtime uses them: each device has one primary
//     context, and each thread a stack of current contexts (the driver's, see
//     below). cuCtxCreate_v4 makes a context of its own on the device (until
//     cuCtxDestroy_v2) and pushes it: memory and pools are the device's, but its
//     legacy and per-thread streams and the streams made while it is current
//     are its own on the virtual GPU, and cuCtxSynchronize waits for them only. cudaSetDevice(d) makes device d the
//     runtime device and d's primary context current (replacing the top of the stack). cudaMalloc, cudaFree (also of
//     nullptr), cudaMemGetInfo, cudaDeviceSynchronize, cudaMemcpy, cudaMemset, cudaPointerGetAttributes,
//     cudaIpcGetMemHandle, cudaIpcOpenMemHandle, cudaIpcCloseMemHandle, cudaDeviceEnablePeerAccess,
//     cudaDeviceDisablePeerAccess and the stream, event, capture, graph, pool
//     (access and exports included) and stream-ordered calls first make the
//     runtime device's primary context current if no context is (after the
//     no-driver/no-device check, before anything else), and then work on the
//     current context's device. cudaDeviceReset resets the primary context of
//     the device cudaGetDevice would report (cuDevicePrimaryCtxReset_v2) and
//     makes no context current. cudaGetDevice reports the current context's
//     device, or the runtime device while no context is current; it,
//     cudaGetDeviceCount, cudaDeviceGetAttribute and cudaDeviceCanAccessPeer
//     make no context current. So after any runtime call cuCtxGetDevice and
//     cudaGetDevice agree (or cuCtxGetDevice says there is no context).
//     These implicit uses do not count as cuDevicePrimaryCtxRetain. The peer
//     device's context of cudaDeviceEnablePeerAccess/DisablePeerAccess does:
//     the runtime retains it (cuDevicePrimaryCtxRetain, through its fetched
//     pointer) the first time it needs it and keeps that retain for the life
//     of the process, as the real runtime keeps the contexts it uses.
//   * The first runtime call that passes the no-driver/no-device check
//     (cudaGetDeviceCount included) initializes the driver, as if cuInit(0)
//     had been called.
//   * Per device: used (bytes of live cudaMalloc and cuMemAlloc_v2
//     allocations, exactly as requested) plus the reserved bytes of every pool
//     on it never exceeds CUDA_DOUBLE_MEMORY less what other processes take
//     (CUDA_DOUBLE_SHARED_MEMORY); cuMemGetInfo_v2 (and so cudaMemGetInfo)
//     reports free = memory - used - reserved - taken by others, total =
//     memory, for the current context's device. An allocation that
//     does not fit fails with cudaErrorMemoryAllocation before any host memory
//     is touched.
//   * Allocations are host memory aligned to 256 bytes, contents unspecified
//     (not zero-filled, as on a GPU). The allocations of a pool created with
//     the POSIX file descriptor handle type (cudaMemHandleTypePosixFileDescriptor
//     among its handle types) lie in the pool's arena instead: one memfd per
//     pool (close-on-exec), CUDA_DOUBLE_MEMORY bytes long (sparse), mapped
//     once, shared, so that a process that imports the pool (see the driver's
//     exports and imports) sees and writes the same bytes. A block takes the
//     lowest free offset that fits (256-byte steps; freed blocks coalesce and
//     are reused, like a real pool's); when the pool's reserved bytes shrink
//     (a trim), the whole pages of the free ranges go back to the system.
//     The accounting is the same for both.
//   * Pools (the per-device default pool included): an allocation of size
//     bytes that does not fit in reserved - used grows reserved to
//     (used + size) rounded up to 2 MiB (never past the pool's maxSize, if
//     one was given). cudaFreeAsync (and cudaFree of a pool pointer) returns
//     the bytes to the pool; reserved stays. cudaFreeAsync of nullptr, or of
//     anything but a live pool allocation (imported memory is one), fails
//     with cudaErrorInvalidValue.
//     cuMemPoolTrimTo(pool, keep) (cudaMemPoolTrimTo) gives back what the
//     pool reserves above max(used, keep) at once (nothing is in flight here).
//     cudaStreamSynchronize and cudaDeviceSynchronize (nothing else, not even
//     cudaFree or cudaStreamQuery) trim every pool of the stream's (current)
//     device to
//     min(reserved, max(used, release threshold)). Destroying a pool frees
//     whatever was still allocated from it; its pointers are then unknown
//     (cudaErrorInvalidValue). A default pool cannot be destroyed.
//     cudaMallocAsync takes the default pool of the stream's device.
//   * Streams: 0, cudaStreamLegacy, cudaStreamPerThread and live handles from
//     cudaStreamCreate(WithFlags/WithPriority) are accepted; anything else
//     fails with cudaErrorInvalidResourceHandle. A created stream belongs to
//     the device of the context that was current when it was created; the
//     special streams stand for the current context's device. 0 is the legacy
//     stream for every runtime function (this runtime exports the legacy
//     default-stream names). Events, stream capture, graphs, reset, peer
//     access, pool access, pool exports and imports and legacy IPC follow the
//     driver's rules (below): these runtime functions are the driver's, with the
//     runtime's error codes (so cudaDeviceEnablePeerAccess of the current
//     device: cudaErrorInvalidDevice; twice: cudaErrorPeerAccessAlreadyEnabled;
//     cudaDeviceDisablePeerAccess of what is not enabled:
//     cudaErrorPeerAccessNotEnabled; cudaMemPoolSetAccess revoking the pool's
//     own device: cudaErrorInvalidDevice; cudaIpcGetMemHandle of pool memory:
//     cudaErrorInvalidValue; cudaIpcOpenMemHandle of a handle made in the same
//     process: cudaErrorDeviceUninitialized, the runtime's 201).
//   * The runtime's error codes for the driver's: CUDA_ERROR_X becomes the
//     cudaErrorX of the same meaning (INVALID_VALUE -> InvalidValue,
//     OUT_OF_MEMORY -> MemoryAllocation, INVALID_HANDLE ->
//     InvalidResourceHandle, INVALID_DEVICE -> InvalidDevice, NOT_SUPPORTED ->
//     NotSupported, ILLEGAL_STATE -> IllegalState, STREAM_CAPTURE_UNSUPPORTED/
//     INVALIDATED/IMPLICIT/WRONG_THREAD/MERGE -> StreamCaptureUnsupported/
//     Invalidated/Implicit/WrongThread/Merge, CAPTURED_EVENT -> CapturedEvent,
//     PEER_ACCESS_UNSUPPORTED/ALREADY_ENABLED/NOT_ENABLED ->
//     PeerAccessUnsupported/AlreadyEnabled/NotEnabled, NOT_PERMITTED ->
//     NotPermitted), recorded as the last error as every runtime failure is.
//   * The runtime's driver entry points: at the first call that needs one,
//     the runtime double dlopen()s "libcuda.so.1" with RTLD_NOLOAD (the loaded
//     one: it needs it), dlsym()s "cuGetProcAddress_v2" and through it fetches,
//     once and thread-safely, with cudaVersion 13000 and flags 0 (legacy
//     default stream): cuStreamCreate, cuStreamCreateWithPriority,
//     cuStreamDestroy, cuStreamGetFlags, cuStreamSynchronize, cuStreamQuery,
//     cuStreamWaitEvent, cuEventCreate, cuEventDestroy, cuEventRecord,
//     cuEventQuery, cuEventSynchronize, cuStreamBeginCapture,
//     cuStreamEndCapture, cuStreamIsCapturing,
//     cuThreadExchangeStreamCaptureMode, cuGraphDestroy, cuGraphGetNodes,
//     cuCtxSynchronize, cuDevicePrimaryCtxReset (with cudaVersion 7000, as
//     the real CUDA 13 runtime: its CUDA 7.0 ABI), cuDevicePrimaryCtxRetain,
//     cuDeviceCanAccessPeer, cuCtxEnablePeerAccess, cuCtxDisablePeerAccess,
//     cuMemPoolSetAccess, cuMemPoolGetAccess,
//     cuMemPoolExportToShareableHandle, cuMemPoolExportPointer,
//     cuMemPoolImportFromShareableHandle, cuMemPoolImportPointer,
//     cuIpcGetMemHandle, cuIpcOpenMemHandle (the _v2 one) and
//     cuIpcCloseMemHandle (each looked up once per process, see
//     cuda_double_proc_lookups). cudaStreamCreate(WithFlags) calls
//     cuStreamCreate, cudaStreamCreateWithPriority cuStreamCreateWithPriority,
//     cudaEventCreate(WithFlags) cuEventCreate, cudaDeviceSynchronize
//     cuCtxSynchronize, cudaDeviceReset cuDevicePrimaryCtxReset,
//     cudaDeviceCanAccessPeer cuDeviceCanAccessPeer,
//     cudaDeviceEnablePeerAccess(peer, flags) cuCtxEnablePeerAccess(the peer
//     device's primary context, flags) (after cuDevicePrimaryCtxRetain, see
//     the contexts above; a peer ordinal that is no device:
//     cudaErrorInvalidDevice, no driver call), cudaDeviceDisablePeerAccess
//     likewise cuCtxDisablePeerAccess, cudaMemPoolImportPointer and
//     cudaIpcOpenMemHandle given a null output pointer cudaErrorInvalidValue
//     (no driver call), and every other one of these runtime
//     functions the driver function of the same name (the runtime's argument
//     types passed as the driver's: same layouts and values). An entry point
//     that could not be fetched: cudaErrorCallRequiresNewerDriver.
//   * A runtime function that fails counts once in failed_calls, also when it
//     failed because the driver function it called failed.
//   * cudaMemcpy copies (memmove) whatever the kind; cudaMemset needs a range
//     inside one live allocation. Either fails with cudaErrorInvalidValue when
//     a range starts inside a live allocation and runs past its end.
//   * cudaPointerGetAttributes(&a, ptr): a NULL: cudaErrorInvalidValue; ptr
//     inside a live allocation (any kind, imported included): type
//     cudaMemoryTypeDevice, device the allocation's (where the memory lives:
//     for imported memory the exporter's device, as cudaPointerGetAttributes
//     documents), devicePointer ptr (whether the current device may access
//     it is not considered, as with cuPointerGetAttribute's DEVICE_POINTER),
//     hostPointer NULL; any other pointer (as CUDA 11 and later): success,
//     type cudaMemoryTypeUnregistered, hostPointer ptr, devicePointer NULL,
//     device cudaInvalidDeviceId (the double's choice: not measured).
//   * cudaDeviceGetAttribute knows cudaDevAttrMemoryPoolsSupported,
//     cudaDevAttrMemoryPoolSupportedHandleTypes (0 without pools) and compute
//     capability 9.0; any other attribute reads 0. Versions are 13000 (the
//     driver's 13010 under CUDA_DOUBLE_NEWER_ABI).
//   * Error codes where the real runtime leaves room for doubt: bad pool
//     properties (allocType not pinned, location not a valid device), an
//     unknown or destroyed pool handle, destroying a default pool, unknown
//     stream flags, setting a read-only or non-zero *High pool attribute:
//     cudaErrorInvalidValue. Handle types the device lacks:
//     cudaErrorNotSupported. cudaStreamDestroy of 0, cudaStreamLegacy or
//     cudaStreamPerThread: cudaErrorInvalidResourceHandle. A cudaMemcpyKind
//     outside 0..4: cudaErrorInvalidMemcpyDirection.
//   * No exported function calls another exported one by its symbol (see the
//     top of this file).
//   * One mutex guards everything; every call is thread-safe. The state is
//     never destroyed, so calls made during process exit still work.
//
// ====================================================================== driver
//
// libcuda.so.1, exported CUDA driver functions (everything else is missing on
// purpose; the _v2 names are those cuda.h #defines the plain names to):
//   cuInit cuDriverGetVersion cuDeviceGet cuDeviceGetCount cuDeviceGetName
//   cuDeviceGetAttribute cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRelease_v2
//   cuCtxGetCurrent cuCtxSetCurrent cuCtxGetDevice cuCtxPushCurrent_v2
//   cuDevicePrimaryCtxReset_v2 cuCtxPopCurrent_v2 cuCtxSynchronize
//   cuMemAlloc_v2 cuMemFree_v2
//   cuMemGetInfo_v2 cuMemcpyHtoD_v2 cuMemcpyDtoH_v2 cuMemsetD8_v2
//   cuMemAllocAsync cuMemAllocAsync_ptsz cuMemFreeAsync cuMemFreeAsync_ptsz
//   cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync_ptsz cuMemPoolCreate
//   cuMemPoolDestroy cuMemPoolSetAttribute cuMemPoolGetAttribute cuMemPoolTrimTo
//   cuStreamCreate cuStreamCreateWithPriority cuStreamDestroy (CUDA 2.0 ABI)
//   cuStreamDestroy_v2 cuStreamGetFlags cuStreamGetFlags_ptsz
//   cuStreamSynchronize cuStreamSynchronize_ptsz cuStreamQuery
//   cuStreamQuery_ptsz cuStreamWaitEvent cuStreamWaitEvent_ptsz cuEventCreate
//   cuEventDestroy_v2 cuEventRecord cuEventRecord_ptsz cuEventQuery
//   cuEventSynchronize cuStreamBeginCapture_v2 cuStreamBeginCapture_v2_ptsz
//   cuStreamEndCapture cuStreamEndCapture_ptsz cuStreamIsCapturing
//   cuStreamIsCapturing_ptsz cuLaunchKernel cuLaunchKernel_ptsz
//   cuLaunchHostFunc cuLaunchHostFunc_ptsz cuMemcpyAsync cuMemcpyAsync_ptsz
//   cuMemsetD8Async cuMemsetD8Async_ptsz cuGraphInstantiateWithFlags
//   cuGraphLaunch cuGraphLaunch_ptsz cuGraphExecDestroy (they run nothing: a
//   stream's work is what cuda_double_set_stream_busy says)
//   cuDoubleFutureFunction cuThreadExchangeStreamCaptureMode cuGraphDestroy
//   cuGraphGetNodes cuPointerGetAttribute cuGetErrorName
//   cuGetErrorString cuGetProcAddress (CUDA 11.3 ABI, no symbolStatus)
//   cuGetProcAddress_v2 cuDeviceCanAccessPeer cuCtxEnablePeerAccess
//   cuCtxDisablePeerAccess cuMemPoolSetAccess cuMemPoolGetAccess
//   cuMemPoolExportToShareableHandle cuMemPoolExportPointer cuIpcGetMemHandle
//   cuMemPoolImportFromShareableHandle cuMemPoolImportPointer
//   cuIpcOpenMemHandle (CUDA 4.1 ABI) cuIpcOpenMemHandle_v2 cuIpcCloseMemHandle
//   cuMemGetAddressRange_v2 cuCtxCreate_v4 cuCtxDestroy_v2 (of a made context:
//   its work finishes first) cuPointerSetAttribute (SYNC_MEMOPS
//   only: accepted on the double's memory, and changes nothing)
// cuda_driver_double.hpp declares those cuda.h does not (the _ptsz ones,
// cuGetProcAddress as cuGetProcAddress_v1, cuStreamDestroy as
// cuStreamDestroy_v1 and cuIpcOpenMemHandle as cuIpcOpenMemHandle_v1).
//
// The driver model, in short (same devices, pools, streams and allocations as
// the runtime's; cudaStream_t/CUstream and cudaMemPool_t/CUmemoryPool are the
// same handles):
//   * Initialization: every call except cuInit, cuDriverGetVersion,
//     cuGetErrorName/String and cuGetProcAddress(_v2) fails with
//     CUDA_ERROR_NOT_INITIALIZED until cuInit(0) has succeeded (or a runtime
//     call has initialized the driver). cuInit with flags != 0:
//     CUDA_ERROR_INVALID_VALUE.
//   * CUDA_DOUBLE_DEVICES=0: cuInit fails with CUDA_ERROR_NO_DEVICE and the
//     driver stays uninitialized; cuDriverGetVersion still says 13000 (13010
//     under CUDA_DOUBLE_NEWER_ABI).
//   * CUDA_DOUBLE_NO_DRIVER=1: the library behaves as the CUDA toolkit's stub
//     libcuda.so (what a program finds when no driver is installed): cuInit,
//     cuDriverGetVersion and every call that needs initialization fail with
//     CUDA_ERROR_STUB_LIBRARY. cuGetProcAddress(_v2) and cuGetErrorName/String
//     still work, so a program can get as far as cuInit. (The runtime double
//     reports cudaErrorInsufficientDriver in this mode, as a real runtime does
//     when libcuda.so.1 cannot be loaded at all.)
//   * Contexts: CUcontext is an opaque pointer to the one primary context of a
//     device. Each thread has a stack of current contexts, empty at start:
//     cuCtxGetCurrent gives its top (NULL when empty); cuCtxSetCurrent(ctx)
//     replaces the top (pushes onto an empty stack), cuCtxSetCurrent(NULL)
//     pops (no-op when empty); cuCtxPushCurrent_v2 pushes (NULL or a handle
//     that is no primary context: CUDA_ERROR_INVALID_CONTEXT; at most 256
//     deep, then CUDA_ERROR_OUT_OF_MEMORY); cuCtxPopCurrent_v2 pops into *pctx
//     (pctx may be NULL; empty stack: CUDA_ERROR_INVALID_CONTEXT).
//     cuDevicePrimaryCtxRetain counts up and gives the device's primary
//     context (cuDevicePrimaryCtxGetState: always active, no flags); cuDevicePrimaryCtxRelease_v2 counts down
//     (CUDA_ERROR_INVALID_CONTEXT below zero). A primary context is never destroyed,
//     not even at zero retains: its memory stays until a reset.
//     cuCtxCreate_v4(pctx, params, flags, dev) makes a context of its own
//     and pushes it (params and flags are ignored); cuCtxDestroy_v2 waits
//     for its work, pops it when it is current and ends it (a primary or
//     unknown context: CUDA_ERROR_INVALID_CONTEXT).
//   * cuDevicePrimaryCtxReset_v2(dev) (bad dev: CUDA_ERROR_INVALID_DEVICE;
//     needs no context): destroys every live allocation of the device,
//     whatever made it (its pointers become unknown: frees fail with
//     CUDA_ERROR_INVALID_VALUE), every pool created on it (their handles then
//     fail with CUDA_ERROR_INVALID_VALUE), its created streams and events
//     (then CUDA_ERROR_INVALID_HANDLE) and the captures on its streams (ended,
//     no graph); its default pool stays, emptied, with reserved 0, high
//     watermarks 0, default attributes and default access (its own device
//     only); the peer access from the device's context and to it is gone (in
//     both directions, for every other context; not counted in
//     peer_access_disables). What pools of other devices grant the device
//     stays. Graphs already made stay valid
//     (their memory on the device is gone). The context keeps its handle, its
//     retain count and its place on every thread's stack: the double has no
//     "inactive" state, the next use simply works (as the real driver
//     re-activates a reset primary context on its next use). Not a
//     potentially unsafe call.
//   * "Needs a current context" (CUDA_ERROR_INVALID_CONTEXT without one):
//     cuCtxGetDevice, cuCtxSynchronize, cuMemAlloc_v2, cuMemGetInfo_v2,
//     cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, cuMemsetD8_v2, cuStreamCreate,
//     cuStreamCreateWithPriority, cuEventCreate, cuMemFree_v2 of a non-zero
//     pointer, cuCtxEnablePeerAccess, cuCtxDisablePeerAccess,
//     cuMemGetAddressRange_v2, cuMemPoolImportFromShareableHandle (the pool
//     is imported on the context's device), cuIpcOpenMemHandle(_v2),
//     cuIpcCloseMemHandle, and every call
//     given a special stream (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD),
//     which stands for the current context's device. The pool calls (access
//     and exports included, cuMemPoolImportPointer too), cuDevice* (the reset
//     and cuDeviceCanAccessPeer
//     included), cuStreamDestroy(_v2), cuEventDestroy_v2/Query/Synchronize,
//     cuThreadExchangeStreamCaptureMode, cuGraph*, cuPointerGetAttribute,
//     cuIpcGetMemHandle and calls given a created stream need none.
//   * cuMemAlloc_v2: bytesize 0 or dptr NULL: CUDA_ERROR_INVALID_VALUE (as
//     cuda.h documents); memory accounting as cudaMalloc's, on the current
//     context's device; no room: CUDA_ERROR_OUT_OF_MEMORY. The pointer is of
//     kind 3 (cuda_double_pointer_kind).
//   * cuMemFree_v2: 0 is CUDA_SUCCESS (cuda.h does not say; the real driver
//     answers so, like cudaFree(NULL)); any live allocation (cudaMalloc,
//     cuMemAlloc_v2, pool or imported) is freed, whatever API made it;
//     anything else (unknown, interior, freed, host): CUDA_ERROR_INVALID_VALUE.
//   * Pools and stream-ordered allocation follow the runtime double's rules
//     (same model, same pools): cuMemAllocAsync takes the default pool of the
//     stream's device; size 0 succeeds with *dptr = 0; cuMemFreeAsync of 0 or
//     of anything but a live pool allocation: CUDA_ERROR_INVALID_VALUE;
//     cuStreamSynchronize and cuCtxSynchronize trim the device's pools. Under
//     CUDA_DOUBLE_NO_POOLS every pool call fails with CUDA_ERROR_NOT_SUPPORTED.
//     Error codes: unknown pool, bad properties: CUDA_ERROR_INVALID_VALUE;
//     handle types the device lacks: CUDA_ERROR_NOT_SUPPORTED; a stream that
//     is neither special nor live: CUDA_ERROR_INVALID_HANDLE (also for
//     cuStreamDestroy(_v2) of a special one); cuStreamCreate(WithPriority)
//     flags other than CU_STREAM_NON_BLOCKING: CUDA_ERROR_INVALID_VALUE.
//   * Streams: cuStreamCreateWithPriority clamps the priority into [-5, 0]
//     (an H200's range; not observable). cuStreamDestroy (the CUDA 2.0 ABI)
//     and cuStreamDestroy_v2 are the same; destroying a capturing stream ends
//     its capture without a graph (what it allocated is released).
//     cuStreamGetFlags: a created stream's flags, 0 for the special streams
//     (flags NULL: CUDA_ERROR_INVALID_VALUE). cuStreamQuery is
//     cuStreamSynchronize without the trimming: everything is complete
//     (CUDA_SUCCESS, never CUDA_ERROR_NOT_READY).
//   * Events (CUevent == cudaEvent_t): cuEventCreate makes one on the current
//     context's device; flags: CU_EVENT_BLOCKING_SYNC, _DISABLE_TIMING,
//     _INTERPROCESS (only with _DISABLE_TIMING), else CUDA_ERROR_INVALID_VALUE.
//     Nothing is asynchronous, so an event is complete as soon as recorded,
//     and before its first record too: cuEventQuery and cuEventSynchronize
//     succeed, unless the event was last recorded in a capture
//     (CUDA_ERROR_CAPTURED_EVENT). An event or stream handle that is not live
//     (unknown, destroyed, NULL event): CUDA_ERROR_INVALID_HANDLE.
//     cuEventRecord(ev, s): ev and s must be of the same device, else
//     CUDA_ERROR_INVALID_HANDLE. cuStreamWaitEvent(s, ev, flags): ev may be of
//     another device (as cuda.h says); flags 0 or CU_EVENT_WAIT_EXTERNAL (the
//     latter only on a capturing stream), else CUDA_ERROR_INVALID_VALUE.
//     Outside a capture it has nothing to wait for; waiting on an event last
//     recorded in a capture: CUDA_ERROR_NOT_SUPPORTED while that capture is
//     ongoing (a stream joining a capture is not modelled),
//     CUDA_ERROR_CAPTURED_EVENT after it ended.
//   * cuCtxSynchronize trims the pools of the current context's device,
//     cuCtxSynchronize_v2(ctx) (CUDA 13's, which cuGetProcAddress hands out
//     from version 13000, and cudaDeviceSynchronize calls with the current
//     context) those of ctx's device (null: the current context's; no
//     current context needed otherwise), cuStreamSynchronize those of the
//     stream's.
//   * Stream capture. cuStreamBeginCapture_v2(s, mode): mode a
//     CUstreamCaptureMode, else CUDA_ERROR_INVALID_VALUE; the legacy stream (0
//     for the plain entry points, CU_STREAM_LEGACY) cannot be captured
//     (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); a stream already capturing
//     (even an invalidated capture not yet ended): CUDA_ERROR_ILLEGAL_STATE.
//     Created streams and the per-thread default stream (a separate stream
//     per thread and device) can be captured. While capturing, work enqueued
//     on the stream (cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync,
//     cuEventRecord, cuStreamWaitEvent, and their runtime counterparts) is
//     not executed: each successful call adds one node to the capture
//     (captured_operations). A captured allocation is a fresh allocation of
//     the pool (a live pool pointer, usable by the program) that belongs to
//     the graph: it is released when the graph is destroyed, or at once if
//     the capture ends without a graph. A captured free frees nothing (the
//     memory stays live; a second free of the same pointer in the same
//     capture: CUDA_ERROR_INVALID_VALUE). A captured record makes the event
//     "last recorded in a capture". Waiting, in a capture, on an event of
//     another ongoing capture: CUDA_ERROR_STREAM_CAPTURE_MERGE. Work for an
//     invalidated capture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED (nothing
//     done). The copies and fills (cuMemcpyHtoD_v2, cudaMemcpy, ...) are
//     synchronous and not subject to capture in the double.
//     cuStreamEndCapture(s, &graph): graph NULL: CUDA_ERROR_INVALID_VALUE; s
//     not capturing: CUDA_ERROR_ILLEGAL_STATE; a capture not begun in
//     CU_STREAM_CAPTURE_MODE_RELAXED ended from another thread:
//     CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (the capture goes on); an
//     invalidated capture: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, the capture
//     ends, *graph = NULL; else the capture ends and *graph is a new graph.
//     cuStreamIsCapturing: CU_STREAM_CAPTURE_STATUS_NONE/ACTIVE/INVALIDATED;
//     for the legacy stream while a blocking stream (created without
//     CU_STREAM_NON_BLOCKING, or a per-thread default stream) of the same
//     device is capturing: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (nothing
//     invalidated). cuThreadExchangeStreamCaptureMode swaps the calling
//     thread's mode (per thread; CU_STREAM_CAPTURE_MODE_GLOBAL at start; NULL
//     or a value that is no mode: CUDA_ERROR_INVALID_VALUE).
//   * Potentially unsafe calls: cuMemAlloc_v2, cuMemFree_v2 of a non-zero
//     pointer, cuCtxSynchronize, cuStreamSynchronize, cuStreamQuery,
//     cuEventSynchronize and cuEventQuery (of any stream or event), and
//     cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemFreeAsync and
//     cuEventRecord on the legacy stream; on the runtime side cudaMalloc,
//     cudaFree of a non-null pointer, cudaMallocAsync, cudaMallocFromPoolAsync
//     and cudaFreeAsync on the legacy stream, and the runtime functions that
//     call the listed driver ones. The calling thread's capture mode decides
//     whether one is prohibited: GLOBAL: if the thread has an ongoing capture
//     (active or invalidated, not yet ended) not begun in RELAXED mode, or
//     another thread has one begun in GLOBAL mode; THREAD_LOCAL: only if the
//     thread has one not begun in RELAXED mode; RELAXED: never. A prohibited
//     call does nothing, invalidates every capture that prohibits it
//     (captures_invalidated counts each capture once) and fails with
//     CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, or with
//     CUDA_ERROR_STREAM_CAPTURE_IMPLICIT when it works on the legacy stream
//     and one of those captures is of a blocking stream of the same device.
//     A call that is not prohibited works normally, except that a capturing
//     stream can never be synchronized or queried (CUDA_ERROR_STREAM_CAPTURE_
//     UNSUPPORTED, its capture invalidated).
//   * Graphs (CUgraph == cudaGraph_t): opaque handles. cuGraphGetNodes(g,
//     nodes, &n): n = the number of captured operations when nodes is NULL;
//     else at most n opaque non-NULL node handles, the rest of the n entries
//     NULL, and n = how many were written (as cuda.h says). cuGraphDestroy
//     releases the graph's captured allocations that are still live. Unknown
//     or destroyed graph, n NULL: CUDA_ERROR_INVALID_VALUE. Graphs cannot be
//     instantiated or launched.
//   * The _ptsz entry points behave like the plain ones, except that a null
//     stream is taken (and recorded, see cuda_double_last_alloc_stream) as
//     CU_STREAM_PER_THREAD, the calling thread's per-thread default stream.
//   * cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2 / cuMemsetD8_v2: the device side must
//     lie inside one live allocation, and any range that starts inside one
//     must end inside it, else CUDA_ERROR_INVALID_VALUE; 0 bytes: success.
//   * cuPointerGetAttribute, for a pointer inside a live allocation (else
//     CUDA_ERROR_INVALID_VALUE): CONTEXT (the device's primary context),
//     MEMORY_TYPE (CU_MEMORYTYPE_DEVICE), DEVICE_POINTER, DEVICE_ORDINAL,
//     RANGE_START_ADDR, RANGE_SIZE, MEMPOOL_HANDLE (NULL unless a pool
//     allocation); any other attribute: CUDA_ERROR_NOT_SUPPORTED.
//   * cuMemGetAddressRange_v2(&base, &size, ptr): the start and size (as
//     requested) of the live allocation containing ptr, of any kind (imported
//     included); base or size may be NULL; ptr in none:
//     CUDA_ERROR_NOT_FOUND (what cuda.h lists for it). The CUDA 2.x
//     cuMemGetAddressRange (32-bit sizes) is not provided.
//   * Peer access: one-directional, per (context, peer context) pair, as in
//     CUDA. cuDeviceCanAccessPeer(&can, dev, peer): can NULL:
//     CUDA_ERROR_INVALID_VALUE; dev or peer no device:
//     CUDA_ERROR_INVALID_DEVICE; else *can = 1 for two distinct devices, 0
//     for dev == peer and under CUDA_DOUBLE_NO_PEER. cuCtxEnablePeerAccess(
//     peer, flags) gives the current context access to peer's memory; checks,
//     in this order: flags not 0: CUDA_ERROR_INVALID_VALUE; peer NULL or no
//     primary context: CUDA_ERROR_INVALID_CONTEXT; peer the current context
//     (its own device): CUDA_ERROR_INVALID_DEVICE (cuda.h names
//     INVALID_CONTEXT for this case; the double gives what the runtime's
//     cudaErrorInvalidDevice stands for); CUDA_DOUBLE_NO_PEER:
//     CUDA_ERROR_PEER_ACCESS_UNSUPPORTED; already enabled:
//     CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED. cuCtxDisablePeerAccess(peer):
//     peer NULL or no primary context: CUDA_ERROR_INVALID_CONTEXT; not enabled
//     from the current context (its own context included):
//     CUDA_ERROR_PEER_ACCESS_NOT_ENABLED. What it gives: cudaMalloc and
//     cuMemAlloc_v2 memory of the peer's device becomes accessible from the
//     context's device; pool memory does not (see pool access;
//     cuda_double_can_access says which). A primary context reset drops the
//     access from and to its context.
//   * Pool access: per pool, the access of each device. The pool's own device
//     always has CU_MEM_ACCESS_FLAGS_PROT_READWRITE; every other device starts
//     with PROT_NONE and keeps it whatever peer access says (as with real
//     pools: enabling peer access does not make pool memory accessible) until
//     cuMemPoolSetAccess(pool, map, count) changes it. After the
//     CUDA_DOUBLE_NO_POOLS check: map NULL with count > 0, unknown or
//     destroyed pool: CUDA_ERROR_INVALID_VALUE; count 0: success, nothing
//     changes. Every descriptor is checked before any is applied (the first
//     bad one, in order, decides the error and nothing changes): location
//     type not CU_MEM_LOCATION_TYPE_DEVICE or id no device:
//     CUDA_ERROR_INVALID_VALUE; flags neither PROT_NONE nor PROT_READWRITE
//     (PROT_READ included: device memory has no read-only access; CUDA's
//     documentation does not say, the double refuses it):
//     CUDA_ERROR_INVALID_VALUE; the pool's own device: PROT_READWRITE is
//     accepted and changes nothing, PROT_NONE fails with
//     CUDA_ERROR_INVALID_DEVICE (its access cannot be revoked: what real
//     drivers answer, see rapidsai/rmm#1753 and NVIDIA/cuda-python#2871);
//     another device given PROT_READWRITE under CUDA_DOUBLE_NO_PEER:
//     CUDA_ERROR_INVALID_DEVICE (not peer capable). cuMemPoolGetAccess(&flags,
//     pool, &location): the device's access; flags or location NULL, location
//     no device, unknown pool: CUDA_ERROR_INVALID_VALUE. A destroyed pool's
//     access is gone with it; a reset gives the device's default pool its
//     default access again.
//   * Exports, as measured on an H200 (driver 580, CUDA 13.0).
//     cuMemPoolExportToShareableHandle(out, pool, type, flags), after the
//     CUDA_DOUBLE_NO_POOLS check: out NULL, unknown or imported pool, flags
//     not 0, type not exactly one handle type the pool was created with (a
//     default pool has none): CUDA_ERROR_INVALID_VALUE; CU_MEM_HANDLE_TYPE_
//     POSIX_FILE_DESCRIPTOR: *(int*)out = a new file descriptor of the pool's
//     arena (close-on-exec, the caller's to close), and the pool counts as
//     exported from then on; CU_MEM_HANDLE_TYPE_FABRIC:
//     CUDA_ERROR_NOT_PERMITTED (no IMEX channel, as on an H200 without one),
//     with CUDA_DOUBLE_FABRIC_OK a 64-byte CUmemFabricHandle naming the pool
//     (which cannot be imported); a Windows type (possible only through
//     CUDA_DOUBLE_POOL_HANDLE_TYPES): CUDA_ERROR_NOT_SUPPORTED.
//     cuMemPoolExportPointer(out, ptr), after the CUDA_DOUBLE_NO_POOLS check:
//     out NULL, or ptr not exactly the start of a live allocation of a pool
//     created with a handle type (an interior pointer included, as measured;
//     imported memory too): CUDA_ERROR_INVALID_VALUE; else 64 bytes that
//     identify the pool and the allocation (a serial number never reused,
//     size, device) and where another process finds its bytes: the arena
//     file (st_dev, st_ino of the memfd) and the offset in it, and whether
//     the pool had been exported when the data was made.
//   * Imports. cuMemPoolImportFromShareableHandle(&pool, handle, type, flags)
//     (needs a current context; after the CUDA_DOUBLE_NO_POOLS check):
//     handle is the file descriptor cast to a pointer ((void*)(uintptr_t)fd);
//     pool NULL, type not CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, flags not
//     0, or fd not an arena of a driver double (a memfd named
//     "cuda_double_arena.<device>", the exporting pool's device), or that
//     device not one of this process's (not measured):
//     CUDA_ERROR_INVALID_VALUE. Else an imported pool that maps the arena, on
//     the exporting pool's device, where the memory lives, whichever device
//     the current context's is (its memory reports that device; another
//     device needs cuMemPoolSetAccess, as for any pool); the caller may close
//     its descriptor at once (as measured); the same arena imported again
//     while that pool lives gives the same handle (as measured); importing
//     its own pool in the exporting process works too (a second mapping of
//     the same bytes, a pool of its own). An imported pool cannot allocate
//     (cuMemAllocFromPoolAsync: CUDA_ERROR_INVALID_VALUE, as cuda.h says), it
//     has no readable attributes (cuMemPoolGetAttribute:
//     CUDA_ERROR_INVALID_VALUE, as measured), it cannot be exported again; it
//     can be destroyed (what was imported through it goes with it).
//     cuMemPoolImportPointer(&ptr, pool, data): ptr or data NULL, pool not a
//     live imported pool, data not export data of that pool's arena, or made
//     before the exporter exported the pool (as measured):
//     CUDA_ERROR_INVALID_VALUE; else ptr = the block's bytes in this
//     process's mapping, a live allocation of kind 4 (imported) that counts
//     in no device memory of this process and is freed (once) with
//     cuMemFree_v2, cudaFree or cuMemFreeAsync/cudaFreeAsync; a second free:
//     CUDA_ERROR_INVALID_VALUE. The same data imported again gives the same
//     pointer, without a reference count (one free ends it, as measured).
//     Data of a block the exporter has freed since can still be imported (as
//     measured: the bytes are whatever is there); an import that overlaps
//     the bytes of earlier imports of other blocks (the exporter reused
//     them) makes those earlier ones unknown. Copies, fills and
//     cuPointerGetAttribute work on imported memory as on any allocation (the
//     same bytes the exporter sees).
//   * cuIpcGetMemHandle(&handle, ptr) (legacy IPC): handle NULL, or ptr not
//     exactly the start of a live cudaMalloc / cuMemAlloc_v2 allocation
//     (unknown, interior, or pool memory of any pool, imported memory
//     included, as measured on an H200): CUDA_ERROR_INVALID_VALUE; else 64
//     bytes that identify the allocation and the process that made them (the
//     same each time for one allocation; different for memory allocated
//     again at the same address).
//     cuIpcOpenMemHandle_v2(&ptr, handle, flags) (and the CUDA 4.1
//     cuIpcOpenMemHandle, the same): ptr NULL, flags not exactly
//     CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (0 or 2 as measured), a handle the
//     driver did not make (zeros, random bytes, as measured):
//     CUDA_ERROR_INVALID_VALUE; a handle of cuIpcGetMemHandle opened in the
//     process that made it: CUDA_ERROR_INVALID_CONTEXT (as measured); one
//     opened in another process: CUDA_ERROR_INVALID_VALUE (the real driver
//     maps that memory; the double cannot, another process's cudaMalloc
//     memory being its private heap). So nothing is ever opened, and
//     cuIpcCloseMemHandle(ptr) fails for every pointer with
//     CUDA_ERROR_INVALID_VALUE (never opened).
//   * cuDeviceGetAttribute: CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
//     CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES and compute
//     capability 9.0 as for the runtime; anything else reads 0.
//     cuDeviceGetName: "cuda_double device <n> (test double, not a GPU)".
//   * cuGetErrorName/String: every CUresult of CUDA 13.0 has a name; unknown
//     codes: CUDA_ERROR_INVALID_VALUE and *pStr = NULL (as cuda.h documents).
//   * cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, symbolStatus) takes
//     the base name ("cuMemAlloc", not "cuMemAlloc_v2") and hands out the
//     double's own function (never an interposer's, as the real driver):
//       cuMemAlloc, cuMemFree, cuMemGetInfo, cuMemcpyHtoD, cuMemcpyDtoH,
//       cuMemsetD8 (since 3020), cuCtxPushCurrent, cuCtxPopCurrent,
//       cuEventDestroy (since 4000), cuDevicePrimaryCtxRelease (since
//       11000) -> the _v2 function;
//       cuDevicePrimaryCtxReset -> the CUDA 7.0 ABI for 7000..10999 (the same
//         as _v2, but no symbol of the double is it: only a lookup finds it,
//         as in a driver whose library lacks that ABI's export),
//         cuDevicePrimaryCtxReset_v2 from 11000;
//       cuStreamDestroy -> cuStreamDestroy (the CUDA 2.0 ABI) for 2000..3999,
//         cuStreamDestroy_v2 from 4000;
//       cuIpcOpenMemHandle -> cuIpcOpenMemHandle (the CUDA 4.1 ABI) for
//         4010..10999, cuIpcOpenMemHandle_v2 from 11000;
//       cuMemGetAddressRange (since 3020) -> cuMemGetAddressRange_v2;
//       cuGetProcAddress -> cuGetProcAddress (v1) for 11030..11999,
//         cuGetProcAddress_v2 from 12000;
//       cuStreamBeginCapture (since 10010) -> cuStreamBeginCapture_v2, or
//         cuStreamBeginCapture_v2_ptsz with
//         CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM in flags;
//       cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync (since
//       11020), cuStreamSynchronize, cuStreamQuery, cuEventRecord (since
//       2000), cuStreamWaitEvent (since 3020), cuStreamGetFlags (since 5050),
//       cuStreamEndCapture, cuStreamIsCapturing (since 10000) -> the _ptsz
//         function with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM in
//         flags, else the plain one;
//       every other exported name -> itself (cuInit, cuDeviceGet,
//         cuDeviceGetCount, cuDeviceGetName, cuDeviceGetAttribute,
//         cuCtxGetDevice, cuCtxSynchronize, cuStreamCreate, cuEventCreate,
//         cuEventQuery, cuEventSynchronize since 2000; cuDriverGetVersion
//         since 2020; cuCtxGetCurrent, cuCtxSetCurrent, cuPointerGetAttribute,
//         cuDeviceCanAccessPeer, cuCtxEnablePeerAccess, cuCtxDisablePeerAccess
//         since 4000; cuIpcGetMemHandle, cuIpcCloseMemHandle since 4010;
//         cuStreamCreateWithPriority since 5050;
//         cuGetErrorName/String since 6000; cuDevicePrimaryCtxRetain since
//         7000; cuGraphDestroy, cuGraphGetNodes since 10000;
//         cuThreadExchangeStreamCaptureMode since 10010; cuMemPool* (the
//         access, export and import ones included) since 11020).
//     Under CUDA_DOUBLE_NEWER_ABI, a name it lists, at cudaVersion 13010 or
//     above, with either flag: a newer ABI of it (known or not at older
//     versions), a function of the double that no header declares and no
//     symbol is: it does nothing and fails with CUDA_ERROR_NOT_SUPPORTED
//     (its parameters are unknown; call it with none).
//     A cudaVersion below a name's first version: *pfn = NULL, status
//     CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, CUDA_ERROR_NOT_FOUND (the
//     older ABIs are not provided). An unknown name (a suffixed one
//     included): *pfn = NULL, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
//     CUDA_ERROR_NOT_FOUND. symbol or pfn NULL, or flags other than
//     CU_GET_PROC_ADDRESS_LEGACY_STREAM / _PER_THREAD_DEFAULT_STREAM:
//     CUDA_ERROR_INVALID_VALUE. symbolStatus may be NULL. cuGetProcAddress
//     (v1) is the same without symbolStatus. The _v2_ptds memcpy/memset
//     variants do not exist here: the per-thread flag gives the plain _v2.
//     Every call is counted per symbol (cuda_double_proc_lookups).
//   * Failing driver calls count in failed_calls (except those the runtime
//     double makes for a runtime call: that one counts); the driver has no
//     "last error" (the runtime's is not touched by driver calls).
//
// ================================================================= virtual GPU
//
// With CUDA_DOUBLE_SIMULATE=SEED the work put on streams is also executed, on
// a simulated GPU (virtual_gpu.hpp), so that the order in which it runs can
// be checked; everything above still holds, except where this says otherwise.
//   * Tasks: every launch (cuLaunchKernel(_ptsz)), event record, stream wait,
//     stream-ordered allocation and free, and every synchronous copy or fill
//     (cudaMemcpy, cudaMemset, cuMemcpyHtoD/DtoH, cuMemsetD8: a task on the
//     legacy stream of the device memory's device, waited for before the call
//     returns) not captured is a task on its stream. A task runs after the one
//     before it on its stream; on the legacy stream after the work submitted
//     before it to every blocking stream of its device (created blocking
//     streams, per-thread default streams), and those after the legacy
//     stream's work submitted before them; a stream wait after the record the
//     event had when the wait was called (none: nothing to wait for). A
//     destroyed stream's tasks still run.
//   * When: tasks run only inside CUDA calls, under the model's lock. Each
//     call may first run some ready tasks, picked by SEED: how often a
//     call runs any, how many, and which streams are slow (picked rarely,
//     never starved) differ from seed to seed. A synchronization runs tasks
//     until what it waits for has run: cuStreamSynchronize (the stream's
//     last task), cuEventSynchronize (the event's last record),
//     cuCtxSynchronize, and cudaFree/cuMemFree (every task of every device:
//     native cudaFree does not free memory that work anywhere may still use). cuStreamQuery and cuEventQuery
//     answer not ready while that task has not run.
//   * Pools: a block freed by cuMemFreeAsync is kept, at its address, for
//     the pool to hand out again to an allocation of the same size: at once
//     on the stream it was freed on; on another stream once its free has run
//     (cudaMemPoolReuseAllowOpportunistic), when the allocating stream's last
//     task waits for the free (...FollowEventDependencies: through tasks not
//     yet run only), or with the allocation waiting for the free
//     (...AllowInternalDependencies): as each attribute of the pool allows.
//     Mostly it does, whenever allowed (SEED picks which block). A trim
//     gives back the kept blocks whose free has run.
//   * Access checks: the program says what it was handed out
//     (cuda_double_sim_handout): each call makes a new owner of the range.
//     A task touches memory when it is a launch of cuda_double_touch_kernel
//     (the ranges its parameters name) or a copy or fill (its device
//     ranges); each touch belongs to the owner of its range at submission.
//     When the task runs, a touch of one owner whose range overlaps a later
//     owner's that has already run work, or an earlier owner's that still
//     has work pending, is a use after reissue: reported on stderr (the
//     seed, the task, both owners' histories; the first three in full) and
//     counted (cuda_double_sim_get_summary).
//   * Graphs: a launch of cuda_double_touch_kernel captured into a graph
//     adds what it touches to the graph; a launch of its executable graph
//     (cuGraphLaunch) is one task, touching all of that (owners resolved at
//     the launch). A host function is a task that touches nothing.
//   * Not modelled: other captured work (a captured copy, fill, record or
//     stream-ordered allocation is not run at a graph's launch), memory
//     contents (copies and fills act at the call), the driver's own timing.
#pragma once

#include <stdint.h>

#include <cuda_runtime_api.h>

#define CUDA_DOUBLE_API __attribute__((visibility("default")))

// What cuda_double_last_free_stream/last_alloc_stream return while no such
// call has succeeded since start-up or the last cuda_double_reset_counters
// (0 would be ambiguous: it is the legacy default stream).
#define CUDA_DOUBLE_NO_STREAM ((cudaStream_t)(~(uintptr_t)0))

#ifdef __cplusplus
extern "C" {
#endif

// Counts of successful calls since start-up or the last reset, by entry point.
// Both libraries count here. (New fields are only ever appended.)
struct cuda_double_counters {
  unsigned long long native_mallocs;   // cudaMalloc calls that allocated (size > 0)
  unsigned long long native_frees;     // cudaFree calls that freed something (a pool or
                                       // cuMemAlloc_v2 pointer included); cudaFree(nullptr)
                                       // is not counted
  unsigned long long pool_allocs;      // cudaMallocFromPoolAsync + cudaMallocAsync +
                                       // cuMemAllocFromPoolAsync(_ptsz) + cuMemAllocAsync(_ptsz)
                                       // calls that allocated (size > 0)
  unsigned long long pool_frees;       // cudaFreeAsync + cuMemFreeAsync(_ptsz) calls that
                                       // freed something
  unsigned long long pools_created;    // cudaMemPoolCreate + cuMemPoolCreate (default pools
                                       // not counted)
  unsigned long long pools_destroyed;  // cudaMemPoolDestroy + cuMemPoolDestroy
  unsigned long long failed_calls;     // calls of any exported CUDA function, runtime or
                                       // driver, that returned an error (cudaGetLastError/
                                       // Peek never count; a driver function that the
                                       // runtime double called for a runtime function does
                                       // not count, that runtime function does)
  unsigned long long driver_mallocs;   // cuMemAlloc_v2 calls that allocated
  unsigned long long driver_frees;     // cuMemFree_v2 calls that freed something (a pool or
                                       // cudaMalloc pointer included); cuMemFree_v2(0) is not
                                       // counted
  // Work is counted only when executed: the same calls on a capturing stream
  // count in captured_operations instead (for pool_allocs and pool_frees too).
  unsigned long long streams_created;         // cuStreamCreate + cuStreamCreateWithPriority (so
                                              // cudaStreamCreate*) successes
  unsigned long long streams_destroyed;       // cuStreamDestroy + cuStreamDestroy_v2 successes (the
                                              // streams a reset destroys are not counted)
  unsigned long long events_recorded;         // cuEventRecord(_ptsz) executed
  unsigned long long stream_waits;            // cuStreamWaitEvent(_ptsz) executed
  unsigned long long context_synchronizes;    // cuCtxSynchronize(_v2) (so cudaDeviceSynchronize)
                                              // successes
  unsigned long long stream_synchronizes;     // cuStreamSynchronize(_ptsz) (so
                                              // cudaStreamSynchronize) successes
  unsigned long long captures_begun;          // cuStreamBeginCapture_v2(_ptsz) successes
  unsigned long long captures_invalidated;    // captures invalidated (each once)
  unsigned long long captured_operations;     // nodes added to captures (calls on a capturing
                                              // stream that succeeded)
  unsigned long long primary_context_resets;  // cuDevicePrimaryCtxReset(_v2) (so cudaDeviceReset)
                                              // successes
  // cuMemFreeAsync(_ptsz) successes (captured ones included; not cudaFreeAsync)
  // by the stream they were given (a _ptsz call given 0: per-thread):
  unsigned long long free_async_legacy_stream;        // 0 (plain) or CU_STREAM_LEGACY
  unsigned long long free_async_per_thread_stream;    // CU_STREAM_PER_THREAD
  unsigned long long free_async_blocking_stream;      // created without CU_STREAM_NON_BLOCKING
  unsigned long long free_async_non_blocking_stream;  // created with CU_STREAM_NON_BLOCKING
  // Peer access, pool access and exports (so their runtime counterparts too):
  unsigned long long peer_access_enables;        // cuCtxEnablePeerAccess successes
  unsigned long long peer_access_disables;       // cuCtxDisablePeerAccess successes (a reset's drops
                                                 // not counted)
  unsigned long long pool_access_sets;           // cuMemPoolSetAccess successes (count 0 included)
  unsigned long long pool_access_owner_entries;  // descriptors naming the pool's own device, in
                                                 // cuMemPoolSetAccess calls given a live pool
                                                 // (and a map), whether the call succeeded or not
  unsigned long long pool_handle_exports;        // cuMemPoolExportToShareableHandle successes
  unsigned long long pool_pointer_exports;       // cuMemPoolExportPointer successes
  unsigned long long ipc_mem_handles;            // cuIpcGetMemHandle successes
  // Imports and legacy IPC opens (so their runtime counterparts too):
  unsigned long long pool_handle_imports;     // cuMemPoolImportFromShareableHandle successes (the same pool
                                              // handed out again included)
  unsigned long long pool_pointer_imports;    // cuMemPoolImportPointer successes (the same pointer handed out
                                              // again included)
  unsigned long long ipc_mem_opens;           // cuIpcOpenMemHandle(_v2) successes (none: see the driver section)
  unsigned long long ipc_mem_closes;          // cuIpcCloseMemHandle successes (none, likewise)
  unsigned long long runtime_device_queries;  // cudaGetDevice calls (a thread inside the runtime when
                                              // another forks can leave the child's exit hanging)
  unsigned long long pitched_mallocs;         // cudaMallocPitch + cudaMalloc3D + cuMemAllocPitch_v2
                                              // calls that allocated (not in native_ or driver_mallocs)
  unsigned long long host_mallocs;            // cudaMallocHost + cudaHostAlloc + cuMemAllocHost_v2 +
                                              // cuMemHostAlloc calls that allocated
  unsigned long long host_frees;              // cudaFreeHost + cuMemFreeHost calls that freed something
};

CUDA_DOUBLE_API struct cuda_double_counters cuda_double_get_counters(void);

// Zeroes every counter (cuda_double_proc_lookups included) and forgets the last
// alloc/free/wait streams. Allocations, pools, streams, events, captures,
// graphs, contexts, capture modes and the last errors are left alone.
CUDA_DOUBLE_API void cuda_double_reset_counters(void);

// 0: p is not the start of a live allocation (unknown, freed, interior or host
// pointer); 1: from cudaMalloc; 2: from a pool (cudaMallocAsync,
// cudaMallocFromPoolAsync, cuMemAllocAsync(_ptsz), cuMemAllocFromPoolAsync(_ptsz));
// 3: from cuMemAlloc_v2 (the "driver" kind); 4: imported
// (cuMemPoolImportPointer, cudaMemPoolImportPointer).
CUDA_DOUBLE_API int cuda_double_pointer_kind(void const* p);

// Number of live imported allocations (kind 4; also counted in
// cuda_double_live_allocations).
CUDA_DOUBLE_API int cuda_double_imported_allocations(void);

// The processes that take memory of `device` (its allocations and pools'
// reservations): with CUDA_DOUBLE_SHARED_MEMORY every live process sharing
// the file, else this one. Up to `max` pids and byte counts; returns how many.
// (The NVML double, libnvidia-ml.so.1, answers its process queries with it.)
CUDA_DOUBLE_API int cuda_double_device_processes(int device, unsigned* pids, unsigned long long* bytes, int max);

// The pool a live pool allocation starting at p came from (for cudaMallocAsync:
// the device's default pool, the one cudaDeviceGetDefaultMemPool returns; for
// imported memory the imported pool); nullptr for anything else.
CUDA_DOUBLE_API cudaMemPool_t cuda_double_pointer_pool(void const* p);

// The stream passed to the last successful cudaFreeAsync / cuMemFreeAsync(_ptsz),
// and to the last successful cudaMallocFromPoolAsync, cudaMallocAsync,
// cuMemAllocFromPoolAsync(_ptsz) or cuMemAllocAsync(_ptsz), on any thread (a
// _ptsz call given 0 records CU_STREAM_PER_THREAD, i.e. cudaStreamPerThread);
// CUDA_DOUBLE_NO_STREAM if none since start-up or the last reset.
CUDA_DOUBLE_API cudaStream_t cuda_double_last_free_stream(void);
CUDA_DOUBLE_API cudaStream_t cuda_double_last_alloc_stream(void);

// The stream passed to the last successful cuStreamWaitEvent(_ptsz) (so
// cudaStreamWaitEvent), captured or not, on any thread (a _ptsz call given 0
// records CU_STREAM_PER_THREAD); CUDA_DOUBLE_NO_STREAM if none since start-up
// or the last reset.
CUDA_DOUBLE_API cudaStream_t cuda_double_last_wait_stream(void);

// The stream passed to the last successful cuEventRecord(_ptsz) (so
// cudaEventRecord), captured or not, on any thread; CUDA_DOUBLE_NO_STREAM
// if none since start-up or the last reset.
CUDA_DOUBLE_API cudaStream_t cuda_double_last_record_stream(void);

// In what order calls came: every successful stream-ordered free
// (CUDA_DOUBLE_FREE_ASYNC, the calls of cuda_double_last_free_stream), stream
// wait (CUDA_DOUBLE_STREAM_WAIT) and event record (CUDA_DOUBLE_EVENT_RECORD)
// takes the next number of one sequence for all three; this returns the last
// one's number of that kind, 0 if none since start-up or the last reset (and
// for any other `call`).
#define CUDA_DOUBLE_FREE_ASYNC   1
#define CUDA_DOUBLE_STREAM_WAIT  2
#define CUDA_DOUBLE_EVENT_RECORD 3
CUDA_DOUBLE_API unsigned long long cuda_double_last_serial(int call);

// The successful event records (CUDA_DOUBLE_EVENT_RECORD: the event and the
// stream it was recorded on) and stream waits (CUDA_DOUBLE_STREAM_WAIT: the
// event and the stream made to wait), captured or not, on any thread, in the
// order they came, since start-up or the last cuda_double_reset_counters (at
// most the first 4096; a special stream as given, _ptsz calls given 0 as
// CU_STREAM_PER_THREAD). Copies up to `max` of them into `out` (which may be
// NULL when max is 0) and returns how many there are.
struct cuda_double_stream_op {
  int call;
  cudaEvent_t event;
  cudaStream_t stream;
};
CUDA_DOUBLE_API size_t cuda_double_stream_ops(struct cuda_double_stream_op* out, size_t max);

// What cuStreamIsCapturing would report for stream, without its rules and
// without being a CUDA call (an interposer does not see it): 0 (none: also
// the legacy stream, an unknown handle, and cudaStreamPerThread on a thread
// without a current context), 1 (active) or 2 (invalidated, not yet ended).
// cudaStreamPerThread is the calling thread's, on its current context's device.
CUDA_DOUBLE_API int cuda_double_stream_is_capturing(cudaStream_t stream);

// Marks a created stream busy (busy != 0) or idle: while busy, cuStreamQuery
// and cudaStreamQuery of it return CUDA_ERROR_NOT_READY / cudaErrorNotReady,
// as for a stream with work in progress, and so does a query of an event
// recorded on it while it was busy (after it is destroyed too), until it is
// marked idle; marked busy again later, it holds up only the events
// recorded since. A synchronization of the stream or of such an event
// completes it (the stream is idle again, the event done). Returns 1, or 0
// for a handle that is no stream created since start-up (destroyed ones count).
CUDA_DOUBLE_API int cuda_double_set_stream_busy(cudaStream_t stream, int busy);

// Makes a stream as cuStreamCreate does, on the current context's device,
// but without being a CUDA call (an interposer does not see it made): 1, or
// 0 without a current context.
CUDA_DOUBLE_API int cuda_double_create_stream_unfollowed(cudaStream_t* stream, unsigned flags);

// Number of live allocations, of every kind together (captured allocations
// that belong to a graph or an ongoing capture included).
CUDA_DOUBLE_API int cuda_double_live_allocations(void);

// Number of cuGetProcAddress and cuGetProcAddress_v2 calls that asked for
// base_name (exact, case-sensitive), found or not, since start-up or the last
// reset; 0 for base_name NULL.
CUDA_DOUBLE_API unsigned long long cuda_double_proc_lookups(const char* base_name);

// What `device` may do with the memory of `pool`, as cuMemPoolGetAccess would
// report it, without its rules and without being a CUDA call: 0 (none), 1
// (read: never granted by the double) or 3 (read-write; always for the pool's
// own device). 0 for an unknown or destroyed pool and for a device ordinal
// that is no device.
CUDA_DOUBLE_API int cuda_double_pool_access(cudaMemPool_t pool, int device);

// 1 if `device` may access the live allocation containing ptr (its start or
// inside), else 0 (also for unknown pointers and ordinals that are no
// device): for cudaMalloc and cuMemAlloc_v2 memory when device is its
// device or device's primary context has peer access to its device's
// (cuCtxEnablePeerAccess); for pool memory when the pool grants device
// access (cuMemPoolSetAccess; its own device always), whatever peer access says.
CUDA_DOUBLE_API int cuda_double_can_access(int device, void const* ptr);

// ---- The virtual GPU (CUDA_DOUBLE_SIMULATE=SEED; see "The virtual GPU" above).

// What the virtual GPU did since start-up (all 0 when it is off).
struct cuda_double_sim_summary {
  unsigned long long enabled;  // 1 when CUDA_DOUBLE_SIMULATE is set
  unsigned long long seed;
  unsigned long long tasks_submitted;  // work put on streams, the shim's included
  unsigned long long tasks_run;
  unsigned long long tasks_pending;          // now
  unsigned long long most_pending;           // at once, at most
  unsigned long long out_of_order_runs;      // a task run while an older ready one waited
  unsigned long long pool_reuses;            // freed pool blocks handed out again by a pool
  unsigned long long reuses_across_streams;  // of which to another stream than the free's
  unsigned long long handouts;               // cuda_double_sim_handout calls
  unsigned long long touches_checked;
  unsigned long long uses_after_reissue;  // touches that broke the order (each reported on stderr)
};
CUDA_DOUBLE_API struct cuda_double_sim_summary cuda_double_sim_get_summary(void);

// The program was handed [p, p + size) (by cudaMalloc or any allocator): a
// new owner of that range for the access checks. Does nothing when off.
CUDA_DOUBLE_API void cuda_double_sim_handout(void const* p, size_t size);
// The program freed what it was handed at p (noted in the owner's history).
CUDA_DOUBLE_API void cuda_double_sim_freed(void const* p);

// A kernel for cuLaunchKernel(_ptsz) that touches memory: kernelParams[0]
// points to an unsigned long long n, and kernelParams[1 + 2i] and
// kernelParams[2 + 2i] (i < n) to a CUdeviceptr and a size_t byte count.
// Under the virtual GPU each range is checked when the kernel runs; without
// it, the launch runs nothing, like any other.
CUDA_DOUBLE_API void* cuda_double_touch_kernel(void);

#ifdef __cplusplus
}  // extern "C"
#endif
