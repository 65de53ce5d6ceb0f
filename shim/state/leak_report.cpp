#include "state/leak_report.hpp"

#include "support/log.hpp"
#include "support/own_file.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

namespace asyncshim::shim {
namespace {

struct device_total {
  std::size_t blocks = 0;
  std::uint64_t bytes = 0;
};

std::string age_text(std::int64_t ns)
{
  double const seconds = static_cast<double>(std::max<std::int64_t>(ns, 0)) / 1e9;
  if (seconds < 1.0) { return fmt::format("{:.0f} ms", seconds * 1e3); }
  return fmt::format("{:.1f} s", seconds);
}

// Exact, and readable when large: "768 B", "4.9 KiB (5000 B)".
std::string size_text(std::uint64_t bytes)
{
  if (bytes < 1024) { return fmt::format("{} B", bytes); }
  return fmt::format("{} ({} B)", byte_count{bytes}, bytes);
}

std::string blocks_text(std::size_t n) { return fmt::format("{} block{}", n, n == 1 ? "" : "s"); }

}  // namespace

void order_for_leak_report(std::vector<live_block>& blocks)
{
  std::sort(blocks.begin(), blocks.end(), [](live_block const& a, live_block const& b) {
    if (a.bytes != b.bytes) { return a.bytes > b.bytes; }
    if (a.allocated_ns != b.allocated_ns) { return a.allocated_ns < b.allocated_ns; }
    return a.address < b.address;
  });
}

std::vector<std::string> leak_report_lines(std::vector<live_block> const& ordered, std::uint64_t untracked,
                                           std::int64_t now_ns)
{
  std::vector<std::string> lines;
  std::map<int, device_total> by_device;
  std::uint64_t total = 0;
  for (live_block const& b : ordered) {
    by_device[b.device].blocks += 1;
    by_device[b.device].bytes += b.bytes;
    total += b.bytes;
  }
  std::string const not_recorded =
    untracked == 0
      ? std::string{}
      : fmt::format("; {} allocation{} could not be recorded (no host memory)", untracked, untracked == 1 ? "" : "s");
  if (ordered.empty()) {
    lines.push_back("leak report: no block is still allocated at exit" + not_recorded);
    return lines;
  }
  std::string per_device;
  for (auto const& [device, t] : by_device) {
    per_device += fmt::format("{}device {}: {}, {}", per_device.empty() ? "" : "; ", device, blocks_text(t.blocks),
                              byte_count{t.bytes});
  }
  lines.push_back(fmt::format("leak report: {} ({}) still allocated at exit ({}), the largest first{}",
                              blocks_text(ordered.size()), byte_count{total}, per_device, not_recorded));
  std::size_t const listed = std::min(ordered.size(), leak_report_lines_listed);
  for (std::size_t i = 0; i < listed; ++i) {
    live_block const& b = ordered[i];
    lines.push_back(fmt::format("  {} at {:#x} on device {}, from {} in thread {}, allocated {} before exit",
                                size_text(b.bytes), b.address, b.device, to_string(b.call), b.thread,
                                age_text(now_ns - b.allocated_ns)));
  }
  if (listed < ordered.size()) {
    std::uint64_t rest = 0;
    for (std::size_t i = listed; i < ordered.size(); ++i) {
      rest += ordered[i].bytes;
    }
    std::size_t const rest_count = ordered.size() - listed;
    lines.push_back(fmt::format("  and {} more block{} ({}), not listed (ASYNCSHIM_LEAK_REPORT_FILE lists them all)",
                                rest_count, rest_count == 1 ? "" : "s", byte_count{rest}));
  }
  return lines;
}

std::string leak_report_json(std::vector<live_block> const& ordered, std::uint64_t untracked, std::int64_t now_ns,
                             long pid)
{
  std::uint64_t total = 0;
  for (live_block const& b : ordered) {
    total += b.bytes;
  }
  std::size_t const listed = std::min(ordered.size(), leak_report_json_listed);
  std::string out =
    fmt::format("{{\n  \"pid\": {},\n  \"blocks_live\": {},\n  \"bytes_live\": {},\n  \"untracked_allocations\": {},\n"
                "  \"blocks_left_out\": {},\n  \"blocks\": [",
                pid, ordered.size(), total, untracked, ordered.size() - listed);
  for (std::size_t i = 0; i < listed; ++i) {
    live_block const& b = ordered[i];
    out += fmt::format("{}\n    {{\"address\": \"{:#x}\", \"bytes\": {}, \"device\": {}, \"entry_point\": \"{}\", "
                       "\"thread\": {}, \"age_s\": {:.6f}}}",
                       i == 0 ? "" : ",", b.address, b.bytes, b.device, to_string(b.call), b.thread,
                       static_cast<double>(std::max<std::int64_t>(now_ns - b.allocated_ns, 0)) / 1e9);
  }
  out += listed == 0 ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

namespace {

// What the exit handler needs; set once, never destroyed.
config::settings const* exit_settings = nullptr;
live_blocks const* exit_blocks = nullptr;
long reporting_pid = 0;

void write_file(std::string const& pattern, std::string const& json, long pid)
{
  std::string const path = expand_stats_path(pattern, pid);
  opened_file const file = open_own_file(path, file_write::replace);
  if (file.fd < 0 && file.by_rule) {
    log::error("ASYNCSHIM_LEAK_REPORT_FILE: the leak report is not written to '{}': {} ({})", path, file.why,
               own_file_rule);
    return;
  }
  if (file.fd < 0) {
    log::error("ASYNCSHIM_LEAK_REPORT_FILE: the leak report is not written to '{}': {}", path, file.why);
    return;
  }
  bool written = write_all(file.fd, json.data(), json.size());
  int error = errno;
  if (::close(file.fd) != 0 && written) {
    written = false;
    error = errno;
  }
  if (!written) {
    log::error("ASYNCSHIM_LEAK_REPORT_FILE: cannot write the leak report to '{}': {}", path, std::strerror(error));
  }
}

void report_at_exit()
{
  try {
    long const pid = static_cast<long>(getpid());
    if (pid != reporting_pid) { return; }  // a forked child records nothing
    std::int64_t const now = live_blocks::now_ns();
    std::vector<live_block> blocks = exit_blocks->snapshot();
    order_for_leak_report(blocks);
    std::uint64_t const untracked = exit_blocks->untracked();
    if (exit_settings->leak_report && exit_settings->level != config::log_level::off) {
      auto const level = blocks.empty() ? log::log_level::info : log::log_level::warn;
      for (std::string const& line : leak_report_lines(blocks, untracked, now)) {
        log::write(level, line);
      }
    }
    if (!exit_settings->leak_report_file.empty()) {
      write_file(exit_settings->leak_report_file, leak_report_json(blocks, untracked, now, pid), pid);
    }
  } catch (...) {  // never let an exit handler throw
  }
}

}  // namespace

void leak_report_at_exit(config::settings const& settings, live_blocks const& blocks) noexcept
{
  static bool const registered = [&] {
    exit_settings = &settings;
    exit_blocks = &blocks;
    reporting_pid = static_cast<long>(getpid());
    return std::atexit(report_at_exit) == 0;
  }();
  (void)registered;
}

}  // namespace asyncshim::shim
