// The text of every diagnostic parse_environment() produces (internal to
// asyncshim::config). Values are quoted as given, with control characters escaped.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "size_parser.hpp"

namespace asyncshim::config::detail {

// half_free_allowed: the variable also takes half-free (the initial pool size).
[[nodiscard]] std::string invalid_size_message(std::string_view name, std::string_view value, size_parse const& why,
                                               bool half_free_allowed);
// "half-free" given to a size other than the initial pool size.
[[nodiscard]] std::string half_free_not_allowed_message(std::string_view name, std::string_view value,
                                                        std::string_view initial_pool_size_name);
[[nodiscard]] std::string invalid_duration_message(std::string_view name, std::string_view value);
[[nodiscard]] std::string invalid_handle_type_message(std::string_view name, std::string_view value);
[[nodiscard]] std::string invalid_stream_message(std::string_view name, std::string_view value);
[[nodiscard]] std::string invalid_mode_message(std::string_view name, std::string_view value);
[[nodiscard]] std::string invalid_intercept_message(std::string_view name, std::string_view value);
[[nodiscard]] std::string invalid_ordering_message(std::string_view name, std::string_view value);
[[nodiscard]] std::string invalid_show_stats_message(std::string_view name, std::string_view value);
[[nodiscard]] std::string invalid_bool_message(std::string_view name, std::string_view value);
// The level stays at its default, and the message says so.
[[nodiscard]] std::string invalid_log_level_message(std::string_view name, std::string_view value);

[[nodiscard]] std::string unknown_variable_message(std::string_view name, std::optional<std::string> const& suggestion,
                                                   std::span<std::string const> known);

[[nodiscard]] std::string disabled_by_variable_message(std::string_view name, std::string_view value);
[[nodiscard]] std::string disabled_by_invalid_settings_message(std::size_t invalid_count);

}  // namespace asyncshim::config::detail
