// cuda_double.h: TEST DOUBLE of the CUDA runtime library, for tests only.
//
// libcudart_double.so is NOT CUDA. It exports a small part of the CUDA runtime
// API (CUDA 13.0 signatures, compiled against the real cuda_runtime_api.h) and
// implements it on the host: "device" memory is ordinary host memory, there is
// no GPU, no kernel ever runs and nothing is asynchronous (every call has
// completed when it returns). It exists so that the CPU test tier can run
// programs and the asyncshim preload library without a GPU and can look inside
// what they did. Never ship it, never put it on a production library path.
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
// Controls: environment variables, read once, at the first call into the
// library (changing them later in the same process has no effect).
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
//   * Each thread has its own current device (default 0) and its own last
//     error. Every failing call records its error as the last error;
//     cudaGetLastError returns and clears it, cudaPeekAtLastError returns it.
//   * Per device: used (bytes of live cudaMalloc allocations, exactly as
//     requested) plus the reserved bytes of every pool on it never exceeds
//     CUDA_DOUBLE_MEMORY; cudaMemGetInfo reports free = memory - used -
//     reserved, total = memory, for the current device. An allocation that
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
//     that was current when it was created; the special streams stand for the
//     calling thread's current device.
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
struct cuda_double_counters {
  unsigned long long native_mallocs;   // cudaMalloc calls that allocated (size > 0)
  unsigned long long native_frees;     // cudaFree calls that freed something (a pool
                                       // pointer included); cudaFree(nullptr) is not counted
  unsigned long long pool_allocs;      // cudaMallocFromPoolAsync + cudaMallocAsync calls
                                       // that allocated (size > 0)
  unsigned long long pool_frees;       // cudaFreeAsync calls that freed something
  unsigned long long pools_created;    // cudaMemPoolCreate (default pools not counted)
  unsigned long long pools_destroyed;  // cudaMemPoolDestroy
  unsigned long long failed_calls;     // calls of any exported CUDA function that returned
                                       // an error (cudaGetLastError/Peek never count)
};

CUDA_DOUBLE_API struct cuda_double_counters cuda_double_get_counters(void);

// Zeroes every counter and forgets the last alloc/free streams. Allocations,
// pools, streams and the last errors are left alone.
CUDA_DOUBLE_API void cuda_double_reset_counters(void);

// 0: p is not the start of a live allocation (unknown, freed, interior or host
// pointer); 1: from cudaMalloc; 2: from a pool (cudaMallocAsync or
// cudaMallocFromPoolAsync).
CUDA_DOUBLE_API int cuda_double_pointer_kind(void const* p);

// The pool a live pool allocation starting at p came from (for cudaMallocAsync:
// the device's default pool, the one cudaDeviceGetDefaultMemPool returns);
// nullptr for anything else.
CUDA_DOUBLE_API cudaMemPool_t cuda_double_pointer_pool(void const* p);

// The stream passed to the last successful cudaFreeAsync, and to the last
// successful cudaMallocFromPoolAsync or cudaMallocAsync, on any thread;
// CUDA_DOUBLE_NO_STREAM if none since start-up or the last reset.
CUDA_DOUBLE_API cudaStream_t cuda_double_last_free_stream(void);
CUDA_DOUBLE_API cudaStream_t cuda_double_last_alloc_stream(void);

// Number of live allocations, cudaMalloc and pool ones together.
CUDA_DOUBLE_API int cuda_double_live_allocations(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // ASYNCSHIM_TESTS_CUDA_DOUBLE_H
