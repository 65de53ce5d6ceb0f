// The exported CUDA runtime functions (cudaMalloc, cudaFree): thin
// forwarders to their hooks in core/, generated from cuda/api_table.def. Each
// hook is noexcept all the way down, so no C++ exception reaches the caller.
// The caller's return address goes along: it tells which runtime the program
// uses (cuda/runtime.hpp).
#include "abi/export.hpp"
#include "core/hooks.hpp"

// The exported name is given as an assembler label, so that a cuda.h macro of
// the same name can never rename the export.
#define ASYNCSHIM_RUNTIME_HOOK(field, symbol, params, hook_params, args)         \
  ASYNCSHIM_EXPORT cudaError_t asyncshim_export_##field params __asm__(#symbol); \
  cudaError_t asyncshim_export_##field params { return asyncshim_hook_##field args; }
#include "cuda/api_table.def"
