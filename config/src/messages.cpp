#include "messages.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "text.hpp"

namespace asyncshim::config::detail {
namespace {

constexpr std::string_view size_forms =
    "expected a number of bytes with an optional unit B, K/KiB, M/MiB, G/GiB or T/TiB "
    "(powers of 1024; e.g. 4GiB, 1.5G, 1048576) or a percentage of the device's total memory (e.g. 25%)";

constexpr std::string_view native_allocator = "cudaMalloc and cudaFree go to the native allocator unchanged";

std::string_view power_of_1024(char unit_letter) {
  switch (unit_letter) {
    case 'K': return "1024";
    case 'M': return "1024^2";
    case 'G': return "1024^3";
    default: return "1024^4";
  }
}

// "NAME='value' is not a valid <what>: expected one of <accepted>": the
// message of every setting that takes one of a few words.
std::string invalid_choice_message(std::string_view name, std::string_view value, std::string_view what,
                                   std::string_view accepted) {
  return fmt::format("{}={} is not a valid {}: expected one of {}", name, quoted(value), what, accepted);
}

}  // namespace

std::string invalid_size_message(std::string_view name, std::string_view value, size_parse const& why,
                                 bool half_free_allowed) {
  std::string const forms =
      half_free_allowed ? fmt::format("{}, or half-free (half of the device's free memory)", size_forms)
                        : std::string(size_forms);
  switch (why.error) {
    case size_error::ambiguous_unit:
      return fmt::format("{}={} is ambiguous: write {}{}iB ({} x {} bytes) or give the number of bytes", name,
                         quoted(value), why.number, why.unit_letter, why.number, power_of_1024(why.unit_letter));
    case size_error::percent_out_of_range:
      return fmt::format("{}={} is not a valid size: a percentage of the device's total memory must be between 0% "
                         "and 100%",
                         name, quoted(value));
    case size_error::overflow:
      return fmt::format("{}={} is not a valid size (more than 2^64-1 bytes): {}", name, quoted(value), forms);
    case size_error::fractional_bytes:
      return fmt::format("{}={} is not a valid size (bytes are whole: a fraction needs a unit such as KiB, MiB or "
                         "GiB): {}",
                         name, quoted(value), forms);
    case size_error::none:
    case size_error::syntax:
      break;
  }
  return fmt::format("{}={} is not a valid size: {}", name, quoted(value), forms);
}

std::string half_free_not_allowed_message(std::string_view name, std::string_view value,
                                         std::string_view initial_pool_size_name) {
  return fmt::format("{}={} is not a valid size: half-free (half of the device's free memory) is accepted only by "
                     "{}; {}",
                     name, quoted(value), initial_pool_size_name, size_forms);
}

std::string invalid_duration_message(std::string_view name, std::string_view value) {
  return fmt::format("{}={} is not a valid duration: expected a number with the unit ms or s from 1ms to 24h "
                     "(e.g. 500ms, 2s, 1.5s), or off (or 0) for never",
                     name, quoted(value));
}

std::string invalid_handle_type_message(std::string_view name, std::string_view value) {
  return invalid_choice_message(name, value, "export handle type",
                                "none, posix_file_descriptor (or posix_fd), fabric, win32, win32_kmt");
}

std::string invalid_stream_message(std::string_view name, std::string_view value) {
  return invalid_choice_message(name, value, "stream", "legacy, per-thread (or per_thread)");
}

std::string invalid_mode_message(std::string_view name, std::string_view value) {
  return invalid_choice_message(name, value, "mode", "pool, observe");
}

std::string invalid_intercept_message(std::string_view name, std::string_view value) {
  return invalid_choice_message(name, value, "interception level", "runtime, driver, all");
}

std::string invalid_ordering_message(std::string_view name, std::string_view value) {
  return invalid_choice_message(name, value, "ordering", "device, stream, sync");
}

std::string invalid_bool_message(std::string_view name, std::string_view value) {
  return invalid_choice_message(name, value, "boolean", "1, true, yes, on, 0, false, no, off");
}

std::string invalid_show_stats_message(std::string_view name, std::string_view value) {
  return invalid_bool_message(name, value) + "; no statistics table is printed";
}

std::string invalid_log_level_message(std::string_view name, std::string_view value) {
  return invalid_choice_message(name, value, "log level", "trace, debug, info, warn (or warning), error, critical, off") +
         "; using warn";
}

std::string unknown_variable_message(std::string_view name, std::optional<std::string> const& suggestion,
                                     std::span<std::string const> known) {
  // The name may hold anything but '=': escape it as a value would be.
  std::string const bare = escaped(name);
  if (suggestion) return fmt::format("unknown variable {} (ignored); did you mean {}?", bare, *suggestion);
  return fmt::format("unknown variable {} (ignored); known variables: {}", bare, fmt::join(known, ", "));
}

std::string disabled_by_variable_message(std::string_view name, std::string_view value) {
  return fmt::format("disabled by {}={}: {}", name, escaped(value),
                     native_allocator);
}

std::string disabled_by_invalid_settings_message(std::size_t invalid_count) {
  return fmt::format("asyncshim is disabled for this process because of the invalid {} above: {}",
                     invalid_count == 1 ? "setting" : "settings", native_allocator);
}

}  // namespace asyncshim::config::detail
