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

/// `accepted` is the variable's description of the values it accepts (its entry
/// in the table of variables); each message ends with "expected <accepted>".
[[nodiscard]] std::string invalid_size_message(std::string_view name, std::string_view value, size_parse const& why,
                                               std::string_view accepted);
/// "half-free" given to a size other than the initial pool size.
[[nodiscard]] std::string half_free_not_allowed_message(std::string_view name, std::string_view value,
                                                        std::string_view accepted,
                                                        std::string_view initial_pool_size_name);
[[nodiscard]] std::string invalid_count_message(std::string_view name, std::string_view value,
                                                std::string_view accepted);
[[nodiscard]] std::string invalid_duration_message(std::string_view name, std::string_view value,
                                                   std::string_view accepted);
/// "NAME='value' is not a valid <what>: expected one of <accepted>": the
/// message of every setting that takes one of a few words.
[[nodiscard]] std::string invalid_choice_message(std::string_view name, std::string_view value, std::string_view what,
                                                 std::string_view accepted);

[[nodiscard]] std::string unknown_variable_message(std::string_view name, std::optional<std::string> const& suggestion,
                                                   std::span<std::string const> known);

/// A retired variable was set: it still works; `replacement` says what replaced it.
[[nodiscard]] std::string retired_variable_message(std::string_view name, std::string_view value,
                                                   std::string_view replacement);

[[nodiscard]] std::string disabled_by_variable_message(std::string_view name, std::string_view value);
[[nodiscard]] std::string disabled_by_invalid_settings_message(std::size_t invalid_count);

}  // namespace asyncshim::config::detail
