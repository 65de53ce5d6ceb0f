// describe: every effective setting on one line.

#include <optional>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "asyncshim/config/settings.hpp"
#include "text.hpp"

namespace asyncshim::config {
namespace {

std::string size_or_default(std::optional<size_spec> const& size, std::string_view default_text) {
  return size ? size->to_string() : std::string(default_text);
}

}  // namespace

std::string describe(settings const& values) {
  return fmt::format(
      "initial_pool_size={} release_threshold={} idle_release={} export_handle_type={} stream={} mode={} intercept={} "
      "ordering={} log_level={} "
      "log_file={} "
      "stats_file={} show_stats={} disabled={}",
      size_or_default(values.initial_pool_size, "0 (default)"),
      size_or_default(values.release_threshold, "total device memory (default)"),
      duration_text(values.idle_release_ms) + (values.idle_release_ms == default_idle_release_ms ? " (default)" : ""),
      to_string(values.export_handle_type),
      to_string(values.stream), to_string(values.mode), to_string(values.intercept), to_string(values.ordering),
      to_string(values.level),
      values.log_file.empty() ? std::string("stderr") : detail::escaped(values.log_file),
      values.stats_file.empty() ? std::string("none") : detail::escaped(values.stats_file),
      values.show_stats ? "yes" : "no", values.disabled ? "yes" : "no");
}

}  // namespace asyncshim::config
