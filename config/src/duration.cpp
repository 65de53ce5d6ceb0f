// parse_duration_ms and duration_text: the grammar of durations,
//
//   duration := ws* ( "off" | number [ \t]* unit | "0" ) ws*
//   number   := digit+ ( "." digit+ )?
//   unit     := "ms" | "s"   (case-insensitive)
//
// in whole milliseconds, rounded down; any form of zero means "never". A
// duration that is not zero is 1 ms to 24 h (what rounds down to nothing, or
// is longer than a day, is refused rather than taken for "never").

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "asyncshim/config/settings.hpp"
#include "text.hpp"

namespace asyncshim::config {
namespace {

constexpr std::uint64_t max_u64 = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t longest_ms = std::uint64_t{24} * 60 * 60 * 1000;

// digits * multiple + floor(0.fraction * multiple), or nothing on overflow.
std::optional<std::uint64_t> scaled(std::string_view digits, std::string_view fraction, std::uint64_t multiple)
{
  auto const whole = detail::parse_digits(digits);
  if (!whole || *whole > max_u64 / multiple) { return std::nullopt; }
  std::uint64_t const value = *whole * multiple;
  // Only the first digits of the fraction can matter for a multiple of at most 1000.
  std::uint64_t part = 0;
  std::uint64_t scale = 1;
  for (std::size_t i = 0; i < fraction.size() && i < 3; ++i) {
    part = part * 10 + static_cast<std::uint64_t>(fraction[i] - '0');
    scale *= 10;
  }
  std::uint64_t const extra = part * multiple / scale;
  if (extra > max_u64 - value) { return std::nullopt; }
  return value + extra;
}

// Zero stays zero (never); anything else must be 1 ms .. 24 h.
std::optional<std::uint64_t> in_range(std::optional<std::uint64_t> ms, bool zero_written)
{
  if (!ms) { return std::nullopt; }
  if (*ms == 0) { return zero_written ? ms : std::nullopt; }
  return *ms <= longest_ms ? ms : std::nullopt;
}

bool all_zero(std::string_view digits) { return digits.find_first_not_of('0') == std::string_view::npos; }

}  // namespace

std::optional<std::uint64_t> parse_duration_ms(std::string_view text)
{
  text = detail::trim(text);
  if (detail::iequals(text, "off") || text == "0") { return 0; }
  auto const split = detail::split_number(text);
  if (!split) { return std::nullopt; }
  std::string_view const digits = split->digits;
  std::string_view const fraction = split->fraction;
  std::string_view const unit = split->rest;
  bool const zero = all_zero(digits) && all_zero(fraction);
  if (detail::iequals(unit, "ms")) { return in_range(scaled(digits, fraction, 1), zero); }
  if (detail::iequals(unit, "s")) { return in_range(scaled(digits, fraction, 1000), zero); }
  return std::nullopt;
}

std::string duration_text(std::uint64_t milliseconds)
{
  if (milliseconds == 0) { return "off"; }
  if (milliseconds % 1000 == 0) { return fmt::format("{}s", milliseconds / 1000); }
  return fmt::format("{}ms", milliseconds);
}

}  // namespace asyncshim::config
