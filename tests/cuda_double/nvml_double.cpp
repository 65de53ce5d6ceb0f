// The NVML double: libnvidia-ml.so.1 for the CPU tier, in a folder of its own
// (nothing finds it unless a test puts that folder on LD_LIBRARY_PATH). It
// answers the few queries the shim's out-of-memory report makes, from the
// driver double's devices: a device is found by the PCI bus id the driver
// double's cuDeviceGetPCIBusId gives it, and its compute processes are the
// processes taking its memory (cuda_double_device_processes).
#include <cstdint>
#include <cstdio>

#include <cuda.h>

#include "cuda_double.hpp"

extern "C" {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvml_double_device*;

struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

namespace {
constexpr nvmlReturn_t success = 0;
constexpr nvmlReturn_t uninitialized = 1;
constexpr nvmlReturn_t invalid_argument = 2;
constexpr nvmlReturn_t not_found = 6;
constexpr nvmlReturn_t insufficient_size = 7;
constexpr int most_processes = 64;
int initialized = 0;  // nvmlInit_v2 calls not yet matched by nvmlShutdown

// Device d's handle is d + 1 (never null).
nvmlDevice_t handle_of(int device) { return reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(device) + 1); }
int device_of(nvmlDevice_t handle) { return static_cast<int>(reinterpret_cast<std::uintptr_t>(handle)) - 1; }
}  // namespace

CUDA_DOUBLE_API nvmlReturn_t nvmlInit_v2()
{
  ++initialized;
  return success;
}

CUDA_DOUBLE_API nvmlReturn_t nvmlShutdown()
{
  if (initialized == 0) { return uninitialized; }
  --initialized;
  return success;
}

CUDA_DOUBLE_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(char const* pciBusId, nvmlDevice_t* device)
{
  if (initialized == 0) { return uninitialized; }
  if (pciBusId == nullptr || device == nullptr) { return invalid_argument; }
  unsigned domain = 0;
  unsigned bus = 0;
  if (std::sscanf(pciBusId, "%x:%x:", &domain, &bus) != 2) { return invalid_argument; }
  int const ordinal = static_cast<int>((domain << 8 | bus)) - 1;
  int count = 0;
  if (ordinal < 0 || cuDeviceGetCount(&count) != CUDA_SUCCESS || ordinal >= count) { return not_found; }
  *device = handle_of(ordinal);
  return success;
}

CUDA_DOUBLE_API nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                                     nvmlProcessInfo_t* infos)
{
  if (initialized == 0) { return uninitialized; }
  if (device == nullptr || infoCount == nullptr) { return invalid_argument; }
  unsigned pids[most_processes];
  unsigned long long bytes[most_processes];
  int const n = cuda_double_device_processes(device_of(device), pids, bytes, most_processes);
  if (*infoCount < static_cast<unsigned>(n) || (n > 0 && infos == nullptr)) {
    *infoCount = static_cast<unsigned>(n);
    return insufficient_size;
  }
  for (int i = 0; i < n; ++i) {
    infos[i] = {pids[i], bytes[i], ~0u, ~0u};
  }
  *infoCount = static_cast<unsigned>(n);
  return success;
}

}  // extern "C"
