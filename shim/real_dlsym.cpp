#include "real_dlsym.hpp"

#include <dlfcn.h>

using dlsym_function = void* (*)(void*, char const*);

extern "C" {

void* asyncshim_real_dlsym_pointer = nullptr;

void* asyncshim_resolve_real_dlsym() noexcept
{
  void* found = __atomic_load_n(&asyncshim_real_dlsym_pointer, __ATOMIC_ACQUIRE);
  if (found == nullptr) {
    found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (found == nullptr) { found = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5"); }
    __atomic_store_n(&asyncshim_real_dlsym_pointer, found, __ATOMIC_RELEASE);
  }
  return found;
}

}  // extern "C"

namespace asyncshim::shim {

void* real_dlsym(void* handle, char const* name) noexcept
{
  auto const fn = reinterpret_cast<dlsym_function>(asyncshim_resolve_real_dlsym());
  return fn != nullptr ? fn(handle, name) : nullptr;
}

}  // namespace asyncshim::shim
