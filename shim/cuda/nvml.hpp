// What the driver's management library (NVML, libnvidia-ml.so.1) says about
// the processes using a device. Loaded on the first question (an
// out-of-memory report), never at start-up; where it is missing, does not
// know the device or refuses, the answer is "unknown", never an error.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace asyncshim::shim {

struct device_process {
  unsigned pid = 0;                      ///< as NVML sees it (the host's, in a container)
  std::optional<std::uint64_t> bytes{};  ///< device memory it holds; none where NVML cannot say (MIG)
};

/// The compute processes on the device with this PCI bus id (as
/// cuDeviceGetPCIBusId writes it), this one included; nothing when NVML
/// cannot tell. May throw std::bad_alloc.
[[nodiscard]] std::optional<std::vector<device_process>> processes_on_device(char const* pci_bus_id);

}  // namespace asyncshim::shim
