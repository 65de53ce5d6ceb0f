// The C library's dlsym, for the shim's own lookups. libasyncshim.so exports
// a dlsym of its own (dlsym_interposer.cpp); calling that from inside the shim
// would substitute the very driver functions the shim needs to reach.
#pragma once

namespace asyncshim::shim {

// Resolved once, with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"), falling back
// to "GLIBC_2.2.5" (glibc before 2.34). Calling it from shim code gives
// RTLD_NEXT the meaning "after libasyncshim.so".
[[nodiscard]] void* real_dlsym(void* handle, char const* name) noexcept;

}  // namespace asyncshim::shim

extern "C" {
// For dlsym_interposer.cpp's assembly: the real dlsym once known, and the
// function that finds it.
extern void* asyncshim_real_dlsym_pointer;
void* asyncshim_resolve_real_dlsym() noexcept;
}
