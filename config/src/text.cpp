#include "text.hpp"

#include <fmt/format.h>

#include <limits>

namespace asyncshim::config::detail {

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

char to_lower(char c) noexcept { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

char to_upper(char c) noexcept { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c; }

std::optional<number_text> split_number(std::string_view text) noexcept
{
  std::size_t pos = 0;
  while (pos < text.size() && is_digit(text[pos])) {
    ++pos;
  }
  number_text out;
  out.digits = text.substr(0, pos);
  if (out.digits.empty()) { return std::nullopt; }
  if (pos < text.size() && text[pos] == '.') {
    std::size_t const start = ++pos;
    while (pos < text.size() && is_digit(text[pos])) {
      ++pos;
    }
    out.fraction = text.substr(start, pos - start);
    if (out.fraction.empty()) { return std::nullopt; }
  }
  out.number = text.substr(0, pos);
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) {
    ++pos;
  }
  out.rest = text.substr(pos);
  return out;
}

std::optional<std::uint64_t> parse_digits(std::string_view digits) noexcept
{
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t value = 0;
  for (char c : digits) {
    auto const d = static_cast<std::uint64_t>(c - '0');
    if (value > (max - d) / 10) { return std::nullopt; }
    value = value * 10 + d;
  }
  return value;
}

std::string_view trim(std::string_view text) noexcept
{
  while (!text.empty() && is_space(text.front())) {
    text.remove_prefix(1);
  }
  while (!text.empty() && is_space(text.back())) {
    text.remove_suffix(1);
  }
  return text;
}

bool iequals(std::string_view a, std::string_view b) noexcept
{
  if (a.size() != b.size()) { return false; }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (to_lower(a[i]) != to_lower(b[i])) { return false; }
  }
  return true;
}

bool istarts_with(std::string_view text, std::string_view prefix) noexcept
{
  return text.size() >= prefix.size() && iequals(text.substr(0, prefix.size()), prefix);
}

std::string upper(std::string_view text)
{
  std::string out(text);
  for (char& c : out) {
    c = to_upper(c);
  }
  return out;
}

std::string escaped(std::string_view value)
{
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    auto const u = static_cast<unsigned char>(c);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      case '\'': out += "\\'"; break;
      case '\\': out += "\\\\"; break;
      default:
        if (u < 0x20 || u == 0x7f) {
          out += fmt::format("\\x{:02x}", static_cast<unsigned>(u));
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string quoted(std::string_view value)
{
  // Appended rather than "'" + ... + "'": GCC 12 warns (-Wrestrict, a false
  // positive) about the operator+ form.
  std::string out = "'";
  out += escaped(value);
  out += '\'';
  return out;
}

}  // namespace asyncshim::config::detail
