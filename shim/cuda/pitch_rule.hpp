// The pitch native cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch give a
// row of a given width, so that a pitched block served from the pool has
// exactly the layout the native call would have given it: the width rounded
// up to the device's texture alignment. tests/gpu/pitch_rule_probe.cu checks
// the rule against the native calls on a GPU; the CUDA test doubles implement
// it as their native behaviour.
#pragma once

#include <cstddef>
#include <optional>

namespace asyncshim::shim {

/// What a device's pitched allocations depend on, from its attributes.
struct pitch_limits {
  std::size_t alignment = 0;  ///< every pitch is a multiple of it
  std::size_t largest = 0;    ///< the largest pitch the device allows
};

/// `device`'s pitch limits, read from the driver once per device; none when
/// the driver does not answer (the native call is then left to serve).
[[nodiscard]] std::optional<pitch_limits> pitch_limits_of(int device) noexcept;

/// The pitch of a row of `width` bytes (width > 0); none beyond the
/// device's largest pitch, where the native call answers with its error.
[[nodiscard]] std::optional<std::size_t> native_pitch(std::size_t width, pitch_limits const& limits) noexcept;

}  // namespace asyncshim::shim
