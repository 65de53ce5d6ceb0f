// One line of the allocation event log in RMM's CSV format
// (logging_resource_adaptor: "Thread,Time,Action,Pointer,Size,Stream"; the
// time of day as HH:MM:SS.ffffff; the pointer in hexadecimal with 0x, as in
// RMM's documentation; the stream as RMM's replay reads it: 0 for the legacy
// default stream, 2 for the per-thread one), formatted without the heap,
// locale or stdio, so that a crash handler can write what is still buffered.
// With the host pool on, a seventh column says which memory a line is about
// ("device" or "pinned"); RMM's readers take columns by name.
#pragma once

#include <cstddef>
#include <cstdint>

namespace asyncshim::shim {

inline constexpr char event_log_header[] = "Thread,Time,Action,Pointer,Size,Stream\n";
inline constexpr char event_log_header_with_memory[] = "Thread,Time,Action,Pointer,Size,Stream,Memory\n";

enum class event_action : std::uint8_t { allocate, free, allocate_failure };
enum class event_memory : std::uint8_t { device, pinned };

struct event_record {
  std::uint64_t sequence = 0;  ///< the order of the events of all threads
  long thread = 0;             ///< gettid
  std::int64_t time_ns = 0;    ///< CLOCK_REALTIME
  event_action action = event_action::allocate;
  std::uintptr_t pointer = 0;  ///< 0 for a failure
  std::size_t bytes = 0;
  std::uintptr_t stream = 0;
  event_memory memory = event_memory::device;
};

/// Room for the longest line.
inline constexpr std::size_t event_line_max = 160;

/// Writes the line (with its newline) for `r` to `out`, which has room for
/// event_line_max characters, and returns its length. `utc_offset_s` turns
/// the time into local time, as RMM's log has it; `memory_column` adds the
/// seventh column.
[[nodiscard]] std::size_t format_event_line(event_record const& r, long utc_offset_s, bool memory_column,
                                            char* out) noexcept;

}  // namespace asyncshim::shim
