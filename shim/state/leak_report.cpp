#include "state/leak_report.hpp"

#include "state/statistics.hpp"  // expand_stats_path
#include "support/json_text.hpp"
#include "support/log.hpp"
#include "support/own_file.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

namespace asyncshim::shim {
namespace {

static_assert(pinned_host_memory != statistics::unattributed);

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

}  // namespace

std::string stack_frame_text(void* address)
{
  Dl_info info{};
  if (dladdr(address, &info) == 0) { return fmt::format("{}", address); }
  std::string object = info.dli_fname != nullptr && info.dli_fname[0] != '\0' ? info.dli_fname : "the program";
  if (auto const slash = object.rfind('/'); slash != std::string::npos) { object.erase(0, slash + 1); }
  auto const at = reinterpret_cast<std::uintptr_t>(address);
  if (info.dli_sname == nullptr || info.dli_saddr == nullptr) {
    return fmt::format("{}+{:#x}", object, at - reinterpret_cast<std::uintptr_t>(info.dli_fbase));
  }
  int status = -1;
  char* const demangled = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string const name = status == 0 && demangled != nullptr ? demangled : info.dli_sname;
  std::free(demangled);
  return fmt::format("{}+{:#x} ({})", name, at - reinterpret_cast<std::uintptr_t>(info.dli_saddr), object);
}

namespace {

std::string blocks_text(std::size_t n) { return fmt::format("{} block{}", n, n == 1 ? "" : "s"); }

// Where a block is: "device 0", or "pinned host memory" (the host pool's).
std::string place_text(int device)
{
  return device == pinned_host_memory ? std::string("pinned host memory") : fmt::format("device {}", device);
}

}  // namespace

void order_for_leak_report(std::vector<live_block>& blocks)
{
  std::sort(blocks.begin(), blocks.end(), [](live_block const& a, live_block const& b) {
    if (a.bytes != b.bytes) { return a.bytes > b.bytes; }
    if (a.allocated_ns != b.allocated_ns) { return a.allocated_ns < b.allocated_ns; }
    return a.address < b.address;
  });
}

std::vector<std::string> leak_report_lines(std::vector<live_block> const& ordered, leak_report_notes const& notes,
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
  std::string not_recorded;
  if (notes.untracked > 0) {
    not_recorded += fmt::format("; {} allocation{} could not be recorded (no host memory)", notes.untracked,
                                notes.untracked == 1 ? "" : "s");
  }
  if (notes.passed_through > 0) {
    not_recorded +=
      fmt::format("; {} allocation{} went to the native allocator and {} not followed", notes.passed_through,
                  notes.passed_through == 1 ? "" : "s", notes.passed_through == 1 ? "is" : "are");
  }
  if (ordered.empty()) {
    lines.push_back("leak report: no block is still allocated at exit" + not_recorded);
    return lines;
  }
  std::string per_device;
  auto const add_total = [&](int device, device_total const& t) {
    per_device += fmt::format("{}{}: {}, {}", per_device.empty() ? "" : "; ", place_text(device), blocks_text(t.blocks),
                              byte_count{t.bytes});
  };
  for (auto const& [device, t] : by_device) {
    if (device != pinned_host_memory) { add_total(device, t); }
  }
  if (auto const pinned = by_device.find(pinned_host_memory); pinned != by_device.end()) {
    add_total(pinned_host_memory, pinned->second);  // after the devices'
  }
  lines.push_back(fmt::format("leak report: {} ({}) still allocated at exit ({}), the largest first{}",
                              blocks_text(ordered.size()), byte_count{total}, per_device, not_recorded));
  std::size_t const listed = std::min(ordered.size(), leak_report_lines_listed);
  for (std::size_t i = 0; i < listed; ++i) {
    live_block const& b = ordered[i];
    lines.push_back(fmt::format("  {} at {:#x} {} {}, from {} in thread {}, allocated {} before exit",
                                size_text(b.bytes), b.address, b.device == pinned_host_memory ? "in" : "on",
                                place_text(b.device), b.entry_point, b.thread, age_text(now_ns - b.allocated_ns)));
    for (std::size_t f = 0; f < b.stack.size(); ++f) {
      lines.push_back(fmt::format("      #{} {}", f, stack_frame_text(b.stack[f])));
    }
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

std::string leak_report_json(std::vector<live_block> const& ordered, leak_report_notes const& notes,
                             std::int64_t now_ns, long pid)
{
  std::uint64_t total = 0;
  for (live_block const& b : ordered) {
    total += b.bytes;
  }
  std::size_t const listed = std::min(ordered.size(), leak_report_json_listed);
  std::string out =
    fmt::format("{{\n  \"pid\": {},\n  \"blocks_live\": {},\n  \"bytes_live\": {},\n  \"untracked_allocations\": {},\n"
                "  \"passed_through_allocations\": {},\n  \"blocks_left_out\": {},\n  \"blocks\": [",
                pid, ordered.size(), total, notes.untracked, notes.passed_through, ordered.size() - listed);
  for (std::size_t i = 0; i < listed; ++i) {
    live_block const& b = ordered[i];
    std::string stack;
    for (void* frame : b.stack) {
      stack += fmt::format("{}{}", stack.empty() ? "" : ", ", json_string(stack_frame_text(frame)));
    }
    bool const pinned = b.device == pinned_host_memory;
    out += fmt::format("{}\n    {{\"address\": \"{:#x}\", \"bytes\": {}, \"memory\": \"{}\", \"device\": {}, "
                       "\"entry_point\": \"{}\", \"thread\": {}, \"age_s\": {:.6f}, \"stack\": [{}]}}",
                       i == 0 ? "" : ",", b.address, b.bytes, pinned ? "pinned" : "device",
                       pinned ? std::string("null") : std::to_string(b.device), b.entry_point, b.thread,
                       static_cast<double>(std::max<std::int64_t>(now_ns - b.allocated_ns, 0)) / 1e9, stack);
  }
  out += listed == 0 ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

namespace {

// What the exit handler needs; set once, never destroyed. exit_blocks is
// stored last (release): a reader that sees it sees the other two.
config::settings const* exit_settings = nullptr;
long reporting_pid = 0;
std::atomic<live_blocks const*> exit_blocks{nullptr};

void write_file(std::string const& pattern, std::string const& json, long pid)
{
  std::string const path = expand_stats_path(pattern, pid);
  written_file const file = write_own_file(path, json);
  if (file.by_rule) {
    log::error("ASYNCSHIM_LEAK_REPORT_FILE: the leak report is not written to '{}': {} ({})", path, file.why,
               own_file_rule);
  } else if (!file.opened) {
    log::error("ASYNCSHIM_LEAK_REPORT_FILE: the leak report is not written to '{}': {}", path, file.why);
  } else if (!file.why.empty()) {
    log::error("ASYNCSHIM_LEAK_REPORT_FILE: cannot write the leak report to '{}': {}", path, file.why);
  }
}

}  // namespace

void make_leak_report() noexcept
{
  live_blocks const* const blocks_record = exit_blocks.load(std::memory_order_acquire);
  if (blocks_record == nullptr) { return; }
  try {
    long const pid = static_cast<long>(getpid());
    if (pid != reporting_pid) { return; }  // a forked child records nothing
    std::int64_t const now = live_blocks::now_ns();
    std::vector<live_block> blocks;
    if (!blocks_record->snapshot_at_exit(blocks)) {
      log::warn("leak report: not made, the record of allocations was in use at exit");
      return;
    }
    order_for_leak_report(blocks);
    leak_report_notes const notes{blocks_record->untracked(), blocks_record->passed_through_count()};
    if (exit_settings->leak_report && exit_settings->level != config::log_level::off) {
      auto const level = blocks.empty() ? log::log_level::info : log::log_level::warn;
      for (std::string const& line : leak_report_lines(blocks, notes, now)) {
        log::write(level, line);
      }
    }
    if (!exit_settings->leak_report_file.empty()) {
      write_file(exit_settings->leak_report_file, leak_report_json(blocks, notes, now, pid), pid);
    }
  } catch (...) {  // never let an exit handler throw
  }
}

void arm_leak_report(config::settings const& settings, live_blocks const& blocks) noexcept
{
  static bool const armed = [&] {
    reporting_pid = static_cast<long>(getpid());
    exit_settings = &settings;
    exit_blocks.store(&blocks, std::memory_order_release);
    return true;
  }();
  (void)armed;
}

}  // namespace asyncshim::shim
