// The metrics file (ASYNCSHIM_METRICS_FILE, docs/metrics.md): written by the
// shim's background thread (core/memory_release.hpp) when it starts and then
// every ASYNCSHIM_METRICS_INTERVAL, each time whole (a temporary file in the
// same folder, then renamed over it, so that a reader never sees half of
// one), and removed at exit. The temporary file's name does not end in .prom:
// node_exporter's textfile collector skips it.
#pragma once

#include "state/shim_state.hpp"

namespace asyncshim::shim {

/// Whether the process writes a metrics file.
[[nodiscard]] inline bool wants_metrics_file(shim_state const& s) noexcept { return !s.settings.metrics_file.empty(); }
/// Writes the file now; says once why it could not.
void write_metrics_file(shim_state& s) noexcept;
/// Removes the file this process wrote (at exit; not in a forked child).
void remove_metrics_file(shim_state& s) noexcept;

}  // namespace asyncshim::shim
