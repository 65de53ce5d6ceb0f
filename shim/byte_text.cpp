#include "byte_text.hpp"

#include <fmt/format.h>

namespace asyncshim::shim {

std::string approximate_bytes(std::uint64_t bytes)
{
  constexpr char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  return unit == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", value, units[unit]);
}

}  // namespace asyncshim::shim
