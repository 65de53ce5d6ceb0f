// Finding the CUDA runtime of the host program.
//
// libasyncshim.so has no NEEDED entry for libcudart or libcuda: it uses the
// runtime the program itself loaded, so the current device and every other bit
// of runtime state are the program's own, whatever CUDA 12.x/13.x it ships.
// The runtime is looked up once, on the first interposed call, in this order:
//   1. the next definition after this library in the global scope (dlsym
//      RTLD_NEXT): programs linked against libcudart, and libraries loaded
//      with RTLD_GLOBAL (PyTorch does this);
//   2. what the caller of that first call resolves: its own dependency tree,
//      which covers a library dlopen()ed with RTLD_LOCAL;
//   3. any loaded object whose name contains "libcudart".
// All functions are then taken from that one library, never mixed.
#pragma once

#include <cuda_runtime_api.h>

#include <type_traits>

namespace asyncshim::shim {

struct runtime_functions {
#define ASYNCSHIM_RUNTIME_FUNCTION(field, symbol)                        decltype(&::symbol) field = nullptr;
#define ASYNCSHIM_RUNTIME_HOOK(field, symbol, params, hook_params, args) decltype(&::symbol) field = nullptr;
#include "cuda/api_table.def"

  /// False when no CUDA runtime could be found (every pointer is then null).
  [[nodiscard]] bool found() const noexcept { return malloc != nullptr && free != nullptr; }
};

// Each replaced runtime function's parameters, as the table gives them (they
// type the export), are those cuda_runtime_api.h declares.
#define ASYNCSHIM_RUNTIME_HOOK(field, symbol, params, hook_params, args)    \
  static_assert(std::is_same_v<decltype(&::symbol), cudaError_t(*) params>, \
                #symbol ": the parameters differ from the runtime's");
#include "cuda/api_table.def"

/// The program's runtime, located on the first call that finds one (a failed
/// search is tried again on the next call). `caller` is the return address of
/// the interposed call, used by lookup step 2 above.
[[nodiscard]] runtime_functions const& runtime(void const* caller = nullptr) noexcept;

/// The error an interposed call returns when no runtime can be found at all.
inline constexpr cudaError_t runtime_missing_error = cudaErrorInitializationError;

}  // namespace asyncshim::shim
