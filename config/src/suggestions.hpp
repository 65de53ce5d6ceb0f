// "Did you mean ...?" for misspelt variable names (internal to asyncshim::config).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace asyncshim::config::detail {

// Levenshtein distance, comparing ASCII letters case-insensitively.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `name` (the first one on ties) when its distance is
// at most max(3, name.size() / 3); nothing otherwise.
[[nodiscard]] std::optional<std::string> closest_name(std::string_view name, std::span<std::string const> candidates);

}  // namespace asyncshim::config::detail
