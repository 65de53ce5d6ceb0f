// Small text helpers shared by the parsers (internal to asyncshim::config).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace asyncshim::config::detail {

/// ASCII-only, locale-independent: environment values are bytes, not text.
/// @{
[[nodiscard]] bool is_space(char c) noexcept;
[[nodiscard]] bool is_digit(char c) noexcept;
[[nodiscard]] char to_lower(char c) noexcept;
[[nodiscard]] char to_upper(char c) noexcept;
/// @}

/// Without leading and trailing white space (space, \t, \n, \v, \f, \r).
[[nodiscard]] std::string_view trim(std::string_view text) noexcept;
[[nodiscard]] bool iequals(std::string_view a, std::string_view b) noexcept;
[[nodiscard]] bool istarts_with(std::string_view text, std::string_view prefix) noexcept;
[[nodiscard]] std::string upper(std::string_view text);

/// A number at the start of a value, as sizes and durations write it:
/// digit+ ( "." digit+ )?, then spaces or tabs, then the rest (the unit).
/// Nothing when there is no digit, or no digit after the point.
/// @{
struct number_text {
  std::string_view digits;    ///< before the point
  std::string_view fraction;  ///< after it; empty without a point
  std::string_view number;    ///< both, with the point
  std::string_view rest;      ///< after the spaces or tabs that follow the number
};
[[nodiscard]] std::optional<number_text> split_number(std::string_view text) noexcept;
/// @}
/// Integer value of a run of decimal digits; nothing when it does not fit 64 bits.
[[nodiscard]] std::optional<std::uint64_t> parse_digits(std::string_view digits) noexcept;

/// The value as it should appear in a one-line message: control characters,
/// single quotes and backslashes escaped (\n, \t, \r, \', \\, \xHH).
[[nodiscard]] std::string escaped(std::string_view value);
/// The same between single quotes: 'value'.
[[nodiscard]] std::string quoted(std::string_view value);

}  // namespace asyncshim::config::detail
