// Text as a JSON string literal, for the files the shim writes (statistics,
// leak report): quoted, with quotes, backslashes and control characters escaped.
#pragma once

#include <string>
#include <string_view>

namespace asyncshim::shim {

[[nodiscard]] std::string json_string(std::string_view text);

}  // namespace asyncshim::shim
