#include "state/statistics.hpp"

#include "cuda/calling_thread.hpp"
#include "cuda/runtime.hpp"
#include "state/out_of_memory_reports.hpp"
#include "state/stream_tracker.hpp"
#include "support/json_text.hpp"
#include "support/log.hpp"
#include "support/own_file.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <vector>

#ifndef ASYNCSHIM_VERSION
#error "ASYNCSHIM_VERSION must be defined by the build"
#endif

namespace asyncshim::shim {
namespace {

constexpr auto relaxed = std::memory_order_relaxed;

std::uint64_t now_ns() noexcept
{
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000U + static_cast<std::uint64_t>(t.tv_nsec);
}

void raise_to(std::atomic<std::uint64_t>& peak, std::uint64_t value) noexcept
{
  std::uint64_t seen = peak.load(relaxed);
  while (value > seen && !peak.compare_exchange_weak(seen, value, relaxed)) {}
}

}  // namespace

char const* to_string(passthrough_reason reason) noexcept
{
  switch (reason) {
    case passthrough_reason::zero_size_or_null: return "zero_size_or_null";
    case passthrough_reason::no_current_device: return "no_current_device";
    case passthrough_reason::pool_unavailable: return "pool_unavailable";
    case passthrough_reason::capture: return "capture";
    case passthrough_reason::count: break;
  }
  return "unknown";
}

char const* to_string(interposed_call call) noexcept
{
  switch (call) {
    case interposed_call::malloc: return "cudaMalloc";
    case interposed_call::free: return "cudaFree";
    case interposed_call::driver_malloc: return "cuMemAlloc_v2";
    case interposed_call::driver_free: return "cuMemFree_v2";
    case interposed_call::malloc_pitch: return "cudaMallocPitch";
    case interposed_call::malloc_3d: return "cudaMalloc3D";
    case interposed_call::driver_malloc_pitch: return "cuMemAllocPitch_v2";
    case interposed_call::count: break;
  }
  return "unknown";
}

char const* to_string(pinned_call call) noexcept
{
  switch (call) {
    case pinned_call::malloc_host: return "cudaMallocHost";
    case pinned_call::host_alloc: return "cudaHostAlloc";
    case pinned_call::driver_alloc_host: return "cuMemAllocHost_v2";
    case pinned_call::driver_host_alloc: return "cuMemHostAlloc";
    case pinned_call::count: break;
  }
  return "unknown";
}

device_counters* statistics::slot(int device) noexcept
{
  if (device == unattributed) { return &unattributed_; }
  if (device < 0 || device >= max_devices) { return nullptr; }
  return &devices_[static_cast<std::size_t>(device)];
}

device_counters const* statistics::device(int index) const noexcept
{
  return index >= 0 && index < max_devices ? &devices_[static_cast<std::size_t>(index)] : nullptr;
}

void statistics::allocation_served(int device, std::size_t bytes, interposed_call call) noexcept
{
  device_counters* c = slot(device);
  if (c == nullptr) { return; }
  c->used.store(true, relaxed);
  c->allocations.fetch_add(1, relaxed);
  c->allocations_by_call[static_cast<std::size_t>(call)].fetch_add(1, relaxed);
  c->bytes_requested.fetch_add(bytes, relaxed);
  raise_to(c->peak_bytes_in_use, c->bytes_in_use.fetch_add(bytes, relaxed) + bytes);
}

void statistics::free_served(int device, std::size_t bytes) noexcept
{
  device_counters* c = slot(device);
  if (c == nullptr) { return; }
  c->frees.fetch_add(1, relaxed);
  // Saturating, so a miscount can never wrap around to an absurd figure.
  std::uint64_t seen = c->bytes_in_use.load(relaxed);
  while (!c->bytes_in_use.compare_exchange_weak(seen, seen > bytes ? seen - bytes : 0, relaxed)) {}
}

void statistics::pinned_served(std::size_t bytes, pinned_call call) noexcept
{
  host_.used.store(true, relaxed);
  host_.allocations.fetch_add(1, relaxed);
  host_.allocations_by_call[static_cast<std::size_t>(call)].fetch_add(1, relaxed);
  host_.bytes_requested.fetch_add(bytes, relaxed);
  raise_to(host_.peak_bytes_in_use, host_.bytes_in_use.fetch_add(bytes, relaxed) + bytes);
}

void statistics::pinned_freed(std::size_t bytes) noexcept
{
  host_.frees.fetch_add(1, relaxed);
  std::uint64_t seen = host_.bytes_in_use.load(relaxed);
  while (!host_.bytes_in_use.compare_exchange_weak(seen, seen > bytes ? seen - bytes : 0, relaxed)) {}
}

void statistics::pinned_passed_through() noexcept
{
  host_.used.store(true, relaxed);
  host_.passed_through.fetch_add(1, relaxed);
}

void statistics::count(int device, std::atomic<std::uint64_t> device_counters::*counter) noexcept
{
  if (device_counters* c = slot(device)) {
    c->used.store(true, relaxed);
    (c->*counter).fetch_add(1, relaxed);
  }
}

void statistics::allocation_failed(int device) noexcept { count(device, &device_counters::failed_allocations); }

void statistics::oom_recovery(int device, bool succeeded) noexcept
{
  count(device, &device_counters::oom_recoveries);
  if (succeeded) { count(device, &device_counters::oom_recovered); }
}

void statistics::allocation_passed_through(int device, passthrough_reason reason) noexcept
{
  if (device_counters* c = slot(device)) {
    c->used.store(true, relaxed);
    c->passed_through[static_cast<std::size_t>(reason)].fetch_add(1, relaxed);
  }
}

void statistics::free_passed_through() noexcept { frees_passed_through_.fetch_add(1, relaxed); }

void statistics::block_exported(int device) noexcept { count(device, &device_counters::ipc_exported_blocks); }

void statistics::block_imported(int device) noexcept { count(device, &device_counters::ipc_imported_blocks); }

void statistics::free_in_order(int device) noexcept { count(device, &device_counters::in_order_frees); }

void statistics::reuse_hit(int device) noexcept { count(device, &device_counters::reuse_hits); }

void statistics::reuse_miss(int device) noexcept { count(device, &device_counters::reuse_misses); }

void statistics::reuse_held(int device, std::uint64_t bytes_now) noexcept
{
  if (device_counters* c = slot(device)) { raise_to(c->reuse_peak_held_bytes, bytes_now); }
}

void statistics::backlog_seen(int device, std::uint64_t bytes_now) noexcept
{
  if (device_counters* c = slot(device)) { raise_to(c->backlog_peak_bytes, bytes_now); }
}

void statistics::backlog_over(int device, bool waited, std::uint64_t nanoseconds) noexcept
{
  if (device_counters* c = slot(device)) {
    c->backlog_frees_over_limit.fetch_add(1, relaxed);
    if (waited) {
      c->backlog_frees_waited.fetch_add(1, relaxed);
      c->backlog_wait_ns.fetch_add(nanoseconds, relaxed);
    }
    c->used.store(true, relaxed);
  }
}

void statistics::add_time(int device, interposed_call call, std::uint64_t nanoseconds) noexcept
{
  if (device_counters* c = slot(device)) { c->time_ns[static_cast<std::size_t>(call)].fetch_add(nanoseconds, relaxed); }
}

timed_call::timed_call(statistics* stats, interposed_call call) noexcept
    : stats_{stats}, call_{call}, start_ns_{stats != nullptr ? now_ns() : 0}
{
}

timed_call::~timed_call()
{
  if (stats_ != nullptr) { stats_->add_time(device, call_, now_ns() - start_ns_); }
}

// ---- The report.

namespace {

constexpr int format_version = 1;

std::string json_size(std::optional<config::size_spec> const& spec)
{
  return spec ? json_string(spec->to_string()) : "null";
}

// The pool's reserved-memory high-water mark, when the device has a pool and
// the runtime still answers.
std::optional<std::uint64_t> reserved_high_water(device_pools const& pools, int device)
{
  cuda_async_memory_resource const* pool = pools.existing(device);
  if (pool == nullptr) { return std::nullopt; }
  // At exit no entry point has chosen the API: a program with a static
  // runtime has only the driver to ask.
  api_level_scope level{runtime().found() ? api_level::runtime : api_level::driver};
  std::uint64_t value = 0;
  if (cudaMemPoolGetAttribute(pool->pool_handle(), cudaMemPoolAttrReservedMemHigh, &value) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return value;
}

std::string optional_number(std::optional<std::uint64_t> value) { return value ? std::to_string(*value) : "null"; }

std::uint64_t load(std::atomic<std::uint64_t> const& counter) { return counter.load(std::memory_order_relaxed); }

std::uint64_t passed_through_total(device_counters const& c)
{
  std::uint64_t total = 0;
  for (auto const& n : c.passed_through) {
    total += load(n);
  }
  return total;
}

// {"cudaMalloc": n, "cudaFree": n, "cuMemAlloc_v2": n, "cuMemFree_v2": n} from one counter per entry point.
template <class Counters>
std::string per_call_json(Counters const& counters)
{
  std::string out = "{";
  for (int call = 0; call < static_cast<int>(interposed_call::count); ++call) {
    out += fmt::format("{}\"{}\": {}", call == 0 ? "" : ", ", to_string(static_cast<interposed_call>(call)),
                       load(counters[static_cast<std::size_t>(call)]));
  }
  return out + "}";
}

std::string allocations_by_entry_point_json(device_counters const& c)
{
  std::string out = "{";
  for (int call = 0; call < static_cast<int>(interposed_call::count); ++call) {
    if (!allocates(static_cast<interposed_call>(call))) { continue; }
    out += fmt::format("{}\"{}\": {}", out.size() == 1 ? "" : ", ", to_string(static_cast<interposed_call>(call)),
                       load(c.allocations_by_call[static_cast<std::size_t>(call)]));
  }
  return out + "}";
}

std::vector<int> used_devices(statistics const& stats)
{
  std::vector<int> devices;
  for (int d = 0; d < statistics::max_devices; ++d) {
    if (stats.device(d)->used.load(std::memory_order_relaxed)) { devices.push_back(d); }
  }
  return devices;
}

}  // namespace

std::string expand_stats_path(std::string const& path, long pid)
{
  std::string out;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 1 < path.size() && path[i + 1] == 'p') {
      out += std::to_string(pid);
      ++i;
    } else {
      out += path[i];
    }
  }
  return out;
}

namespace {

std::string host_json(host_counters const& h)
{
  std::string by_call;
  for (int call = 0; call < static_cast<int>(pinned_call::count); ++call) {
    by_call += fmt::format("{}\"{}\": {}", call == 0 ? "" : ", ", to_string(static_cast<pinned_call>(call)),
                           load(h.allocations_by_call[static_cast<std::size_t>(call)]));
  }
  std::uint64_t const allocations = load(h.allocations);
  return fmt::format("{{\"allocations\": {}, \"frees\": {}, \"bytes_requested\": {}, \"bytes_in_use\": {}, "
                     "\"peak_bytes_in_use\": {}, \"live_allocations\": {}, \"allocations_by_entry_point\": {{{}}}, "
                     "\"passed_through\": {}}}",
                     allocations, load(h.frees), load(h.bytes_requested), load(h.bytes_in_use),
                     load(h.peak_bytes_in_use), allocations - std::min(allocations, load(h.frees)), by_call,
                     load(h.passed_through));
}

}  // namespace

std::string stats_json(report_sources const& sources, long pid)
{
  config::settings const& s = sources.settings;
  std::string out = fmt::format(
    "{{\n  \"format\": \"asyncshim-stats\",\n  \"format_version\": {},\n  \"shim_version\": {},\n  \"pid\": {},\n"
    "  \"mode\": {},\n  \"settings\": {{\"initial_pool_size\": {}, \"release_threshold\": {}, "
    "\"export_handle_type\": {}, \"stream\": {}, \"ordering\": {}}},\n  \"submissions_followed\": {},\n"
    "  \"devices\": [",
    format_version, json_string(ASYNCSHIM_VERSION), pid, json_string(config::to_string(s.mode)),
    json_size(s.initial_pool_size), json_size(s.release_threshold),
    json_string(config::to_string(s.export_handle_type)), json_string(config::to_string(s.stream)),
    json_string(config::to_string(s.ordering)),
    s.frees_in_order() && sources.streams != nullptr && sources.streams->following_submissions());
  char const* separator = "\n";
  for (int d : used_devices(sources.stats)) {
    device_counters const& c = *sources.stats.device(d);
    std::string reasons;
    for (int r = 0; r < static_cast<int>(passthrough_reason::count); ++r) {
      reasons += fmt::format(", \"{}\": {}", to_string(static_cast<passthrough_reason>(r)),
                             load(c.passed_through[static_cast<std::size_t>(r)]));
    }
    out += fmt::format(
      "{}    {{\"device\": {}, \"allocations\": {}, \"frees\": {}, \"bytes_requested\": {}, \"bytes_in_use\": {}, "
      "\"peak_bytes_in_use\": {}, \"live_allocations\": {}, \"allocations_by_entry_point\": {}, "
      "\"pool_reserved_high_water\": {}, "
      "\"passed_through\": {{\"total\": {}{}}}, \"failed_allocations\": {}, "
      "\"out_of_memory\": {{\"recoveries\": {}, \"recovered\": {}}}, \"time_in_calls_ns\": {}, "
      "\"legacy_ipc\": {{\"exported_blocks\": {}, \"imported_blocks\": {}}}, "
      "\"reuse_cache\": {{\"hits\": {}, \"misses\": {}, \"peak_held_bytes\": {}}}, "
      "\"free_backlog\": {{\"frees_over_limit\": {}, \"frees_waited\": {}, \"waited_ns\": {}, "
      "\"peak_bytes\": {}}}, \"in_order_frees\": {}}}",
      separator, d, load(c.allocations), load(c.frees), load(c.bytes_requested), load(c.bytes_in_use),
      load(c.peak_bytes_in_use), load(c.allocations) - std::min(load(c.allocations), load(c.frees)),
      allocations_by_entry_point_json(c), optional_number(reserved_high_water(sources.pools, d)),
      passed_through_total(c), reasons, load(c.failed_allocations), load(c.oom_recoveries), load(c.oom_recovered),
      per_call_json(c.time_ns), load(c.ipc_exported_blocks), load(c.ipc_imported_blocks), load(c.reuse_hits),
      load(c.reuse_misses), load(c.reuse_peak_held_bytes), load(c.backlog_frees_over_limit),
      load(c.backlog_frees_waited), load(c.backlog_wait_ns), load(c.backlog_peak_bytes), load(c.in_order_frees));
    separator = ",\n";
  }
  device_counters const& u = sources.stats.unattributed_counters();
  out += fmt::format("\n  ],\n  \"unattributed\": {{\"allocations_passed_through\": {}, \"failed_allocations\": {}, "
                     "\"frees_passed_through\": {}, \"time_in_calls_ns\": {}}},\n  \"host\": {},\n"
                     "  \"out_of_memory_reports\": {}\n}}\n",
                     passed_through_total(u), load(u.failed_allocations), sources.stats.frees_passed_through(),
                     per_call_json(u.time_ns), host_json(sources.stats.host()),
                     out_of_memory_reports_json(sources.oom_reports != nullptr ? sources.oom_reports->all()
                                                                               : std::vector<out_of_memory_report>{}));
  return out;
}

std::string stats_table(report_sources const& sources)
{
  std::string out = fmt::format("statistics (mode {}):\n", config::to_string(sources.settings.mode));
  out +=
    fmt::format("{:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>14} {:>8} {:>8} {:>12}\n", "device", "allocations",
                "frees", "requested", "in use", "peak in use", "pool reserved", "passed", "failed", "time in calls");
  auto row = [&](std::string const& name, device_counters const& c, std::optional<std::uint64_t> reserved) {
    std::uint64_t ns = 0;
    for (auto const& t : c.time_ns) {
      ns += load(t);
    }
    double const ms = static_cast<double>(ns) / 1e6;
    out += fmt::format("{:>6} {:>12} {:>12} {:>12} {:>12} {:>12} {:>14} {:>8} {:>8} {:>9.1f} ms\n", name,
                       load(c.allocations), load(c.frees), byte_count{load(c.bytes_requested)},
                       byte_count{load(c.bytes_in_use)}, byte_count{load(c.peak_bytes_in_use)},
                       reserved ? fmt::format("{}", byte_count{*reserved}) : std::string{"-"}, passed_through_total(c),
                       load(c.failed_allocations), ms);
  };
  for (int d : used_devices(sources.stats)) {
    row(std::to_string(d), *sources.stats.device(d), reserved_high_water(sources.pools, d));
  }
  row("other", sources.stats.unattributed_counters(), std::nullopt);
  out += fmt::format("frees of memory the shim did not allocate (passed to the native cudaFree): {}",
                     sources.stats.frees_passed_through());
  if (host_counters const& h = sources.stats.host(); h.used.load(relaxed)) {
    out += fmt::format("\npinned host memory from the host pool: {} allocations, {} frees, {} in use, at most {}; {} "
                       "requests answered by the native call",
                       load(h.allocations), load(h.frees), byte_count{load(h.bytes_in_use)},
                       byte_count{load(h.peak_bytes_in_use)}, load(h.passed_through));
  }
  std::uint64_t exported = 0;
  std::uint64_t imported = 0;
  for (int d : used_devices(sources.stats)) {
    if (device_counters const* c = sources.stats.device(d)) {
      exported += load(c->ipc_exported_blocks);
      imported += load(c->ipc_imported_blocks);
    }
  }
  if (exported + imported > 0) {
    out += fmt::format("\nlegacy IPC on pool memory: {} blocks shared with other processes, {} opened from them",
                       exported, imported);
  }
  for (int d : used_devices(sources.stats)) {
    device_counters const* c = sources.stats.device(d);
    if (c == nullptr || load(c->reuse_hits) + load(c->reuse_misses) == 0) { continue; }
    out += fmt::format("\ndevice {} reuse cache: {} allocations served from it, {} found no block of their size; it "
                       "held at most {}",
                       d, load(c->reuse_hits), load(c->reuse_misses), byte_count{load(c->reuse_peak_held_bytes)});
  }
  for (int d : used_devices(sources.stats)) {
    device_counters const* c = sources.stats.device(d);
    if (c == nullptr || load(c->backlog_peak_bytes) == 0) { continue; }
    out += fmt::format("\ndevice {} free backlog: at most {} freed memory waited for the device; {} frees found "
                       "more than the limit waiting, {} of them waited for the device, {:.1f} ms in all",
                       d, byte_count{load(c->backlog_peak_bytes)}, load(c->backlog_frees_over_limit),
                       load(c->backlog_frees_waited), static_cast<double>(load(c->backlog_wait_ns)) / 1e6);
  }
  for (int d : used_devices(sources.stats)) {
    device_counters const* c = sources.stats.device(d);
    if (c == nullptr || load(c->in_order_frees) == 0) { continue; }
    out += fmt::format("\ndevice {}: {} of {} frees went to the pool at once in the legacy stream's order (no "
                       "non-blocking stream had work in progress then); the others were queued and fenced",
                       d, load(c->in_order_frees), load(c->frees));
  }
  return out;
}

namespace {

// What the exit handler needs; set once by report_at_exit, never destroyed.
report_sources const* exit_sources = nullptr;
long reporting_pid = 0;

void write_report_at_exit()
{
  try {
    report_sources const& sources = *exit_sources;
    long const pid = static_cast<long>(getpid());
    if (pid != reporting_pid) { return; }  // a forked child passes everything through and counts nothing
    if (sources.settings.show_stats) {
      std::string const table = stats_table(sources);
      std::size_t start = 0;
      while (start < table.size()) {
        std::size_t end = table.find('\n', start);
        if (end == std::string::npos) { end = table.size(); }
        log::write(log::log_level::info, std::string_view{table}.substr(start, end - start));
        start = end + 1;
      }
    }
    std::string const& pattern = sources.settings.stats_file;
    if (pattern.empty()) { return; }
    std::string const path = expand_stats_path(pattern, pid);
    std::string const json = stats_json(sources, pid);
    written_file const file = write_own_file(path, json);
    if (file.by_rule) {
      log::error("ASYNCSHIM_STATS_FILE: the statistics are not written to '{}': {} ({})", path, file.why,
                 own_file_rule);
    } else if (!file.why.empty()) {
      log::error("ASYNCSHIM_STATS_FILE: cannot write the statistics to '{}': {}", path, file.why);
    }
  } catch (...) {  // never let an exit handler throw
  }
}

}  // namespace

void report_at_exit(report_sources const& sources) noexcept
{
  static bool const registered = [&] {
    exit_sources = &sources;
    reporting_pid = static_cast<long>(getpid());
    return std::atexit(write_report_at_exit) == 0;
  }();
  (void)registered;
}

}  // namespace asyncshim::shim
