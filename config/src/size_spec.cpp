// size_spec::resolve and size_spec::to_string.

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "asyncshim/config/settings.hpp"

namespace asyncshim::config {
namespace {

// Percentages are resolved in integer arithmetic at a resolution of 10^-9
// percent: a percentage written in decimal (33.3) is first brought back to its
// decimal value (the double is 33.29999...), then the product with the total
// is exact for any 64-bit total, and the division rounds down.
constexpr std::uint64_t percent_scale = 1'000'000'000;       // 10^9 steps per percent
constexpr std::uint64_t whole_scaled = 100 * percent_scale;  // 100%

__extension__ using uint128 = unsigned __int128;  // GCC and Clang; quiet under -Wpedantic

}  // namespace

std::uint64_t size_spec::resolve(std::uint64_t total_bytes, std::uint64_t free_bytes) const
{
  if (unit == kind::bytes) { return bytes; }
  if (unit == kind::half_of_free) { return free_bytes / 2; }
  // Out-of-range values can only come from code, not from parse_size: clamp.
  if (!(percent > 0.0)) {
    return 0;  // also NaN
  }
  if (percent >= 100.0) { return total_bytes; }
  auto const scaled = static_cast<std::uint64_t>(std::llround(percent * static_cast<double>(percent_scale)));
  uint128 const product = static_cast<uint128>(total_bytes) * scaled;
  return static_cast<std::uint64_t>(product / whole_scaled);
}

std::string size_spec::to_string() const
{
  if (unit == kind::half_of_free) { return "half-free"; }
  if (unit == kind::percent_of_total) {
    // The shortest fixed-point text that reads back as the same double:
    // "25", "12.5", "0.001" (never an exponent, which parse_size refuses).
    std::array<char, 400> buffer{};
    auto const [end, ec] =
      std::to_chars(buffer.data(), buffer.data() + buffer.size(), percent, std::chars_format::fixed);
    if (ec != std::errc{}) { return fmt::format("{}%", percent); }
    return std::string(buffer.data(), end) + "%";
  }
  struct unit_name {
    std::string_view name;
    unsigned shift;
  };
  constexpr std::array<unit_name, 4> units{{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}}};
  if (bytes != 0) {
    for (unit_name const& u : units) {
      std::uint64_t const multiple = std::uint64_t{1} << u.shift;
      if (bytes % multiple == 0) { return fmt::format("{}{}", bytes / multiple, u.name); }
    }
  }
  return fmt::format("{}B", bytes);
}

}  // namespace asyncshim::config
