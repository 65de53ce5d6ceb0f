#include "loaded_library.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstring>

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

void* loaded_library(bool (*matches)(char const* path)) noexcept
{
  search s{matches, {}, false};
  dl_iterate_phdr(remember_match, &s);
  return s.found ? dlopen(s.path, RTLD_LAZY | RTLD_NOLOAD) : nullptr;
}

}  // namespace asyncshim::shim
