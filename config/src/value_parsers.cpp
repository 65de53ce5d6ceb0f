// Parsers and names for the enumerated settings and booleans. All are
// case-insensitive and ignore leading and trailing white space.

#include <array>
#include <optional>
#include <string_view>

#include "asyncshim/config/settings.hpp"
#include "text.hpp"

namespace asyncshim::config {
namespace {

template <class T>
struct spelling {
  std::string_view text;
  T value;
};

template <class T, std::size_t N>
std::optional<T> lookup(std::array<spelling<T>, N> const& table, std::string_view text) noexcept
{
  text = detail::trim(text);
  for (auto const& entry : table) {
    if (detail::iequals(text, entry.text)) { return entry.value; }
  }
  return std::nullopt;
}

constexpr std::array<spelling<handle_type>, 7> handle_types{{
  {"auto", handle_type::automatic},
  {"none", handle_type::none},
  {"posix_file_descriptor", handle_type::posix_file_descriptor},
  {"posix_fd", handle_type::posix_file_descriptor},
  {"fabric", handle_type::fabric},
  {"win32", handle_type::win32},
  {"win32_kmt", handle_type::win32_kmt},
}};

constexpr std::array<spelling<stream_choice>, 3> streams{{
  {"legacy", stream_choice::legacy},
  {"per-thread", stream_choice::per_thread},
  {"per_thread", stream_choice::per_thread},
}};

constexpr std::array<spelling<shim_mode>, 2> modes{{
  {"pool", shim_mode::pool},
  {"observe", shim_mode::observe},
}};

constexpr std::array<spelling<intercept_level>, 3> intercepts{{
  {"runtime", intercept_level::runtime},
  {"driver", intercept_level::driver},
  {"all", intercept_level::all},
}};

constexpr std::array<spelling<ordering_mode>, 3> orderings{{
  {"device", ordering_mode::device},
  {"stream", ordering_mode::stream},
  {"sync", ordering_mode::sync},
}};

constexpr std::array<spelling<log_level>, 8> log_levels{{
  {"trace", log_level::trace},
  {"debug", log_level::debug},
  {"info", log_level::info},
  {"warn", log_level::warn},
  {"warning", log_level::warn},
  {"error", log_level::error},
  {"critical", log_level::critical},
  {"off", log_level::off},
}};

constexpr std::array<spelling<bool>, 8> booleans{{
  {"1", true},
  {"true", true},
  {"yes", true},
  {"on", true},
  {"0", false},
  {"false", false},
  {"no", false},
  {"off", false},
}};

}  // namespace

std::optional<handle_type> parse_handle_type(std::string_view text) { return lookup(handle_types, text); }
std::optional<stream_choice> parse_stream(std::string_view text) { return lookup(streams, text); }
std::optional<shim_mode> parse_mode(std::string_view text) { return lookup(modes, text); }
std::optional<intercept_level> parse_intercept(std::string_view text) { return lookup(intercepts, text); }

std::optional<ordering_mode> parse_ordering(std::string_view text) { return lookup(orderings, text); }
std::optional<log_level> parse_log_level(std::string_view text) { return lookup(log_levels, text); }
std::optional<bool> parse_bool(std::string_view text) { return lookup(booleans, text); }

char const* to_string(handle_type value)
{
  switch (value) {
    case handle_type::automatic: return "auto";
    case handle_type::none: return "none";
    case handle_type::posix_file_descriptor: return "posix_file_descriptor";
    case handle_type::win32: return "win32";
    case handle_type::win32_kmt: return "win32_kmt";
    case handle_type::fabric: return "fabric";
  }
  return "unknown";
}

char const* to_string(stream_choice value)
{
  switch (value) {
    case stream_choice::legacy: return "legacy";
    case stream_choice::per_thread: return "per-thread";
  }
  return "unknown";
}

char const* to_string(shim_mode value)
{
  switch (value) {
    case shim_mode::pool: return "pool";
    case shim_mode::observe: return "observe";
  }
  return "unknown";
}

char const* to_string(intercept_level value)
{
  switch (value) {
    case intercept_level::runtime: return "runtime";
    case intercept_level::driver: return "driver";
    case intercept_level::all: return "all";
  }
  return "unknown";
}

char const* to_string(ordering_mode value)
{
  switch (value) {
    case ordering_mode::device: return "device";
    case ordering_mode::stream: return "stream";
    case ordering_mode::sync: return "sync";
  }
  return "unknown";
}

char const* to_string(log_level value)
{
  switch (value) {
    case log_level::trace: return "trace";
    case log_level::debug: return "debug";
    case log_level::info: return "info";
    case log_level::warn: return "warn";
    case log_level::error: return "error";
    case log_level::critical: return "critical";
    case log_level::off: return "off";
  }
  return "unknown";
}

}  // namespace asyncshim::config
