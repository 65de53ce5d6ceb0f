// The shim's messages: "asyncshim[<pid>]: <level>: <text>" on standard error or
// ASYNCSHIM_LOG_FILE, through a private spdlog logger (never spdlog's default
// logger or registry: the host program may have its own spdlog). The logger is
// never destroyed, so messages from atexit handlers and static destructors are safe.
#pragma once

#include <asyncshim/config/settings.hpp>

#include <fmt/format.h>

#include <string>
#include <string_view>
#include <utility>

namespace asyncshim::shim {

/// A byte count for people: "1.5 GiB", "512 B". A message names byte counts
/// through it, so that the text is made inside the message's formatting, where
/// a failure to allocate is caught (log::message).
struct byte_count {
  std::uint64_t bytes = 0;
};

}  // namespace asyncshim::shim

/// Takes the width and alignment of a string ("{:>12}").
template <>
struct fmt::formatter<asyncshim::shim::byte_count> : fmt::formatter<fmt::string_view> {
  template <class Context>
  auto format(asyncshim::shim::byte_count count, Context& ctx) const
  {
    constexpr char const* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    auto value = static_cast<double>(count.bytes);
    int unit = 0;
    while (value >= 1024.0 && unit < 5) {
      value /= 1024.0;
      ++unit;
    }
    fmt::basic_memory_buffer<char, 32> text;  // on the stack
    if (unit == 0) {
      fmt::format_to(std::back_inserter(text), "{} B", count.bytes);
    } else {
      fmt::format_to(std::back_inserter(text), "{:.1f} {}", value, units[unit]);
    }
    return fmt::formatter<fmt::string_view>::format(fmt::string_view{text.data(), text.size()}, ctx);
  }
};

namespace asyncshim::shim::log {

using config::log_level;

/// Sets the level and destination once; until then messages of level warn and
/// above go to standard error. Returns a message when `file` could not be opened.
[[nodiscard]] std::string setup(log_level level, std::string const& file) noexcept;

[[nodiscard]] bool enabled(log_level level) noexcept;
void write(log_level level, std::string_view text) noexcept;

/// Every argument is formatted here, inside the `try`: callers pass values
/// (numbers, byte_count, cuda_status, C strings); a std::string a caller
/// builds for a message is built inside a `try` of its own.
template <class... Args>
void message(log_level level, fmt::format_string<Args...> format, Args&&... args) noexcept
{
  if (!enabled(level)) { return; }
  try {
    write(level, fmt::format(format, std::forward<Args>(args)...));
  } catch (...) {  // formatting can only fail on memory; drop the message
  }
}

template <class... Args>
void trace(fmt::format_string<Args...> f, Args&&... a) noexcept
{
  message(log_level::trace, f, std::forward<Args>(a)...);
}
template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) noexcept
{
  message(log_level::debug, f, std::forward<Args>(a)...);
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... a) noexcept
{
  message(log_level::info, f, std::forward<Args>(a)...);
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) noexcept
{
  message(log_level::warn, f, std::forward<Args>(a)...);
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... a) noexcept
{
  message(log_level::error, f, std::forward<Args>(a)...);
}

}  // namespace asyncshim::shim::log
