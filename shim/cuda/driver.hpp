// Finding the CUDA driver (libcuda.so.1) the process uses, and the real
// functions the shim needs from it: the ones it calls, and the real ones
// behind the functions it replaces (cuda/api_table.def lists both).
//
// libcuda.so.1 is located on the first call that needs it, among the loaded
// objects (linked with -lcuda, or dlopen()ed by a runtime). Never loaded by
// the shim itself.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <type_traits>

namespace asyncshim::shim {

struct driver_functions {
#define ASYNCSHIM_DRIVER_FUNCTION(field, symbol)              decltype(&::symbol) field = nullptr;
#define ASYNCSHIM_DRIVER_VARIANT(field, symbol, same_type_as) decltype(&::same_type_as) field = nullptr;
#define ASYNCSHIM_DRIVER_HOOK(purpose, lookups, need, field, symbol, lookup_name, abi, params, args) \
  CUresult(*field) params = nullptr;
#include "cuda/api_table.def"

  [[nodiscard]] bool found() const noexcept { return mem_alloc != nullptr && mem_free != nullptr; }
};

// Each replaced function's parameters, as the table gives them (they type
// the binding, the hook and the export), are those of the ABI version the
// table names: a wrong type fails here instead of breaking callers.
#define ASYNCSHIM_DRIVER_HOOK(purpose, lookups, need, field, symbol, lookup_name, abi, params, args) \
  static_assert(std::is_same_v<abi, CUresult(*) params>, #symbol ": the parameters differ from " #abi);
#include "cuda/api_table.def"

/// The process's driver; every pointer is null while none is loaded (looked
/// for again on the next call).
[[nodiscard]] driver_functions const& driver() noexcept;

/// Calls a bound driver function; where the driver lacks it, the error a call
/// without a driver gives. For the hooks that forward to the real function.
template <class Fn, class... Args>
CUresult call_real(Fn real, Args... args) noexcept
{
  return real != nullptr ? real(args...) : CUDA_ERROR_NOT_INITIALIZED;
}

}  // namespace asyncshim::shim
