// The allocation event log (ASYNCSHIM_EVENT_LOG): every allocation, free and
// failed allocation the shim sees, one line each in RMM's CSV format
// (support/event_line.hpp), so that RMM's tools and asyncshim's own read it.
//
// A call only appends a numbered record to its thread's buffer (one
// uncontended lock). A thread of the shim's writes the buffers out every
// 100 ms and when one holds a batch, merged in the order of the events across
// threads (as RMM's replay reads them), so that no call waits on the disk.
// Everything left is written at exit and, when the program dies of a fatal
// signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) whose handler was the
// default, from the signal handler before the default action (those last
// lines in each thread's order). A SIGKILL loses what was buffered: about the
// last 100 ms. A forked child writes nothing (it passes every call through).
#pragma once

#include "support/event_line.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace asyncshim::shim {

class event_log;

/// Opens the log at `pattern` ("%p": the process id), writes its header
/// (with the Memory column when `memory_column`: the host pool is on) and
/// starts the writer; null (after an error message) when the file cannot be
/// written. Made once per process: later calls return the same log.
[[nodiscard]] event_log* start_event_log(std::string const& pattern, bool memory_column) noexcept;

/// Writes what is still buffered, if a log was started, in the process that
/// started it. Run by the shim's last exit handler (core/exit_reports.cpp).
void flush_event_log_at_exit() noexcept;

/// Appends one event of the calling thread.
void log_event(event_log& log, event_action action, void const* pointer, std::size_t bytes, std::uintptr_t stream,
               event_memory memory = event_memory::device) noexcept;

}  // namespace asyncshim::shim
