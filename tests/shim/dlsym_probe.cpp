// Lookups that have nothing to do with the shim's driver functions, printed
// so that the runs with and without libasyncshim.so can be compared: same
// pointers, same failures, same dlerror() text.
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

namespace {

void show(char const* what, void* handle, char const* name, void* expected)
{
  dlerror();
  void* found = dlsym(handle, name);
  char const* error = dlerror();
  std::printf("%-40s %s%s%s\n", what,
              found == nullptr      ? "null"
              : expected == nullptr ? "found"
              : found == expected   ? "expected"
                                    : "OTHER",
              error != nullptr ? " / " : "", error != nullptr ? error : "");
}

}  // namespace

int main()
{
  void* libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
  void* libm = dlopen("libm.so.6", RTLD_LAZY);
  show("libc strlen", libc, "strlen", reinterpret_cast<void*>(&strlen));
  show("RTLD_DEFAULT printf", RTLD_DEFAULT, "printf", reinterpret_cast<void*>(&std::printf));
  show("RTLD_NEXT strlen", RTLD_NEXT, "strlen", reinterpret_cast<void*>(&strlen));
  show("libm cos", libm, "cos", nullptr);
  show("libm cudnnCreate", libm, "cudnnCreate", nullptr);
  show("RTLD_DEFAULT curl_easy_init", RTLD_DEFAULT, "curl_easy_init", nullptr);
  show("libm cuMemAlloc_v2", libm, "cuMemAlloc_v2", nullptr);
  show("libc (null name handle) cuGetProcAddress", libc, "cuGetProcAddress", nullptr);
  for (int i = 0; i < 100000; ++i) {
    (void)dlsym(libm, "cuMemFree_v2");
  }  // no recursion, no growth
  std::printf("done\n");
  return 0;
}
