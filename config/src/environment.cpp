// parse_environment: the ASYNCSHIM_* variables of an environ-style array turned
// into settings and diagnostics, by the table of variables (variables.hpp).

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "asyncshim/config/settings.hpp"
#include "messages.hpp"
#include "suggestions.hpp"
#include "text.hpp"
#include "variables.hpp"

namespace asyncshim::config {
namespace {

constexpr std::string_view prefix = "ASYNCSHIM_";

struct entry {
  std::string_view name;
  std::string_view value;
};

// "NAME=VALUE" split at the first '='; an entry without '=' has no value.
entry split(char const* text)
{
  std::string_view const whole(text);
  auto const eq = whole.find('=');
  if (eq == std::string_view::npos) { return {whole, {}}; }
  return {whole.substr(0, eq), whole.substr(eq + 1)};
}

}  // namespace

parse_result parse_environment(char const* const* envp)
{
  auto const table = detail::variable_table();
  auto const& known = known_variables();
  parse_result result;
  settings& values = result.values;

  // The first occurrence of each known name wins, as with getenv; an empty
  // value counts as unset (it is kept, so that a later one does not win).
  // Unknown ASYNCSHIM_* names (prefix in any case) are kept in environment
  // order, each once.
  std::vector<std::optional<std::string_view>> found(table.size());
  std::vector<std::string_view> unknown;
  for (char const* const* it = envp; it != nullptr && *it != nullptr; ++it) {
    auto const [name, value] = split(*it);
    if (auto const index = detail::variable_index(name)) {
      if (!found[*index]) { found[*index] = value; }
      continue;
    }
    if (!detail::istarts_with(name, prefix) || value.empty()) { continue; }
    bool repeated = false;
    for (std::string_view const earlier : unknown) {
      repeated = repeated || earlier == name;
    }
    if (!repeated) { unknown.push_back(name); }
  }

  auto report = [&](log_level level, std::string text) {
    result.diagnostics.push_back(diagnostic{level, std::move(text)});
  };

  // In the table's order; what an invalid value does is the table's too.
  std::size_t invalid = 0;  // invalid values that disable the shim
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (!found[i] || found[i]->empty()) { continue; }
    auto message = table[i].apply(table[i], *found[i], values);
    if (!message) {
      if (!table[i].info.retired.empty()) {
        report(log_level::warn, detail::retired_variable_message(table[i].info.name, *found[i], table[i].info.retired));
      }
      continue;
    }
    report(log_level::error, std::move(*message));
    if (table[i].info.invalid == on_invalid::disables) { ++invalid; }
  }

  for (std::string_view const name : unknown) {
    std::string const upper_name = detail::upper(name);
    report(log_level::warn, detail::unknown_variable_message(name, detail::closest_name(upper_name, known), known));
  }

  // Until the summary below, only the kill switch sets `disabled`.
  if (values.disabled) {
    std::size_t const index = *detail::variable_index(detail::disable_variable);
    report(log_level::info, detail::disabled_by_variable_message(detail::disable_variable, *found[index]));
  }
  if (invalid > 0) {
    values.disabled = true;
    report(log_level::error, detail::disabled_by_invalid_settings_message(invalid));
  }
  return result;
}

}  // namespace asyncshim::config
