// Interception at the driver level: the shim's cuMemAlloc_v2 / cuMemFree_v2
// and the calls it follows (followed_driver_calls.cpp), and how lookups are pointed at
// them. A lookup (dlsym of an explicit library
// handle, cuGetProcAddress, cuGetProcAddress_v2) is answered by the real one
// first; only when the real answer *is* one of the replaced driver functions
// (compared by address, so _v2/_ptsz variants and versions are never
// confused) is the shim's entry point returned instead. Everything else
// resolves exactly as without the shim.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace asyncshim::shim {

// `found` is what the real lookup of `name` returned. Cheap for any name
// other than the few driver functions the shim replaces.
[[nodiscard]] void* replacement_for_lookup(char const* name, void* found) noexcept;
// For cuGetProcAddress results (no useful name: it is the base name).
[[nodiscard]] void* replacement_for_pointer(void* found) noexcept;

// Whether driver-level calls are intercepted now (ASYNCSHIM_INTERCEPT, not
// disabled, not a forked child). Lookups are redirected only then.
[[nodiscard]] bool driver_interception_active() noexcept;
// Whether the shim follows streams, captures, resets and peer access now
// (followed_driver_calls.cpp):
// pool mode, not disabled, not a forked child.
[[nodiscard]] bool tracking_active() noexcept;

// What the shim's cuMemAlloc_v2 / cuMemFree_v2 do (allocator.cpp).
[[nodiscard]] CUresult driver_allocate(CUdeviceptr* dptr, std::size_t bytes) noexcept;
[[nodiscard]] CUresult driver_deallocate(CUdeviceptr ptr) noexcept;

}  // namespace asyncshim::shim
