#include "cuda/loader.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

using dlsym_function = void* (*)(void*, char const*);

extern "C" {

void* asyncshim_real_dlsym_pointer = nullptr;

// Also called by the exported dlsym while a sanitizer's runtime starts
// (its own lookups), so not instrumented: ThreadSanitizer is not ready then.
__attribute__((no_sanitize("address", "undefined", "thread"))) void* asyncshim_resolve_real_dlsym() noexcept
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
namespace {

struct search {
  bool (*matches)(char const*);
  char path[4096];
  bool found;
};

int remember_match(dl_phdr_info* info, std::size_t /*size*/, void* out)
{
  auto* s = static_cast<search*>(out);
  char const* name = info->dlpi_name;
  if (name == nullptr || !s->matches(name) || std::strlen(name) >= sizeof s->path) { return 0; }
  std::strcpy(s->path, name);
  s->found = true;
  return 1;
}

}  // namespace

void* real_dlsym(void* handle, char const* name) noexcept
{
  auto const fn = reinterpret_cast<dlsym_function>(asyncshim_resolve_real_dlsym());
  return fn != nullptr ? fn(handle, name) : nullptr;
}

void* loaded_library(bool (*matches)(char const* path)) noexcept
{
  search s{matches, {}, false};
  dl_iterate_phdr(remember_match, &s);
  return s.found ? dlopen(s.path, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
}

}  // namespace asyncshim::shim
