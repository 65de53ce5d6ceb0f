// What the leak report and the event log (each only when asked for) learn of
// the program's blocks, device or pinned: an allocation, a free, and a free
// that failed. A free is noted before its block goes back, so that no other
// allocation can have its address yet; a failed one is noted again as the
// program's, its leak record restored. Every allocating call, device or
// pinned, arms the reports made at exit.
#pragma once

#include "state/event_log.hpp"
#include "state/leak_report.hpp"
#include "state/live_blocks.hpp"
#include "state/shim_state.hpp"
#include "state/statistics.hpp"
#include "support/event_line.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>

namespace asyncshim::shim {

/// How a block's events are logged: the stream as RMM's replay numbers it,
/// and which memory it is.
struct logged_as {
  std::uintptr_t stream = 0;
  event_memory memory = event_memory::device;
};

// Inline: on every allocation and free, with nothing asked for, each is a test of null pointers.

/// The statistics' and the leak report's reports at exit, where asked for:
/// armed after a call into CUDA, so that they are made before the runtime's
/// own teardown.
inline void arm_exit_reports(shim_state& s) noexcept
{
  if (s.stats != nullptr) { report_at_exit(s.sources); }
  if (s.leaks != nullptr && s.settings.wants_leak_report()) { arm_leak_report(s.settings, *s.leaks); }
}

/// `device` is pinned_host_memory for pinned host memory; `entry_point` a
/// name that lives for good.
inline void note_allocated(shim_state& s, void const* ptr, std::size_t bytes, int device, char const* entry_point,
                           logged_as how) noexcept
{
  if (s.leaks != nullptr) { s.leaks->allocated(ptr, bytes, device, entry_point); }
  if (s.events != nullptr) { log_event(*s.events, event_action::allocate, ptr, bytes, how.stream, how.memory); }
}
/// Returns the leak report's record, which note_free_failed() puts back.
[[nodiscard]] inline std::optional<live_block> note_freeing(shim_state& s, void const* ptr, std::size_t bytes,
                                                            logged_as how) noexcept
{
  if (s.events != nullptr) { log_event(*s.events, event_action::free, ptr, bytes, how.stream, how.memory); }
  return s.leaks != nullptr ? s.leaks->take(ptr) : std::nullopt;
}
inline void note_free_failed(shim_state& s, void const* ptr, std::size_t bytes, std::optional<live_block>&& live,
                             logged_as how) noexcept
{
  if (s.events != nullptr) { log_event(*s.events, event_action::allocate, ptr, bytes, how.stream, how.memory); }
  if (s.leaks != nullptr && live) { s.leaks->restore(std::move(*live)); }
}

}  // namespace asyncshim::shim
