// Finding the CUDA driver (libcuda.so.1) the process uses, and the real
// functions the shim needs from it: the ones it calls, and the real ones
// behind the functions it replaces (cuda/api_table.def lists both).
//
// libcuda.so.1 is located on the first call that needs it, among the loaded
// objects (linked with -lcuda, or dlopen()ed by a runtime). Never loaded by
// the shim itself.
#pragma once

#include <cuda.h>

namespace asyncshim::shim {

struct driver_functions {
#define ASYNCSHIM_DRIVER_FUNCTION(field, symbol)              decltype(&::symbol) field = nullptr;
#define ASYNCSHIM_DRIVER_VARIANT(field, symbol, same_type_as) decltype(&::same_type_as) field = nullptr;
#define ASYNCSHIM_DRIVER_HOOK(purpose, lookups, need, field, symbol, lookup_name, params, args) \
  CUresult(*field) params = nullptr;
#include "cuda/api_table.def"

  [[nodiscard]] bool found() const noexcept { return mem_alloc != nullptr && mem_free != nullptr; }
};

// The process's driver; every pointer is null while none is loaded (looked
// for again on the next call).
[[nodiscard]] driver_functions const& driver() noexcept;

}  // namespace asyncshim::shim
