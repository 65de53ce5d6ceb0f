// parse_environment: the ASYNCSHIM_* variables of an environ-style array turned
// into settings and diagnostics; known_variables.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "asyncshim/config/settings.hpp"
#include "messages.hpp"
#include "size_parser.hpp"
#include "suggestions.hpp"
#include "text.hpp"

namespace asyncshim::config {
namespace {

constexpr std::string_view prefix = "ASYNCSHIM_";

// Indices into known_variables(), in its order (which is also the order in
// which per-variable diagnostics are reported).
enum variable : std::size_t {
  var_initial_pool_size,
  var_release_threshold,
  var_idle_release,
  var_export_handle_type,
  var_stream,
  var_mode,
  var_intercept,
  var_ordering,
  var_log_level,
  var_log_file,
  var_stats_file,
  var_show_stats,
  var_disable,
  var_count,
};

struct entry {
  std::string_view name;
  std::string_view value;
};

// "NAME=VALUE" split at the first '='; an entry without '=' has no value.
entry split(char const* text) {
  std::string_view const whole(text);
  auto const eq = whole.find('=');
  if (eq == std::string_view::npos) return {whole, {}};
  return {whole.substr(0, eq), whole.substr(eq + 1)};
}

std::optional<std::size_t> known_index(std::string_view name) {
  auto const& known = known_variables();
  for (std::size_t i = 0; i < known.size(); ++i) {
    if (name == known[i]) return i;
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::string> const& known_variables() {
  static std::vector<std::string> const names{
      "ASYNCSHIM_INITIAL_POOL_SIZE", "ASYNCSHIM_RELEASE_THRESHOLD", "ASYNCSHIM_IDLE_RELEASE", "ASYNCSHIM_EXPORT_HANDLE_TYPE",
      "ASYNCSHIM_STREAM",            "ASYNCSHIM_MODE",              "ASYNCSHIM_INTERCEPT",
      "ASYNCSHIM_ORDERING",          "ASYNCSHIM_LOG_LEVEL",         "ASYNCSHIM_LOG_FILE",          "ASYNCSHIM_STATS_FILE",
      "ASYNCSHIM_SHOW_STATS",        "ASYNCSHIM_DISABLE",
  };
  return names;
}

parse_result parse_environment(char const* const* envp) {
  auto const& known = known_variables();
  parse_result result;
  settings& values = result.values;

  // The first occurrence of each known name wins, as with getenv; an empty
  // value counts as unset. Unknown ASYNCSHIM_* names (prefix in any case) are
  // kept in environment order, each once.
  std::array<std::optional<std::string_view>, var_count> found{};
  std::array<bool, var_count> seen{};
  std::vector<std::string_view> unknown;
  for (char const* const* it = envp; it != nullptr && *it != nullptr; ++it) {
    auto const [name, value] = split(*it);
    if (auto const index = known_index(name)) {
      if (seen[*index]) continue;
      seen[*index] = true;
      if (!value.empty()) found[*index] = value;
      continue;
    }
    if (!detail::istarts_with(name, prefix) || value.empty()) continue;
    bool repeated = false;
    for (std::string_view const earlier : unknown) repeated = repeated || earlier == name;
    if (!repeated) unknown.push_back(name);
  }

  std::size_t invalid = 0;  // invalid values that disable the shim
  auto report = [&](log_level level, std::string text) {
    result.diagnostics.push_back(diagnostic{level, std::move(text)});
  };
  auto size_variable = [&](variable index, std::optional<size_spec>& field, bool half_free_allowed) {
    if (!found[index]) return;
    auto const parsed = detail::parse_size_detailed(*found[index]);
    if (!parsed.value) {
      report(log_level::error, detail::invalid_size_message(known[index], *found[index], parsed, half_free_allowed));
      ++invalid;
    } else if (parsed.value->unit == size_spec::kind::half_of_free && !half_free_allowed) {
      report(log_level::error, detail::half_free_not_allowed_message(known[index], *found[index],
                                                                     known[var_initial_pool_size]));
      ++invalid;
    } else {
      field = parsed.value;
    }
  };

  size_variable(var_initial_pool_size, values.initial_pool_size, true);
  size_variable(var_release_threshold, values.release_threshold, false);

  if (auto const& text = found[var_idle_release]) {
    if (auto const parsed = parse_duration_ms(*text)) {
      values.idle_release_ms = *parsed;
    } else {
      report(log_level::error, detail::invalid_duration_message(known[var_idle_release], *text));
      ++invalid;
    }
  }

  // Enumerated settings that change behaviour: an invalid value disables.
  auto choice_variable = [&](variable index, auto parse, auto message, auto& field) {
    if (!found[index]) return;
    if (auto const parsed = parse(*found[index])) {
      field = *parsed;
    } else {
      report(log_level::error, message(known[index], *found[index]));
      ++invalid;
    }
  };
  choice_variable(var_export_handle_type, parse_handle_type, detail::invalid_handle_type_message,
                  values.export_handle_type);
  choice_variable(var_stream, parse_stream, detail::invalid_stream_message, values.stream);
  choice_variable(var_mode, parse_mode, detail::invalid_mode_message, values.mode);
  choice_variable(var_intercept, parse_intercept, detail::invalid_intercept_message, values.intercept);
  choice_variable(var_ordering, parse_ordering, detail::invalid_ordering_message, values.ordering);

  // A bad level only affects messages: keep the default, do not disable.
  if (auto const& text = found[var_log_level]) {
    if (auto const parsed = parse_log_level(*text)) {
      values.level = *parsed;
    } else {
      report(log_level::error, detail::invalid_log_level_message(known[var_log_level], *text));
    }
  }

  // Any path; whether it can be opened is the shim's business.
  if (auto const& text = found[var_log_file]) values.log_file = std::string(*text);
  if (auto const& text = found[var_stats_file]) values.stats_file = std::string(*text);

  // Like the log level, the table only reports: a bad value prints none.
  if (auto const& text = found[var_show_stats]) {
    if (auto const parsed = parse_bool(*text)) {
      values.show_stats = *parsed;
    } else {
      report(log_level::error, detail::invalid_show_stats_message(known[var_show_stats], *text));
    }
  }

  bool disabled_by_variable = false;
  if (auto const& text = found[var_disable]) {
    if (auto const parsed = parse_bool(*text)) {
      disabled_by_variable = *parsed;
    } else {
      report(log_level::error, detail::invalid_bool_message(known[var_disable], *text));
      ++invalid;
    }
  }

  for (std::string_view const name : unknown) {
    std::string const upper_name = detail::upper(name);
    report(log_level::warn,
           detail::unknown_variable_message(name, detail::closest_name(upper_name, known), known));
  }

  if (disabled_by_variable) {
    values.disabled = true;
    report(log_level::info, detail::disabled_by_variable_message(known[var_disable], *found[var_disable]));
  }
  if (invalid > 0) {
    values.disabled = true;
    report(log_level::error, detail::disabled_by_invalid_settings_message(invalid));
  }
  return result;
}

}  // namespace asyncshim::config
