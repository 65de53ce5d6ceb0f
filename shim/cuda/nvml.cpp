#include "cuda/nvml.hpp"

#include "cuda/loader.hpp"

#include <dlfcn.h>

#include <atomic>
#include <new>

namespace asyncshim::shim {
namespace {

// The few NVML declarations used (nvml.h is not part of the CUDA toolkit
// everywhere); their layout is NVML's stable C ABI.
using nvml_return = int;
using nvml_device = struct nvml_device_opaque*;
constexpr nvml_return nvml_success = 0;
constexpr nvml_return nvml_insufficient_size = 7;
constexpr unsigned long long nvml_value_not_available = ~0ULL;

struct nvml_process_info {  // nvmlProcessInfo_t, as the _v3 query fills it
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};

struct nvml_functions {
  nvml_return (*init)() = nullptr;
  nvml_return (*shutdown)() = nullptr;
  nvml_return (*device_by_pci_bus_id)(char const*, nvml_device*) = nullptr;
  nvml_return (*compute_processes)(nvml_device, unsigned int*, nvml_process_info*) = nullptr;
};

// Loaded once, on the first question; kept (never unloaded) once complete.
nvml_functions const* nvml() noexcept
{
  static std::atomic<nvml_functions const*> loaded{nullptr};
  if (auto const* f = loaded.load(std::memory_order_acquire)) { return f; }
  void* library = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) { return nullptr; }
  nvml_functions f;
  take_function(library, "nvmlInit_v2", f.init);
  take_function(library, "nvmlShutdown", f.shutdown);
  take_function(library, "nvmlDeviceGetHandleByPciBusId_v2", f.device_by_pci_bus_id);
  take_function(library, "nvmlDeviceGetComputeRunningProcesses_v3", f.compute_processes);
  if (f.init == nullptr || f.shutdown == nullptr || f.device_by_pci_bus_id == nullptr ||
      f.compute_processes == nullptr) {
    return nullptr;
  }
  // Threads that race here load the same library; the first one's table is kept.
  auto* made = new (std::nothrow) nvml_functions(f);
  if (made == nullptr) { return nullptr; }
  nvml_functions const* expected = nullptr;
  if (!loaded.compare_exchange_strong(expected, made, std::memory_order_acq_rel)) {
    delete made;
    return expected;
  }
  return made;
}

}  // namespace

std::optional<std::vector<device_process>> processes_on_device(char const* pci_bus_id)
{
  nvml_functions const* f = nvml();
  if (f == nullptr || f->init() != nvml_success) { return std::nullopt; }
  std::optional<std::vector<device_process>> out;
  nvml_device device = nullptr;
  if (f->device_by_pci_bus_id(pci_bus_id, &device) == nvml_success) {
    // The list can grow between the calls: ask again with room for more.
    std::vector<nvml_process_info> infos(16);
    for (int attempt = 0; attempt < 4; ++attempt) {
      auto count = static_cast<unsigned int>(infos.size());
      nvml_return const r = f->compute_processes(device, &count, infos.data());
      if (r == nvml_insufficient_size) {
        infos.resize(static_cast<std::size_t>(count) + 16);
        continue;
      }
      if (r == nvml_success) {
        out.emplace();
        for (unsigned i = 0; i < count && i < infos.size(); ++i) {
          device_process p;
          p.pid = infos[i].pid;
          if (infos[i].used_gpu_memory != nvml_value_not_available) { p.bytes = infos[i].used_gpu_memory; }
          out->push_back(p);
        }
      }
      break;
    }
  }
  (void)f->shutdown();
  return out;
}

}  // namespace asyncshim::shim
