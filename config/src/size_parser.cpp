// The size grammar:
//
//   size    := ws* ( number ( [ \t]* unit )? | "half-free" | "half_free" ) ws*
//   number  := digit+ ( "." digit+ )?
//   unit    := "%" | "B" | "K" | "KiB" | "M" | "MiB" | "G" | "GiB" | "T" | "TiB"
//              (letters case-insensitive; all multiples are powers of 1024)
//
// A fraction needs a unit other than B (bytes are whole) and rounds down to
// whole bytes. KB/MB/GB/TB are refused as ambiguous. Percentages are 0..100.

#include "size_parser.hpp"

#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <string_view>
#include <system_error>

#include "text.hpp"

namespace asyncshim::config {
namespace detail {
namespace {

constexpr std::uint64_t max_u64 = std::numeric_limits<std::uint64_t>::max();

struct unit_info {
  std::string_view name;
  unsigned shift;  // the multiple is 2^shift
};

constexpr std::array<unit_info, 9> binary_units{{
  {"b", 0},
  {"k", 10},
  {"kib", 10},
  {"m", 20},
  {"mib", 20},
  {"g", 30},
  {"gib", 30},
  {"t", 40},
  {"tib", 40},
}};

constexpr std::array<std::string_view, 4> ambiguous_units{"kb", "mb", "gb", "tb"};

// floor(0.<digits> * 2^shift), exactly, for any number of digits: the digits
// times 2^shift, computed digit by digit from the right; what carries out past
// the decimal point is the integer part. (Each step stays below 10 * 2^40.)
std::uint64_t fraction_times_power_of_two(std::string_view digits, unsigned shift) noexcept
{
  std::uint64_t const multiple = std::uint64_t{1} << shift;
  std::uint64_t carry = 0;
  for (auto it = digits.rbegin(); it != digits.rend(); ++it) {
    std::uint64_t const product = static_cast<std::uint64_t>(*it - '0') * multiple + carry;
    carry = product / 10;
  }
  return carry;
}

// integer * 2^shift + floor(fraction * 2^shift), or nothing on overflow.
std::optional<std::uint64_t> scaled_bytes(std::string_view integer_digits, std::string_view fraction_digits,
                                          unsigned shift) noexcept
{
  auto const integer = parse_digits(integer_digits);
  if (!integer) { return std::nullopt; }
  if (shift > 0 && *integer > (max_u64 >> shift)) { return std::nullopt; }
  std::uint64_t const whole = *integer << shift;
  std::uint64_t const part = fraction_times_power_of_two(fraction_digits, shift);
  if (part > max_u64 - whole) { return std::nullopt; }
  return whole + part;
}

// A percentage no greater than 100, judged on the digits (so that 100.0000001
// is refused however many digits it has).
bool percent_in_range(std::string_view integer_digits, std::string_view fraction_digits) noexcept
{
  while (integer_digits.size() > 1 && integer_digits.front() == '0') {
    integer_digits.remove_prefix(1);
  }
  if (integer_digits.size() > 3) { return false; }
  auto const integer = parse_digits(integer_digits);
  if (!integer || *integer > 100) { return false; }
  if (*integer < 100) { return true; }
  return fraction_digits.find_first_not_of('0') == std::string_view::npos;
}

size_parse failure(size_error why)
{
  size_parse result;
  result.error = why;
  return result;
}

}  // namespace

size_parse parse_size_detailed(std::string_view text)
{
  text = trim(text);
  if (iequals(text, "half-free") || iequals(text, "half_free")) {
    size_parse result;
    result.value = size_spec{size_spec::kind::half_of_free, 0, 0.0};
    return result;
  }

  // The number, then spaces or tabs, then its unit.
  auto const split = split_number(text);
  if (!split) { return failure(size_error::syntax); }
  std::string_view const integer_digits = split->digits;
  std::string_view const fraction_digits = split->fraction;
  std::string_view const number = split->number;
  bool const has_fraction = !fraction_digits.empty();
  std::string_view const unit = split->rest;

  if (unit == "%") {
    if (!percent_in_range(integer_digits, fraction_digits)) { return failure(size_error::percent_out_of_range); }
    double percent = 0.0;
    auto const [end, ec] = std::from_chars(number.data(), number.data() + number.size(), percent);
    if (ec != std::errc{} || end != number.data() + number.size()) { return failure(size_error::syntax); }
    size_parse result;
    result.value = size_spec{size_spec::kind::percent_of_total, 0, percent};
    return result;
  }

  for (std::string_view const ambiguous : ambiguous_units) {
    if (!iequals(unit, ambiguous)) { continue; }
    char const letter = to_upper(ambiguous.front());
    unsigned const shift = letter == 'K' ? 10 : letter == 'M' ? 20 : letter == 'G' ? 30 : 40;
    // Only suggest the binary spelling when it would itself be accepted.
    if (!scaled_bytes(integer_digits, fraction_digits, shift)) { return failure(size_error::overflow); }
    size_parse result = failure(size_error::ambiguous_unit);
    result.number = std::string(number);
    result.unit_letter = letter;
    return result;
  }

  unsigned shift = 0;
  if (!unit.empty()) {
    bool known = false;
    for (unit_info const& candidate : binary_units) {
      if (iequals(unit, candidate.name)) {
        shift = candidate.shift;
        known = true;
        break;
      }
    }
    if (!known) { return failure(size_error::syntax); }
  }
  if (shift == 0 && has_fraction) { return failure(size_error::fractional_bytes); }

  auto const bytes = scaled_bytes(integer_digits, fraction_digits, shift);
  if (!bytes) { return failure(size_error::overflow); }
  size_parse result;
  result.value = size_spec{size_spec::kind::bytes, *bytes, 0.0};
  return result;
}

}  // namespace detail

std::optional<size_spec> parse_size(std::string_view text) { return detail::parse_size_detailed(text).value; }

}  // namespace asyncshim::config
