// Finding libraries that are already loaded, and taking functions from them,
// for runtime_binding.cpp and driver_binding.cpp.
#pragma once

#include "real_dlsym.hpp"

namespace asyncshim::shim {

// A handle (RTLD_NOLOAD: nothing new is loaded) to the first loaded object
// whose path `matches`, or null. The path is copied out of dl_iterate_phdr
// first: dlopen must not be called while it holds the loader's lock. No
// failing dlopen is made, so dlerror() is left as the program left it.
[[nodiscard]] void* loaded_library(bool (*matches)(char const* path)) noexcept;

// `out` = the function `name` of `library`, through the C library's dlsym.
template <class Fn>
void take_function(void* library, char const* name, Fn& out) noexcept
{
  out = reinterpret_cast<Fn>(real_dlsym(library, name));
}

}  // namespace asyncshim::shim
