// cuda_double.h: TEST DOUBLES of the CUDA runtime and driver libraries, for
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
// pools, streams and counters per process): memory from cudaMalloc can be
// freed with cuMemFree_v2 and memory from cuMemAlloc_v2 with cudaFree. The
// model lives in the driver double; libcudart_double.so links against it
// (NEEDED libcuda.so.1) and reaches it through an internal C++ API (model.h),
// never through an exported CUDA function: no exported function of either
// library calls another exported one, so an interposer (the shim) sees
// exactly the calls the program and the shim make.
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
//   cudaMemPoolGetAttribute cudaMallocFromPoolAsync cudaMallocAsync
//   cudaFreeAsync cudaStreamCreate cudaStreamCreateWithFlags cudaStreamDestroy
//   cudaStreamSynchronize cudaDeviceSynchronize cudaGetLastError
//   cudaPeekAtLastError cudaGetErrorName cudaGetErrorString
//   cudaDriverGetVersion cudaRuntimeGetVersion cudaMemcpy cudaMemset
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
//                                  pool reserving 4 GiB costs nothing.
//   CUDA_DOUBLE_NO_POOLS=1         cudaDevAttrMemoryPoolsSupported reads 0 and the
//                                  pool calls (cudaMemPool*, cudaMallocAsync,
//                                  cudaMallocFromPoolAsync, cudaFreeAsync,
//                                  cudaDeviceGetDefaultMemPool) fail with
//                                  cudaErrorNotSupported.
//   CUDA_DOUBLE_POOL_HANDLE_TYPES=N value of cudaDevAttrMemoryPoolSupportedHandleTypes
//                                  (default 9 = posix fd | fabric, as on an H200);
//                                  cudaMemPoolCreate refuses other handle types
//                                  with cudaErrorNotSupported.
// Booleans accept 1/true/yes/on; numbers are decimal or 0x-hex. A value that
// cannot be parsed is reported on stderr and the default is used.
//
// The model, in short:
//   * Each thread has its own runtime device (default 0) and its own last
//     error. Every failing call records its error as the last error;
//     cudaGetLastError returns and clears it, cudaPeekAtLastError returns it.
//   * Contexts, as the real runtime uses them: each device has one primary
//     context, and each thread a stack of current contexts (the driver's, see
//     below). cudaSetDevice(d) makes device d the runtime device and d's
//     primary context current (replacing the top of the stack). cudaMalloc,
//     cudaFree (also of nullptr), cudaMemGetInfo, cudaDeviceSynchronize,
//     cudaMemcpy, cudaMemset and the stream, pool and stream-ordered calls
//     first make the runtime device's primary context current if no context
//     is (after the no-driver/no-device check, before anything else), and
//     then work on the current context's device. cudaGetDevice reports the
//     current context's device, or the runtime device while no context is
//     current; it, cudaGetDeviceCount and cudaDeviceGetAttribute make no
//     context current. So after any runtime call cuCtxGetDevice and
//     cudaGetDevice agree (or cuCtxGetDevice says there is no context).
//     These implicit uses do not count as cuDevicePrimaryCtxRetain.
//   * The first runtime call that passes the no-driver/no-device check
//     (cudaGetDeviceCount included) initializes the driver, as if cuInit(0)
//     had been called.
//   * Per device: used (bytes of live cudaMalloc and cuMemAlloc_v2
//     allocations, exactly as requested) plus the reserved bytes of every pool
//     on it never exceeds CUDA_DOUBLE_MEMORY; cudaMemGetInfo reports free =
//     memory - used - reserved, total = memory, for the current context's
//     device. An allocation that
//     does not fit fails with cudaErrorMemoryAllocation before any host memory
//     is touched.
//   * Allocations are host memory aligned to 256 bytes, contents unspecified
//     (not zero-filled, as on a GPU).
//   * Pools (the per-device default pool included): an allocation of size
//     bytes that does not fit in reserved - used grows reserved to
//     (used + size) rounded up to 2 MiB (never past the pool's maxSize, if
//     one was given). cudaFreeAsync (and cudaFree of a pool pointer) returns
//     the bytes to the pool; reserved stays. cudaFreeAsync of nullptr, or of
//     anything but a live pool allocation, fails with cudaErrorInvalidValue.
//     cudaStreamSynchronize and cudaDeviceSynchronize (nothing else, not even
//     cudaFree) trim every pool of the stream's (current) device to
//     min(reserved, max(used, release threshold)). Destroying a pool frees
//     whatever was still allocated from it; its pointers are then unknown
//     (cudaErrorInvalidValue). A default pool cannot be destroyed.
//     cudaMallocAsync takes the default pool of the stream's device.
//   * Streams: 0, cudaStreamLegacy, cudaStreamPerThread and live handles from
//     cudaStreamCreate(WithFlags) are accepted; anything else fails with
//     cudaErrorInvalidResourceHandle. A created stream belongs to the device
//     of the context that was current when it was created; the special
//     streams stand for the current context's device.
//   * cudaMemcpy copies (memmove) whatever the kind; cudaMemset needs a range
//     inside one live allocation. Either fails with cudaErrorInvalidValue when
//     a range starts inside a live allocation and runs past its end.
//   * cudaDeviceGetAttribute knows cudaDevAttrMemoryPoolsSupported,
//     cudaDevAttrMemoryPoolSupportedHandleTypes (0 without pools) and compute
//     capability 9.0; any other attribute reads 0. Versions are 13000.
//   * Error codes where the real runtime leaves room for doubt: bad pool
//     properties (allocType not pinned, location not a valid device), an
//     unknown or destroyed pool handle, destroying a default pool, unknown
//     stream flags, setting a read-only or non-zero *High pool attribute:
//     cudaErrorInvalidValue. Handle types the device lacks:
//     cudaErrorNotSupported. cudaStreamDestroy of 0, cudaStreamLegacy or
//     cudaStreamPerThread: cudaErrorInvalidResourceHandle. A cudaMemcpyKind
//     outside 0..4: cudaErrorInvalidMemcpyDirection.
//   * No exported function calls another exported one, so an interposer (the
//     shim) sees exactly the calls the program and the shim make.
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
//   cuCtxPopCurrent_v2 cuCtxSynchronize cuMemAlloc_v2 cuMemFree_v2
//   cuMemGetInfo_v2 cuMemcpyHtoD_v2 cuMemcpyDtoH_v2 cuMemsetD8_v2
//   cuMemAllocAsync cuMemAllocAsync_ptsz cuMemFreeAsync cuMemFreeAsync_ptsz
//   cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync_ptsz cuMemPoolCreate
//   cuMemPoolDestroy cuMemPoolSetAttribute cuMemPoolGetAttribute
//   cuStreamCreate cuStreamDestroy_v2 cuStreamSynchronize
//   cuStreamSynchronize_ptsz cuPointerGetAttribute cuGetErrorName
//   cuGetErrorString cuGetProcAddress (CUDA 11.3 ABI, no symbolStatus)
//   cuGetProcAddress_v2
// cuda_driver_double.h declares those cuda.h does not (the _ptsz ones, and
// cuGetProcAddress as cuGetProcAddress_v1).
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
//     driver stays uninitialized; cuDriverGetVersion still says 13000.
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
//     context; cuDevicePrimaryCtxRelease_v2 counts down
//     (CUDA_ERROR_INVALID_CONTEXT below zero). A context is never destroyed
//     or reset, not even at zero retains: its memory stays.
//   * "Needs a current context" (CUDA_ERROR_INVALID_CONTEXT without one):
//     cuCtxGetDevice, cuCtxSynchronize, cuMemAlloc_v2, cuMemGetInfo_v2,
//     cuMemcpyHtoD_v2, cuMemcpyDtoH_v2, cuMemsetD8_v2, cuStreamCreate,
//     cuMemFree_v2 of a non-zero pointer, and every call given a special
//     stream (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD), which stands for the
//     current context's device. The pool calls, cuDevice*, cuStreamDestroy_v2,
//     cuPointerGetAttribute and calls given a created stream need none.
//   * cuMemAlloc_v2: bytesize 0 or dptr NULL: CUDA_ERROR_INVALID_VALUE (as
//     cuda.h documents); memory accounting as cudaMalloc's, on the current
//     context's device; no room: CUDA_ERROR_OUT_OF_MEMORY. The pointer is of
//     kind 3 (cuda_double_pointer_kind).
//   * cuMemFree_v2: 0 is CUDA_SUCCESS (cuda.h does not say; the real driver
//     answers so, like cudaFree(NULL)); any live allocation (cudaMalloc,
//     cuMemAlloc_v2 or pool) is freed, whatever API made it; anything else
//     (unknown, interior, freed, host): CUDA_ERROR_INVALID_VALUE.
//   * Pools and stream-ordered allocation follow the runtime double's rules
//     (same model, same pools): cuMemAllocAsync takes the default pool of the
//     stream's device; size 0 succeeds with *dptr = 0; cuMemFreeAsync of 0 or
//     of anything but a live pool allocation: CUDA_ERROR_INVALID_VALUE;
//     cuStreamSynchronize and cuCtxSynchronize trim the device's pools. Under
//     CUDA_DOUBLE_NO_POOLS every pool call fails with CUDA_ERROR_NOT_SUPPORTED.
//     Error codes: unknown pool, bad properties: CUDA_ERROR_INVALID_VALUE;
//     handle types the device lacks: CUDA_ERROR_NOT_SUPPORTED; a stream that
//     is neither special nor live: CUDA_ERROR_INVALID_HANDLE (also for
//     cuStreamDestroy_v2 of a special one); cuStreamCreate flags other than
//     CU_STREAM_NON_BLOCKING: CUDA_ERROR_INVALID_VALUE.
//   * The _ptsz entry points behave like the plain ones, except that a null
//     stream is taken (and recorded, see cuda_double_last_alloc_stream) as
//     CU_STREAM_PER_THREAD.
//   * cuMemcpyHtoD_v2 / cuMemcpyDtoH_v2 / cuMemsetD8_v2: the device side must
//     lie inside one live allocation, and any range that starts inside one
//     must end inside it, else CUDA_ERROR_INVALID_VALUE; 0 bytes: success.
//   * cuPointerGetAttribute, for a pointer inside a live allocation (else
//     CUDA_ERROR_INVALID_VALUE): CONTEXT (the device's primary context),
//     MEMORY_TYPE (CU_MEMORYTYPE_DEVICE), DEVICE_POINTER, DEVICE_ORDINAL,
//     RANGE_START_ADDR, RANGE_SIZE, MEMPOOL_HANDLE (NULL unless a pool
//     allocation); any other attribute: CUDA_ERROR_NOT_SUPPORTED.
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
//       cuStreamDestroy (since 4000), cuDevicePrimaryCtxRelease (since 11000)
//         -> the _v2 function;
//       cuGetProcAddress -> cuGetProcAddress (v1) for 11030..11999,
//         cuGetProcAddress_v2 from 12000;
//       cuMemAllocAsync, cuMemFreeAsync, cuMemAllocFromPoolAsync (since
//       11020), cuStreamSynchronize (since 2000) -> the _ptsz function with
//         CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM in flags, else the
//         plain one;
//       every other exported name -> itself (cuInit, cuDeviceGet,
//         cuDeviceGetCount, cuDeviceGetName, cuDeviceGetAttribute,
//         cuCtxGetDevice, cuCtxSynchronize, cuStreamCreate since 2000;
//         cuDriverGetVersion since 2020; cuCtxGetCurrent, cuCtxSetCurrent,
//         cuPointerGetAttribute since 4000; cuGetErrorName/String since 6000;
//         cuDevicePrimaryCtxRetain since 7000; cuMemPool* since 11020).
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
//   * Failing driver calls count in failed_calls; the driver has no "last
//     error" (the runtime's is not touched by driver calls).
#ifndef ASYNCSHIM_TESTS_CUDA_DOUBLE_H
#define ASYNCSHIM_TESTS_CUDA_DOUBLE_H

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
                                       // Peek never count)
  unsigned long long driver_mallocs;   // cuMemAlloc_v2 calls that allocated
  unsigned long long driver_frees;     // cuMemFree_v2 calls that freed something (a pool or
                                       // cudaMalloc pointer included); cuMemFree_v2(0) is not
                                       // counted
};

CUDA_DOUBLE_API struct cuda_double_counters cuda_double_get_counters(void);

// Zeroes every counter (cuda_double_proc_lookups included) and forgets the last
// alloc/free streams. Allocations, pools, streams, contexts and the last errors
// are left alone.
CUDA_DOUBLE_API void cuda_double_reset_counters(void);

// 0: p is not the start of a live allocation (unknown, freed, interior or host
// pointer); 1: from cudaMalloc; 2: from a pool (cudaMallocAsync,
// cudaMallocFromPoolAsync, cuMemAllocAsync(_ptsz), cuMemAllocFromPoolAsync(_ptsz));
// 3: from cuMemAlloc_v2 (the "driver" kind).
CUDA_DOUBLE_API int cuda_double_pointer_kind(void const* p);

// The pool a live pool allocation starting at p came from (for cudaMallocAsync:
// the device's default pool, the one cudaDeviceGetDefaultMemPool returns);
// nullptr for anything else.
CUDA_DOUBLE_API cudaMemPool_t cuda_double_pointer_pool(void const* p);

// The stream passed to the last successful cudaFreeAsync / cuMemFreeAsync(_ptsz),
// and to the last successful cudaMallocFromPoolAsync, cudaMallocAsync,
// cuMemAllocFromPoolAsync(_ptsz) or cuMemAllocAsync(_ptsz), on any thread (a
// _ptsz call given 0 records CU_STREAM_PER_THREAD, i.e. cudaStreamPerThread);
// CUDA_DOUBLE_NO_STREAM if none since start-up or the last reset.
CUDA_DOUBLE_API cudaStream_t cuda_double_last_free_stream(void);
CUDA_DOUBLE_API cudaStream_t cuda_double_last_alloc_stream(void);

// Number of live allocations, of every kind together.
CUDA_DOUBLE_API int cuda_double_live_allocations(void);

// Number of cuGetProcAddress and cuGetProcAddress_v2 calls that asked for
// base_name (exact, case-sensitive), found or not, since start-up or the last
// reset; 0 for base_name NULL.
CUDA_DOUBLE_API unsigned long long cuda_double_proc_lookups(const char* base_name);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // ASYNCSHIM_TESTS_CUDA_DOUBLE_H
