// ASYNCSHIM_MEMORY_LIMIT's parser with the message for a value it refuses
// (internal to asyncshim::config; parse_memory_limit() in the public header
// drops the message).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "asyncshim/config/settings.hpp"

namespace asyncshim::config::detail {

struct memory_limit_parse {
  std::optional<memory_limits> value;  ///< set exactly when message is empty
  std::string message;                 ///< "NAME=value is not a valid limit: why; expected <accepted>"
};

[[nodiscard]] memory_limit_parse parse_memory_limit_detailed(std::string_view name, std::string_view text,
                                                             std::string_view accepted);

}  // namespace asyncshim::config::detail
