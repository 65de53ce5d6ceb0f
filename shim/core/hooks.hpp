// What the shim does in place of each CUDA function it replaces
// (cuda/api_table.def): asyncshim_hook_<field>, defined in core/. The
// exported forwarders (abi/) and the lookup redirection hand these out; none
// throws. Hidden, like everything but the exports.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>

extern "C" {
#define ASYNCSHIM_DRIVER_HOOK(purpose, lookups, need, field, symbol, lookup_name, abi, params, args) \
  CUresult asyncshim_hook_##field params noexcept;
#define ASYNCSHIM_RUNTIME_HOOK(field, symbol, params, hook_params, args) \
  cudaError_t asyncshim_hook_##field hook_params noexcept;
#include "cuda/api_table.def"
}
