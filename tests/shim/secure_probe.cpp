// secure_probe DIR: what the shim does in a process that may be a set-user-ID
// program, where LD_PRELOAD cannot bring it in: loads DIR/libcuda.so.1 and
// DIR/libcudart_double.so (the CUDA test doubles) and DIR/libasyncshim.so by
// path, allocates and frees 1 MiB through the shim, and prints
//   secure <AT_SECURE of this process>
//   kind <what the double says the memory was: 1 native, 2 pool>
#include <dlfcn.h>
#include <sys/auxv.h>

#include <cstdio>
#include <string>

int main(int argc, char** argv)
{
  if (argc != 2) {
    std::fprintf(stderr, "usage: secure_probe DIR\n");
    return 2;
  }
  std::string const dir = argv[1];
  void* driver = dlopen((dir + "/libcuda.so.1").c_str(), RTLD_NOW | RTLD_GLOBAL);
  void* runtime = driver != nullptr ? dlopen((dir + "/libcudart_double.so").c_str(), RTLD_NOW | RTLD_GLOBAL) : nullptr;
  void* shim = runtime != nullptr ? dlopen((dir + "/libasyncshim.so").c_str(), RTLD_NOW | RTLD_GLOBAL) : nullptr;
  if (shim == nullptr) {
    std::fprintf(stderr, "secure_probe: %s\n", dlerror());
    return 1;
  }
  using malloc_fn = int (*)(void**, std::size_t);
  using free_fn = int (*)(void*);
  using kind_fn = int (*)(void const*);
  auto const allocate = reinterpret_cast<malloc_fn>(dlsym(shim, "cudaMalloc"));
  auto const release = reinterpret_cast<free_fn>(dlsym(shim, "cudaFree"));
  auto const kind = reinterpret_cast<kind_fn>(dlsym(driver, "cuda_double_pointer_kind"));
  void* p = nullptr;
  if (allocate == nullptr || release == nullptr || kind == nullptr || allocate(&p, 1 << 20) != 0) { return 1; }
  std::printf("secure %lu\nkind %d\n", getauxval(AT_SECURE), kind(p));
  return release(p) == 0 ? 0 : 1;
}
