// The most devices the shim serves in one process. Per-device tables are
// arrays of this size, and sets of devices are bits of one 64-bit word.
#pragma once

namespace asyncshim::shim {

inline constexpr int max_devices = 64;
static_assert(max_devices <= 64, "device sets are bits of a std::uint64_t");

}  // namespace asyncshim::shim
