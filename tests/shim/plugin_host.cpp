// Loads the plugin with RTLD_LOCAL and prints the kind of memory its cudaMalloc
// returned: "pool" under the shim shows it found a runtime it could not see
// through the global scope (the caller's dependency tree).
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv)
{
  if (argc < 2) {
    std::fprintf(stderr, "usage: plugin_host PLUGIN.so [--early-call]\n");
    return 2;
  }
  // --early-call: call cudaMalloc as found by dlsym before any runtime is
  // loaded (it is the shim's, which then finds none); the shim must still
  // find the plugin's runtime later.
  if (argc > 2) {
    using malloc_fn = int (*)(void**, std::size_t);
    auto early = reinterpret_cast<malloc_fn>(dlsym(RTLD_DEFAULT, "cudaMalloc"));
    void* p = nullptr;
    std::printf("early cudaMalloc: %s\n", early == nullptr ? "not found" : early(&p, 16) != 0 ? "failed" : "worked");
  }
  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (plugin == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  auto run = reinterpret_cast<int (*)()>(dlsym(plugin, "plugin_allocate_and_report"));
  int const kind = run != nullptr ? run() : -3;
  std::printf("%s\n", kind == 2 ? "pool" : kind == 1 ? "native" : "error");
  return kind > 0 ? 0 : 1;
}
