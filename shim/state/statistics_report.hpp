// The statistics report written at process exit: the JSON document of
// ASYNCSHIM_STATS_FILE (format: docs/statistics-format.md, "format_version" 1) and
// the table of ASYNCSHIM_SHOW_STATS.
#pragma once

#include "state/device_pools.hpp"
#include "state/statistics.hpp"

#include <asyncshim/config/settings.hpp>

#include <string>

namespace asyncshim::shim {

struct report_sources {
  config::settings const& settings;
  statistics const& stats;
  device_pools const& pools;
};

// The JSON document for process `pid`.
[[nodiscard]] std::string stats_json(report_sources const& sources, long pid);
// The human-readable table, one string per line.
[[nodiscard]] std::string stats_table(report_sources const& sources);
// `path` with every "%p" replaced by `pid`.
[[nodiscard]] std::string expand_stats_path(std::string const& path, long pid);

// Arranges for the report to be written when the process exits (once; call
// it after the program's CUDA runtime is initialized, so that this handler
// runs before the runtime's own teardown). A child made by fork reports
// nothing: it passes everything through (see state/shim_state.cpp).
void report_at_exit(report_sources const& sources) noexcept;

}  // namespace asyncshim::shim
