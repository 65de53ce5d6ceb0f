// shared_devices.hpp: CUDA_DOUBLE_SHARED_MEMORY=<file> (see cuda_double.hpp).
// Processes that name the same file share the devices' memory, as processes on
// one GPU do: what each live process takes (its allocations and its pools'
// reservations) is free to none of the others. The file holds one slot per
// process (its pid and the bytes it takes on each of the first
// shared_device_count devices); a slot whose process has ended counts for
// nothing. INTERNAL to the driver double.
#pragma once

#include <cstdint>

namespace cuda_double {

inline constexpr int shared_device_count = 8;  // devices past these are not shared
inline constexpr int shared_slots = 64;        // processes sharing one file at a time

class shared_memory_file {
 public:
  // Bytes of `device` the other live processes take (0 without the file).
  std::uint64_t taken_by_others(int device);
  // This process now takes `bytes` of `device`. Called under the model's lock.
  void publish(int device, std::uint64_t bytes);
  // The live processes sharing the file that take some of `device` (this
  // one included): up to `max` pids and their bytes; how many were written.
  // Without the file, this process alone, taking `mine`.
  int processes(int device, std::uint64_t mine, unsigned* pids, unsigned long long* bytes, int max);
};

shared_memory_file& shared_devices();

}  // namespace cuda_double
