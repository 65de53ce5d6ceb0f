// The leak report at exit (ASYNCSHIM_LEAK_REPORT, ASYNCSHIM_LEAK_REPORT_FILE):
// the blocks the program still has allocated (state/live_blocks.hpp), the
// largest first and, among blocks of one size, the oldest first; in the log
// at most leak_report_lines_listed of them with a total and a count of the
// rest, in the JSON file all of them (up to leak_report_json_listed).
#pragma once

#include "state/live_blocks.hpp"

#include <asyncshim/config/settings.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace asyncshim::shim {

inline constexpr std::size_t leak_report_lines_listed = 20;
inline constexpr std::size_t leak_report_json_listed = 100000;

/// One frame of an allocating stack, named now: "function+0x1c (object)", or
/// "object+0x1234" (for addr2line) where the object exports no name for it.
[[nodiscard]] std::string stack_frame_text(void* address);

/// Sorts `blocks` into the report's order.
void order_for_leak_report(std::vector<live_block>& blocks);

/// What the report says besides the blocks.
struct leak_report_notes {
  std::uint64_t untracked = 0;       ///< allocations that could not be recorded
  std::uint64_t passed_through = 0;  ///< allocations the native allocator served unrecorded
};

/// The log's lines for `ordered` (in the report's order), `now_ns` being the
/// time of exit on the records' clock.
[[nodiscard]] std::vector<std::string> leak_report_lines(std::vector<live_block> const& ordered,
                                                         leak_report_notes const& notes, std::int64_t now_ns);

/// The JSON document of the file.
[[nodiscard]] std::string leak_report_json(std::vector<live_block> const& ordered, leak_report_notes const& notes,
                                           std::int64_t now_ns, long pid);

/// Names what the report at exit is made of (once).
void arm_leak_report(config::settings const& settings, live_blocks const& blocks) noexcept;

/// Makes the report, if one was armed, in the process that armed it (a forked
/// child makes none: it passes everything through and records nothing). Run
/// by the shim's last exit handler (core/exit_reports.cpp).
void make_leak_report() noexcept;

}  // namespace asyncshim::shim
