// The size grammar, with the reason a text is rejected (internal to
// asyncshim::config; parse_size() in the public header drops the reason).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "asyncshim/config/settings.hpp"

namespace asyncshim::config::detail {

enum class size_error {
  none,
  syntax,                ///< not <number>[<spaces>][<unit>] at all
  fractional_bytes,      ///< "1.5" or "1.5B": bytes are whole
  overflow,              ///< more than 2^64 - 1 bytes
  ambiguous_unit,        ///< KB, MB, GB, TB (decimal or binary?)
  percent_out_of_range,  ///< more than 100%
};

struct size_parse {
  std::optional<size_spec> value;  ///< set exactly when error == none
  size_error error = size_error::none;
  /// For ambiguous_unit: the number as written ("4", "1.5") and the binary
  /// unit letter it would take ('K', 'M', 'G' or 'T').
  std::string number;
  char unit_letter = '\0';
};

[[nodiscard]] size_parse parse_size_detailed(std::string_view text);

}  // namespace asyncshim::config::detail
