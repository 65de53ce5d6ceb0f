// cuda_driver_double.hpp: the functions that the CUDA driver TEST DOUBLE
// (libcuda.so.1 in the build tree's tests/cuda_double/driver/; see
// cuda_double.hpp for what it models) exports but cuda.h does not declare under
// their own names, for tests that call them directly:
//   * the per-thread-default-stream variants (_ptsz), which cuda.h declares only
//     when compiling with CUDA_API_PER_THREAD_DEFAULT_STREAM (and then under the
//     plain names);
//   * the legacy cuGetProcAddress without symbolStatus (the CUDA 11.3 ABI),
//     which cuda.h hides behind "#define cuGetProcAddress cuGetProcAddress_v2";
//     here it is cuGetProcAddress_v1, bound to the symbol "cuGetProcAddress";
//   * likewise the CUDA 2.0 cuStreamDestroy ("#define cuStreamDestroy
//     cuStreamDestroy_v2"): here cuStreamDestroy_v1, bound to "cuStreamDestroy",
//     and the CUDA 4.1 cuIpcOpenMemHandle ("#define cuIpcOpenMemHandle
//     cuIpcOpenMemHandle_v2"): here cuIpcOpenMemHandle_v1, bound to
//     "cuIpcOpenMemHandle".
// Everything else the driver double exports is declared by cuda.h.
#pragma once

#include <stddef.h>

#include <cuda.h>

#include "cuda_double.hpp"

#ifdef __cplusplus
extern "C" {
#endif

CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUDA_DOUBLE_API CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUDA_DOUBLE_API CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                              CUstream hStream);
CUDA_DOUBLE_API CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream hStream);
CUDA_DOUBLE_API CUresult CUDAAPI cuStreamQuery_ptsz(CUstream hStream);
CUDA_DOUBLE_API CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream hStream, unsigned int* flags);
CUDA_DOUBLE_API CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUDA_DOUBLE_API CUresult CUDAAPI cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUDA_DOUBLE_API CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUDA_DOUBLE_API CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph);
CUDA_DOUBLE_API CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus);
CUDA_DOUBLE_API CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                     unsigned int gridDimZ, unsigned int blockDimX,
                                                     unsigned int blockDimY, unsigned int blockDimZ,
                                                     unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                                                     void** extra);
CUDA_DOUBLE_API CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUDA_DOUBLE_API CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void* userData);
CUDA_DOUBLE_API CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount,
                                                    CUstream hStream);
CUDA_DOUBLE_API CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N,
                                                      CUstream hStream);
// A driver function no CUDA header declares (a newer driver's, as a lookup
// sees it): found by cuGetProcAddress("cuDoubleFutureFunction"), does nothing.
CUDA_DOUBLE_API CUresult CUDAAPI cuDoubleFutureFunction(CUstream hStream);

CUDA_DOUBLE_API CUresult CUDAAPI cuGetProcAddress_v1(const char* symbol, void** pfn, int cudaVersion,
                                                     cuuint64_t flags) __asm__("cuGetProcAddress");
CUDA_DOUBLE_API CUresult CUDAAPI cuStreamDestroy_v1(CUstream hStream) __asm__("cuStreamDestroy");
CUDA_DOUBLE_API CUresult CUDAAPI cuIpcOpenMemHandle_v1(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                                       unsigned int Flags) __asm__("cuIpcOpenMemHandle");

#ifdef __cplusplus
}  // extern "C"
#endif
