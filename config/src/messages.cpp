#include "messages.hpp"
#include "suggestions.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "text.hpp"

namespace asyncshim::config::detail {
namespace {

constexpr std::string_view native_allocator = "cudaMalloc and cudaFree go to the native allocator unchanged";

std::string_view power_of_1024(char unit_letter)
{
  switch (unit_letter) {
    case 'K': return "1024";
    case 'M': return "1024^2";
    case 'G': return "1024^3";
    default: return "1024^4";
  }
}

}  // namespace

std::string invalid_size_message(std::string_view name, std::string_view value, size_parse const& why,
                                 std::string_view accepted)
{
  switch (why.error) {
    case size_error::ambiguous_unit:
      return fmt::format("{}={} is ambiguous: write {}{}iB ({} x {} bytes) or give the number of bytes", name,
                         quoted(value), why.number, why.unit_letter, why.number, power_of_1024(why.unit_letter));
    case size_error::percent_out_of_range:
      return fmt::format("{}={} is not a valid size: a percentage of the device's total memory must be between 0% "
                         "and 100%",
                         name, quoted(value));
    case size_error::overflow:
      return fmt::format("{}={} is not a valid size (more than 2^64-1 bytes): expected {}", name, quoted(value),
                         accepted);
    case size_error::fractional_bytes:
      return fmt::format("{}={} is not a valid size (bytes are whole: a fraction needs a unit such as KiB, MiB or "
                         "GiB): expected {}",
                         name, quoted(value), accepted);
    case size_error::none:
    case size_error::syntax: break;
  }
  return fmt::format("{}={} is not a valid size: expected {}", name, quoted(value), accepted);
}

std::string half_free_not_allowed_message(std::string_view name, std::string_view value, std::string_view accepted,
                                          std::string_view initial_pool_size_name)
{
  return fmt::format("{}={} is not a valid size: half-free (half of the device's free memory) is accepted only by "
                     "{}; expected {}",
                     name, quoted(value), initial_pool_size_name, accepted);
}

std::string invalid_count_message(std::string_view name, std::string_view value, std::string_view accepted)
{
  return fmt::format("{}={} is not a valid number: expected {}", name, quoted(value), accepted);
}

std::string invalid_duration_message(std::string_view name, std::string_view value, std::string_view accepted)
{
  return fmt::format("{}={} is not a valid duration: expected {}", name, quoted(value), accepted);
}

std::string invalid_choice_message(std::string_view name, std::string_view value, std::string_view what,
                                   std::string_view accepted)
{
  std::string text = fmt::format("{}={} is not a valid {}: expected one of {}", name, quoted(value), what, accepted);
  if (auto const meant = closest_value(value, accepted)) { text += fmt::format("; did you mean {}?", *meant); }
  return text;
}

std::string unknown_variable_message(std::string_view name, std::optional<std::string> const& suggestion,
                                     std::span<std::string const> known)
{
  // The name may hold anything but '=': escape it as a value would be.
  std::string const bare = escaped(name);
  if (suggestion) { return fmt::format("unknown variable {} (ignored); did you mean {}?", bare, *suggestion); }
  return fmt::format("unknown variable {} (ignored); known variables: {}", bare, fmt::join(known, ", "));
}

std::string retired_variable_message(std::string_view name, std::string_view value, std::string_view replacement)
{
  return fmt::format("{}={} still works but is retired: {}", name, escaped(value), replacement);
}

std::string disabled_by_variable_message(std::string_view name, std::string_view value)
{
  return fmt::format("disabled by {}={}: {}", name, escaped(value), native_allocator);
}

std::string disabled_by_invalid_settings_message(std::size_t invalid_count)
{
  return fmt::format("asyncshim is disabled for this process because of the invalid {} above: {}",
                     invalid_count == 1 ? "setting" : "settings", native_allocator);
}

}  // namespace asyncshim::config::detail
