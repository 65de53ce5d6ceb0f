// The metrics file's text (ASYNCSHIM_METRICS_FILE): the statistics of each
// device in Prometheus's text exposition format (version 0.0.4), as
// node_exporter's textfile collector reads it. Every sample carries the
// labels device, pid and program; counters end in _total. Nothing here
// calls CUDA: what only CUDA knows (the pools' reservation) comes from the
// caller.
#pragma once

#include "state/statistics.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace asyncshim::shim {

/// What the caller read for one device.
struct metrics_device {
  int device = 0;
  std::uint64_t reserved_bytes = 0;  ///< the shim's pool's reservation now (0: no pool)
  std::uint64_t limit_bytes = 0;     ///< ASYNCSHIM_MEMORY_LIMIT resolved (0: none)
};

/// The text for the devices the statistics have counted something on, and
/// those in `devices`. Throws std::bad_alloc.
[[nodiscard]] std::string metrics_text(statistics const& stats, std::span<metrics_device const> devices, long pid,
                                       std::string_view program);

}  // namespace asyncshim::shim
