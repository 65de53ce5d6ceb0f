// The shim's process-wide state: the pools, the ownership record, the queued
// frees and the statistics. Made on the first interposed call (never at load
// time) and never destroyed: calls may still arrive from atexit handlers and
// static destructors.
#pragma once

#include "allocation_registry.hpp"
#include "device_pools.hpp"
#include "pending_frees.hpp"
#include "process_settings.hpp"
#include "statistics.hpp"
#include "stats_report.hpp"

#include <atomic>

namespace asyncshim::shim {

struct shim_state {
  explicit shim_state(config::settings const& s) : settings{s}, pools{s} {}
  config::settings const& settings;
  device_pools pools;
  allocation_registry registry;
  pending_frees pending;
  statistics all_stats;
  // What the calls count into: null unless statistics were asked for.
  statistics* stats = settings.wants_stats() ? &all_stats : nullptr;
  report_sources sources{settings, all_stats, pools};
  // Set once the idle release's thread has been started (or was not wanted).
  std::atomic<bool> idle_release_started{false};
};

// The state, made on the first call, or null when the shim must pass the call
// through untouched: it is disabled, this is a forked child, or there is no
// memory for the state.
[[nodiscard]] shim_state* active_state() noexcept;
// The state if an interposed call has made it (and this is not a forked
// child), without making it: for the driver calls the shim only follows.
[[nodiscard]] shim_state* existing_state() noexcept;

}  // namespace asyncshim::shim
