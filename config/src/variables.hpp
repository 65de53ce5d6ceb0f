// The table of configuration variables (internal to asyncshim::config): one
// entry per ASYNCSHIM_* variable with its documentation (variable_info), how
// its value is parsed into the settings and how describe() shows it. Parsing,
// describe(), known_variables(), variables() and asyncshim-settings --list all
// read this table; a new variable is one entry in variables.cpp.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "asyncshim/config/settings.hpp"

namespace asyncshim::config::detail {

struct variable;

/// Sets the variable's field from a value that is not empty. On an invalid value
/// the field is left as it was and the result is the message for the person
/// running the program; parse_environment() then does what info.invalid says.
using apply_function = std::optional<std::string> (*)(variable const& self, std::string_view value, settings& values);
/// The field's effective value as describe() shows it.
using show_function = std::string (*)(settings const& values);

struct variable {
  variable_info info;
  std::string_view what;          ///< the kind of value in messages: "is not a valid <what>"
  std::string_view describe_key;  ///< "<describe_key>=<value>" in describe()
  apply_function apply;
  show_function show;
};

/// In the order of known_variables(), which is also the order of describe()
/// and of the per-variable diagnostics.
[[nodiscard]] std::span<variable const> variable_table() noexcept;

/// The index in variable_table() of the variable spelt exactly `name`.
[[nodiscard]] std::optional<std::size_t> variable_index(std::string_view name) noexcept;

/// The kill switch: parse_environment() reports that it disabled the shim.
inline constexpr std::string_view disable_variable = "ASYNCSHIM_DISABLE";

}  // namespace asyncshim::config::detail
