// A message that cannot be made must not end the program: the shim formats
// every message inside its logging `try` (support/log.hpp). This program
// makes cudaMalloc run out of device memory, which the shim reports at warn
// level with figures, while every host allocation made from inside
// libasyncshim.so fails (this program's malloc refuses them).
//   log_failure_probe fail    host allocations fail during the failing cudaMalloc
//   log_failure_probe normal  the same, with host memory (the message is written)
// Prints "survived: cudaMalloc returned <code>, <n> host allocations refused".
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>

extern "C" void* __libc_malloc(size_t size);

namespace {

std::atomic<bool> refusing{false};
std::atomic<int> refused{0};
thread_local bool inside = false;  // dladdr below must not refuse itself

bool called_from_the_shim(void const* caller)
{
  Dl_info info{};
  return dladdr(caller, &info) != 0 && info.dli_fname != nullptr &&
         std::strstr(info.dli_fname, "libasyncshim") != nullptr;
}

}  // namespace

extern "C" void* malloc(size_t size)
{
  if (refusing.load(std::memory_order_relaxed) && !inside) {
    inside = true;
    // operator new (libstdc++, linked into the shim) calls malloc: its caller is in the shim.
    bool const refuse = called_from_the_shim(__builtin_return_address(0));
    inside = false;
    if (refuse) {
      refused.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
  }
  return __libc_malloc(size);
}

int main(int argc, char** argv)
{
  bool const fail = argc > 1 && std::strcmp(argv[1], "fail") == 0;
  void* p = nullptr;
  if (cudaMalloc(&p, 1024) != cudaSuccess || cudaFree(p) != cudaSuccess) {  // the pool exists
    std::puts("FAIL: the first allocation failed");
    return 1;
  }
  refusing.store(fail);
  cudaError_t const result = cudaMalloc(&p, std::size_t{1} << 50);  // 1 PiB: more than the device has
  refusing.store(false);
  std::printf("survived: cudaMalloc returned %d, %d host allocations refused\n", static_cast<int>(result),
              refused.load());
  return 0;
}
