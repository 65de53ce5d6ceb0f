#include "cuda/pitch_rule.hpp"

#include "cuda/driver.hpp"

#include <array>
#include <atomic>

namespace asyncshim::shim {
namespace {

constexpr int most_devices = 64;

// 0: not read yet. Written once per device; a race reads the same values twice.
struct cached_limits {
  std::atomic<std::size_t> alignment{0};
  std::atomic<std::size_t> largest{0};
};
std::array<cached_limits, most_devices> cache{};

std::optional<std::size_t> attribute(CUdevice_attribute which, int device) noexcept
{
  auto const& drv = driver();
  int value = 0;
  if (drv.device_get_attribute == nullptr || drv.device_get_attribute(&value, which, device) != CUDA_SUCCESS ||
      value <= 0) {
    return std::nullopt;
  }
  return static_cast<std::size_t>(value);
}

}  // namespace

std::optional<pitch_limits> pitch_limits_of(int device) noexcept
{
  if (device < 0 || device >= most_devices) { return std::nullopt; }
  cached_limits& c = cache[static_cast<std::size_t>(device)];
  std::size_t const alignment = c.alignment.load(std::memory_order_acquire);
  if (alignment != 0) { return pitch_limits{alignment, c.largest.load(std::memory_order_relaxed)}; }
  std::optional<std::size_t> const read_alignment = attribute(CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, device);
  std::optional<std::size_t> const read_largest = attribute(CU_DEVICE_ATTRIBUTE_MAX_PITCH, device);
  if (!read_alignment || !read_largest) { return std::nullopt; }
  c.largest.store(*read_largest, std::memory_order_relaxed);
  c.alignment.store(*read_alignment, std::memory_order_release);  // after `largest`: read in that order
  return pitch_limits{*read_alignment, *read_largest};
}

std::optional<std::size_t> native_pitch(std::size_t width, pitch_limits const& limits) noexcept
{
  if (width == 0 || width > limits.largest || limits.alignment == 0) { return std::nullopt; }
  std::size_t const pitch = (width + limits.alignment - 1) / limits.alignment * limits.alignment;
  if (pitch > limits.largest) { return std::nullopt; }
  return pitch;
}

}  // namespace asyncshim::shim
