// The shim's process-wide state: the pools, the ownership record, the queued
// frees, the reuse cache and the statistics. Made on the first interposed call (never at load
// time) and never destroyed: calls may still arrive from atexit handlers and
// static destructors.
#pragma once

#include "state/allocation_registry.hpp"
#include "state/deferred_frees.hpp"
#include "state/device_pools.hpp"
#include "state/event_log.hpp"
#include "state/host_blocks.hpp"
#include "state/ipc_exports.hpp"
#include "state/ipc_imports.hpp"
#include "state/live_blocks.hpp"
#include "state/memory_limits.hpp"
#include "state/out_of_memory_reports.hpp"
#include "state/recurring_sizes.hpp"
#include "state/statistics.hpp"
#include "state/stream_tracker.hpp"

#include <asyncshim/config/settings.hpp>

#include <atomic>
#include <memory>

namespace asyncshim::shim {

/// What is true of the whole process, decided once: its settings, read from
/// the environment on the first interposed call (never at load time, with
/// every diagnostic printed then), and whether it is a child made by fork
/// (without exec) of a process in which the shim was already at work. Such a
/// child passes every call straight through and follows nothing: it never
/// waits on a lock that another parent thread held at the fork, and never
/// touches the parent's pools.
/// @{
[[nodiscard]] config::settings const& process_settings() noexcept;

[[nodiscard]] bool in_forked_child() noexcept;
/// @}
/// Registers the fork handler that sets the flag in children, once per process.
/// Called before the shim first takes any lock of its own.
void watch_for_fork() noexcept;

/// A new tracker, or null when there is no host memory for it.
[[nodiscard]] inline std::unique_ptr<live_blocks> make_live_blocks(unsigned stack_depth) noexcept
{
  try {
    return std::make_unique<live_blocks>(stack_depth);
  } catch (...) {
    return nullptr;
  }
}

struct shim_state {
  explicit shim_state(config::settings const& s) : settings{s}, limits{s.memory_limit}, pools{s, &limits} {}
  config::settings const& settings;
  memory_limits limits;  ///< ASYNCSHIM_MEMORY_LIMIT per device, and the native blocks it counts
  device_pools pools;
  allocation_registry registry;
  free_queue pending;
  reuse_cache reuse;          ///< device ordering's idle freed blocks (core/deferred_frees.hpp)
  recurring_sizes recurring;  ///< the sizes whose blocks the reuse cache keeps
  issued_frees issued;        ///< issued frees the device may not have caught up with (core/deferred_frees.hpp)
  /// Whether ASYNCSHIM_FREE_BACKLOG applies at all (device ordering, a limit set).
  bool const backlog_limited = settings.ordering == config::ordering_mode::device && settings.free_backlog.has_value();
  statistics all_stats;
  ipc_exports exports;  ///< pool blocks given a legacy IPC handle
  ipc_imports imports;  ///< blocks opened from other processes' handles
  host_memory host;     ///< pinned host memory from the pool in host memory (ASYNCSHIM_HOST_POOL)
  /// What the calls count into: null unless statistics were asked for.
  statistics* stats = settings.wants_stats() ? &all_stats : nullptr;
  out_of_memory_reports oom_reports;  ///< kept only when statistics were asked for
  report_sources sources{settings, all_stats, pools, &tracker(), &oom_reports};
  /// The program's live blocks for the leak report at exit and the
  /// out-of-memory report's largest blocks; null unless one was asked for
  /// (ASYNCSHIM_LEAK_REPORT, ASYNCSHIM_LEAK_REPORT_FILE, ASYNCSHIM_LEAK_STACK_DEPTH).
  std::unique_ptr<live_blocks> leaks = settings.wants_leak_report() || settings.leak_stack_depth > 0
                                         ? make_live_blocks(settings.leak_stack_depth)
                                         : nullptr;
  /// The event log (ASYNCSHIM_EVENT_LOG); null when none was asked for or its
  /// file cannot be written.
  event_log* events =
    settings.event_log.empty() ? nullptr : start_event_log(settings.event_log, settings.host_pool_serves());
  /// Set once the idle release's thread has been started (or was not wanted).
  std::atomic<bool> idle_release_started{false};
};

/// The state, made on the first call, or null when the shim must pass the call
/// through untouched: it is disabled, this is a forked child, or there is no
/// memory for the state.
[[nodiscard]] shim_state* active_state() noexcept;
/// The state if an interposed call has made it (and this is not a forked
/// child), without making it: for the driver calls the shim only follows.
[[nodiscard]] shim_state* existing_state() noexcept;

}  // namespace asyncshim::shim
