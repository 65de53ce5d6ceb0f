// sharing_probe: one process of a shared GPU, for tests/gpu/sharing_check.py,
// which runs several of them at once, natively and under the shim.
//   sharing_probe meminfo           free memory as the program sees it, at each
//                                   stage of a short run, by the runtime, by the
//                                   driver (dlsym) and by a cuGetProcAddress lookup
//   sharing_probe allocate BYTES    cudaMalloc, fill, check, cudaFree
//   sharing_probe idle BYTES        allocate and free BYTES, say so, then wait
//                                   until standard input closes
//   sharing_probe turns BYTES       say "ready"; then for each line "go" on standard
//                                   input: allocate, fill, check and free BYTES, and
//                                   say how it went
//   sharing_probe together BYTES    say "ready", wait for one line on standard input,
//                                   then allocate, fill, check and free BYTES ten times
// --device N before the check: cudaSetDevice(N) first, so that all of it is
// on device N (meminfo also checks that its allocations are there); without
// it the runtime's default device, and no cudaSetDevice.
// Exit 0 when everything it tried worked, 1 otherwise; "SKIP: ..." and 0
// without a device, or without device N.
#include "byte_literals.hpp"
#include "probe_common.cuh"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

namespace {

using byte_literals::GiB;
using byte_literals::MiB;

// Fills `bytes` at `p` and checks the first, a middle and the last word.
bool fill_and_check(unsigned* p, std::size_t bytes, unsigned seed)
{
  std::size_t const n = bytes / sizeof(unsigned);
  fill_kernel<<<1024, 256>>>(p, n, seed);
  if (cudaDeviceSynchronize() != cudaSuccess) { return false; }
  for (std::size_t i : {std::size_t{0}, n / 2, n - 1}) {
    unsigned word = 0;
    if (cudaMemcpy(&word, p + i, sizeof(word), cudaMemcpyDeviceToHost) != cudaSuccess || word != pattern(i, seed)) {
      return false;
    }
  }
  return true;
}

// The device --device named, or -1 (none named).
int chosen_device = -1;

// Whether `p` is memory of the device --device named (any device when none
// was): memory info of device N says nothing unless the memory is there.
bool on_chosen_device(void const* p)
{
  if (chosen_device < 0) { return true; }
  cudaPointerAttributes attributes{};
  if (cudaError_t const e = cudaPointerGetAttributes(&attributes, p); e != cudaSuccess) {
    std::printf("meminfo: cudaPointerGetAttributes: %s\n", cudaGetErrorName(e));
    return false;
  }
  if (attributes.device != chosen_device) {
    std::printf("meminfo: the allocation is on device %d, not on device %d\n", attributes.device, chosen_device);
    return false;
  }
  return true;
}

// One allocation's whole life; prints what went wrong.
bool use(std::size_t bytes, unsigned seed)
{
  unsigned* p = nullptr;
  if (cudaError_t const e = cudaMalloc(&p, bytes); e != cudaSuccess) {
    std::printf("cudaMalloc(%zu): %s\n", bytes, cudaGetErrorName(e));
    (void)cudaGetLastError();
    return false;
  }
  bool const ok = fill_and_check(p, bytes, seed);
  if (!ok) { std::printf("fill and check of %zu bytes: wrong\n", bytes); }
  if (cudaError_t const e = cudaFree(p); e != cudaSuccess) {
    std::printf("cudaFree: %s\n", cudaGetErrorName(e));
    return false;
  }
  return ok;
}

using mem_get_info_fn = CUresult (*)(std::size_t*, std::size_t*);

// The driver's cuMemGetInfo_v2 as a program with -lcuda or a dlsym finds it,
// and as a statically linked runtime fetches it.
mem_get_info_fn by_dlsym = nullptr;
mem_get_info_fn by_lookup = nullptr;

bool find_driver_entry_points()
{
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY);
  if (driver == nullptr) { return false; }
  by_dlsym = reinterpret_cast<mem_get_info_fn>(dlsym(driver, "cuMemGetInfo_v2"));
  using lookup_fn = CUresult (*)(char const*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto const lookup = reinterpret_cast<lookup_fn>(dlsym(driver, "cuGetProcAddress_v2"));
  void* found = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (lookup != nullptr && lookup("cuMemGetInfo", &found, 12000, 0, &status) == CUDA_SUCCESS) {
    by_lookup = reinterpret_cast<mem_get_info_fn>(found);
  }
  return by_dlsym != nullptr && by_lookup != nullptr;
}

void print_memory_info(char const* stage)
{
  std::size_t runtime_free = 0, driver_free = 0, lookup_free = 0, total = 0;
  (void)cudaMemGetInfo(&runtime_free, &total);
  (void)by_dlsym(&driver_free, &total);
  (void)by_lookup(&lookup_free, &total);
  std::printf("meminfo %s runtime %zu driver %zu lookup %zu total %zu\n", stage, runtime_free, driver_free, lookup_free,
              total);
}

int meminfo()
{
  if (!find_driver_entry_points()) {
    std::printf("cannot find cuMemGetInfo_v2 in libcuda.so.1\n");
    return 1;
  }
  print_memory_info("start");
  void* small = nullptr;
  if (cudaMalloc(&small, MiB) != cudaSuccess || !on_chosen_device(small)) { return 1; }
  print_memory_info("live-1MiB");
  if (cudaFree(small) != cudaSuccess) { return 1; }
  print_memory_info("freed-1MiB");
  void* large = nullptr;
  if (cudaMalloc(&large, 4 * GiB) != cudaSuccess || !on_chosen_device(large)) { return 1; }
  print_memory_info("live-4GiB");
  if (cudaFree(large) != cudaSuccess) { return 1; }
  print_memory_info("freed-4GiB");
  if (cudaDeviceSynchronize() != cudaSuccess) { return 1; }
  print_memory_info("synchronized");
  return 0;
}

int idle(std::size_t bytes)
{
  if (!use(bytes, 1)) { return 1; }
  std::printf("idle: allocated and freed, waiting\n");
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line)) {}
  return 0;
}

int turns(std::size_t bytes)
{
  if (cudaFree(nullptr) != cudaSuccess) { return 1; }
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  bool all_ok = true;
  unsigned seed = 7;
  while (std::getline(std::cin, line)) {
    if (line != "go") { continue; }
    bool const ok = use(bytes, ++seed);
    all_ok = all_ok && ok;
    std::printf("turn %s\n", ok ? "ok" : "failed");
    std::fflush(stdout);
  }
  return all_ok ? 0 : 1;
}

int together(std::size_t bytes)
{
  if (cudaFree(nullptr) != cudaSuccess) { return 1; }  // the context, before the start
  std::printf("ready\n");
  std::fflush(stdout);
  std::string line;
  std::getline(std::cin, line);
  bool all_ok = true;
  for (unsigned round = 0; round < 10; ++round) {
    all_ok = use(bytes, round) && all_ok;
  }
  std::printf("together: %s\n", all_ok ? "ok" : "failed");
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc > 2 && std::string{argv[1]} == "--device") {
    char* end = nullptr;
    long const device = std::strtol(argv[2], &end, 10);
    if (end == argv[2] || *end != 0 || device < 0 || device > 1023) {
      std::fprintf(stderr, "sharing_probe: --device wants a device number, not '%s'\n", argv[2]);
      return 2;
    }
    chosen_device = static_cast<int>(device);
    argc -= 2;
    argv += 2;
  }
  std::string const what = argc > 1 ? argv[1] : "";
  std::size_t const bytes = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 0;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  if (chosen_device >= devices) {
    std::printf("SKIP: device %d needs %d devices (cudaGetDeviceCount: %d)\n", chosen_device, chosen_device + 1,
                devices);
    return 0;
  }
  if (chosen_device >= 0) {
    if (cudaError_t const e = cudaSetDevice(chosen_device); e != cudaSuccess) {
      std::printf("cudaSetDevice(%d): %s\n", chosen_device, cudaGetErrorName(e));
      return 1;
    }
  }
  if (what == "meminfo") { return meminfo(); }
  if (what == "allocate") {
    bool const ok = use(bytes, 3);
    std::printf("allocate %zu: %s\n", bytes, ok ? "ok" : "failed");
    return ok ? 0 : 1;
  }
  if (what == "idle") { return idle(bytes); }
  if (what == "turns") { return turns(bytes); }
  if (what == "together") { return together(bytes); }
  std::fprintf(stderr, "usage: sharing_probe [--device N] meminfo | allocate BYTES | idle BYTES | turns BYTES | "
                       "together BYTES\n");
  return 2;
}
