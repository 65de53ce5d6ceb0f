// "Did you mean ...?" for misspelt variable names (internal to asyncshim::config).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace asyncshim::config::detail {

/// Levenshtein distance, comparing ASCII letters case-insensitively.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidate `name` most likely meant: first by words (words separated by
/// '_'; each word of `name` the same as a word of the candidate, its start, or
/// one letter off; the candidate with the fewest other words, then the closer
/// spelling), else the candidate closest by edit distance (the first one on
/// ties) when that distance is at most max(3, name.size() / 3); else nothing.
[[nodiscard]] std::optional<std::string> closest_name(std::string_view name, std::span<std::string const> candidates);

/// The accepted word `value` most likely meant, for a value that is none of
/// them: the closest by edit distance when at most max(2, value.size() / 3)
/// letters are off (devise for device); nothing otherwise. `accepted` is a
/// variable's list of accepted values in words, "a, b (or c), d".
[[nodiscard]] std::optional<std::string> closest_value(std::string_view value, std::string_view accepted);

}  // namespace asyncshim::config::detail
