// shared_devices.h: CUDA_DOUBLE_SHARED_MEMORY=<file> (see cuda_double.h).
// Processes that name the same file share the devices' memory, as processes on
// one GPU do: what each live process takes (its allocations and its pools'
// reservations) is free to none of the others. The file holds one slot per
// process (its pid and the bytes it takes on each of the first
// kSharedDevices devices); a slot whose process has ended counts for
// nothing. INTERNAL to the driver double.
#ifndef ASYNCSHIM_TESTS_CUDA_DOUBLE_SHARED_DEVICES_H
#define ASYNCSHIM_TESTS_CUDA_DOUBLE_SHARED_DEVICES_H

#include <cstdint>

namespace cuda_double {

inline constexpr int kSharedDevices = 8;  // devices past these are not shared
inline constexpr int kSharedSlots = 64;   // processes sharing one file at a time

class SharedDevices {
 public:
  // Bytes of `device` the other live processes take (0 without the file).
  std::uint64_t taken_by_others(int device);
  // This process now takes `bytes` of `device`. Called under the model's lock.
  void publish(int device, std::uint64_t bytes);
};

SharedDevices& shared_devices();

}  // namespace cuda_double

#endif  // ASYNCSHIM_TESTS_CUDA_DOUBLE_SHARED_DEVICES_H
