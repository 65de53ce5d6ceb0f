// How lookups are pointed at the shim's hooks (cuda/api_table.def). A lookup
// (dlsym of an explicit library handle, cuGetProcAddress, cuGetProcAddress_v2)
// is answered by the real one first; only when the real answer *is* one of
// the replaced driver functions (compared by address, so _v2/_ptsz variants
// and versions are never confused) is the shim's hook returned instead.
// Everything else resolves exactly as without the shim.
#pragma once

namespace asyncshim::shim {

/// `found` is what the real lookup of `name` returned. Cheap for any name
/// other than the few driver functions the shim replaces.
[[nodiscard]] void* replacement_for_lookup(char const* name, void* found) noexcept;
/// For cuGetProcAddress results (no useful name: it is the base name).
[[nodiscard]] void* replacement_for_pointer(void* found) noexcept;
/// A dlsym of `name` with RTLD_NEXT (`next`) or RTLD_DEFAULT, whose answer the
/// shim does not see: followed submissions end when it may be a driver
/// function the shim does not follow (docs/design.md#followed-submissions).
void global_lookup(char const* name, bool next) noexcept;

/// Whether driver-level calls are intercepted now (ASYNCSHIM_INTERCEPT, not
/// disabled, not a forked child). Lookups are redirected only then.
[[nodiscard]] bool driver_interception_active() noexcept;
/// Whether the shim follows streams, captures, resets and peer access now
/// (core/followed_calls.cpp): pool mode, not disabled, not a forked child.
[[nodiscard]] bool tracking_active() noexcept;
/// Whether a memory limit applies (ASYNCSHIM_MEMORY_LIMIT set, not disabled,
/// not a forked child), in pool and observe mode alike.
[[nodiscard]] bool memory_limit_active() noexcept;

}  // namespace asyncshim::shim
