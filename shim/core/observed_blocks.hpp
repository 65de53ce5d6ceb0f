// What the leak report and the event log (each only when asked for) learn of
// the program's blocks, device or pinned: an allocation, a free, and a free
// that failed. A free is noted before its block goes back, so that no other
// allocation can have its address yet; a failed one is noted again as the
// program's, its leak record restored. Every allocating call, device or
// pinned, arms the reports made at exit.
#pragma once

#include "state/live_blocks.hpp"
#include "state/shim_state.hpp"
#include "support/event_line.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>

namespace asyncshim::shim {

/// How a block's events are logged: the stream as RMM's replay numbers it,
/// and which memory it is.
struct logged_as {
  std::uintptr_t stream = 0;
  event_memory memory = event_memory::device;
};

/// The statistics' and the leak report's reports at exit, where asked for:
/// armed after a call into CUDA, so that they are made before the runtime's
/// own teardown.
void arm_exit_reports(shim_state& s) noexcept;

/// `device` is pinned_host_memory for pinned host memory; `entry_point` a
/// name that lives for good.
void note_allocated(shim_state& s, void const* ptr, std::size_t bytes, int device, char const* entry_point,
                    logged_as how) noexcept;
/// Returns the leak report's record, which note_free_failed() puts back.
[[nodiscard]] std::optional<live_block> note_freeing(shim_state& s, void const* ptr, std::size_t bytes,
                                                     logged_as how) noexcept;
void note_free_failed(shim_state& s, void const* ptr, std::size_t bytes, std::optional<live_block>&& live,
                      logged_as how) noexcept;

}  // namespace asyncshim::shim
