// fake_interposer: a library that defines cuMemAlloc_v2 and cuMemFree_v2 (and
// nothing else), both failing with CUDA_ERROR_NOT_PERMITTED, to be
// LD_PRELOADed into static_runtime_probe. It checks what the real driver
// does and the driver double must do too: the entry points that
// cuGetProcAddress hands out, and what dlsym() on the driver's own handle
// finds, are the driver's own functions, not those of a preloaded library
// defining the same names. (So an interposer that wants a statically linked
// runtime's calls has to intercept cuGetProcAddress itself.)
#include <cuda.h>

extern "C" {

__attribute__((visibility("default"))) CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t)
{
  if (dptr != nullptr) { *dptr = 0; }
  return CUDA_ERROR_NOT_PERMITTED;
}

__attribute__((visibility("default"))) CUresult CUDAAPI cuMemFree_v2(CUdeviceptr) { return CUDA_ERROR_NOT_PERMITTED; }

}  // extern "C"
