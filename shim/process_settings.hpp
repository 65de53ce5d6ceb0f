// The process's settings: read from the environment once, on the first
// interposed call (never at load time), with every diagnostic printed then.
#pragma once

#include <asyncshim/config/settings.hpp>

namespace asyncshim::shim {

[[nodiscard]] config::settings const& process_settings() noexcept;

}  // namespace asyncshim::shim
