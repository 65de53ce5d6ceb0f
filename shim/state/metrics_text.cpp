#include "state/metrics_text.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace asyncshim::shim {
namespace {

// A label value as the format escapes it: backslash, double quote, line feed.
std::string escaped_label(std::string_view value)
{
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

struct row {
  int device;
  device_counters const* counters;  ///< null: nothing counted there
  metrics_device figures;
};

class writer {
 public:
  writer(std::vector<row> const& rows, long pid, std::string_view program)
      : rows_(rows), common_(fmt::format("pid=\"{}\",program=\"{}\"", pid, escaped_label(program)))
  {
  }

  void header(std::string_view name, std::string_view type, std::string_view help)
  {
    fmt::format_to(std::back_inserter(text_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  // A sample per device from `value` (none where it returns false), with
  // `extra` labels first ("name=\"value\",").
  template <class Value>
  void samples(std::string_view name, Value value, std::string_view extra = {})
  {
    for (row const& r : rows_) {
      std::uint64_t v = 0;
      if (!value(r, v)) { continue; }
      fmt::format_to(std::back_inserter(text_), "{}{{{}device=\"{}\",{}}} {}\n", name, extra, r.device, common_, v);
    }
  }
  template <class Value>
  void family(std::string_view name, std::string_view type, std::string_view help, Value value)
  {
    header(name, type, help);
    samples(name, value);
  }
  // The time in one call, counted in nanoseconds, as seconds.
  void seconds(std::string_view name, std::string_view call_label, interposed_call call)
  {
    for (row const& r : rows_) {
      if (r.counters == nullptr) { continue; }
      std::uint64_t const ns = r.counters->time_ns[static_cast<std::size_t>(call)].load(std::memory_order_relaxed);
      fmt::format_to(std::back_inserter(text_), "{}{{call=\"{}\",device=\"{}\",{}}} {}.{:09}\n", name, call_label,
                     r.device, common_, ns / 1'000'000'000, ns % 1'000'000'000);
    }
  }
  // One sample of the process, no device's (pinned host memory), with `extra` labels first.
  void process_sample(std::string_view name, std::uint64_t v, std::string_view extra = {})
  {
    fmt::format_to(std::back_inserter(text_), "{}{{{}{}}} {}\n", name, extra, common_, v);
  }
  std::string take() { return std::move(text_); }

 private:
  std::vector<row> const& rows_;
  std::string common_;
  std::string text_;
};

std::uint64_t load(std::atomic<std::uint64_t> const& a) { return a.load(std::memory_order_relaxed); }

}  // namespace

std::string metrics_text(statistics const& stats, std::span<metrics_device const> devices, long pid,
                         std::string_view program)
{
  std::vector<row> rows;
  for (int d = 0; d < statistics::max_devices; ++d) {
    device_counters const* c = stats.device(d);
    bool const counted = c != nullptr && c->used.load(std::memory_order_relaxed);
    auto const given =
      std::find_if(devices.begin(), devices.end(), [&](metrics_device const& m) { return m.device == d; });
    if (!counted && given == devices.end()) { continue; }
    rows.push_back({d, counted ? c : nullptr, given != devices.end() ? *given : metrics_device{d}});
  }
  writer w{rows, pid, program};
  auto counter = [](std::atomic<std::uint64_t> device_counters::*field) {
    return [field](row const& r, std::uint64_t& v) {
      v = r.counters != nullptr ? load(r.counters->*field) : 0;
      return true;
    };
  };
  w.family("asyncshim_pool_reserved_bytes", "gauge", "Memory the shim's pool of the device reserves now.",
           [](row const& r, std::uint64_t& v) {
             v = r.figures.reserved_bytes;
             return true;
           });
  w.family("asyncshim_memory_limit_bytes", "gauge",
           "The process's memory limit on the device (ASYNCSHIM_MEMORY_LIMIT).", [](row const& r, std::uint64_t& v) {
             v = r.figures.limit_bytes;
             return v != 0;
           });
  w.family("asyncshim_bytes_in_use", "gauge", "Bytes the program has allocated through the shim and not freed.",
           counter(&device_counters::bytes_in_use));
  w.family("asyncshim_peak_bytes_in_use", "gauge", "The most bytes in use at once so far.",
           counter(&device_counters::peak_bytes_in_use));
  w.family("asyncshim_allocations_total", "counter", "Allocations the shim served.",
           counter(&device_counters::allocations));
  w.header("asyncshim_allocations_by_entry_point_total", "counter",
           "Allocations the shim served, by the entry point that caught them.");
  for (int call = 0; call < static_cast<int>(interposed_call::count); ++call) {
    auto const which = static_cast<interposed_call>(call);
    if (!allocates(which)) { continue; }
    w.samples(
      "asyncshim_allocations_by_entry_point_total",
      [call](row const& r, std::uint64_t& v) {
        v = r.counters != nullptr ? load(r.counters->allocations_by_call[static_cast<std::size_t>(call)]) : 0;
        return true;
      },
      fmt::format("entry_point=\"{}\",", to_string(which)));
  }
  w.family("asyncshim_frees_total", "counter", "Frees the shim served.", counter(&device_counters::frees));
  w.family("asyncshim_failed_allocations_total", "counter", "Allocations that failed (out of memory included).",
           counter(&device_counters::failed_allocations));
  w.family("asyncshim_oom_recoveries_total", "counter",
           "Allocations the pool could not serve at first, retried once the shim made what it holds usable.",
           counter(&device_counters::oom_recoveries));
  w.family("asyncshim_oom_recovered_total", "counter", "Of those, the allocations that then succeeded.",
           counter(&device_counters::oom_recovered));
  w.header("asyncshim_passed_through_allocations_total", "counter",
           "Allocations passed to the native allocator, by reason.");
  for (int reason = 0; reason < static_cast<int>(passthrough_reason::count); ++reason) {
    auto const why = static_cast<passthrough_reason>(reason);
    std::string const label = fmt::format("reason=\"{}\",", to_string(why));
    w.samples(
      "asyncshim_passed_through_allocations_total",
      [reason](row const& r, std::uint64_t& v) {
        v = r.counters != nullptr ? load(r.counters->passed_through[static_cast<std::size_t>(reason)]) : 0;
        return true;
      },
      label);
  }
  w.header("asyncshim_call_seconds_total", "counter", "Time spent in the interposed calls, by call.");
  for (int call = 0; call < static_cast<int>(interposed_call::count); ++call) {
    auto const which = static_cast<interposed_call>(call);
    w.seconds("asyncshim_call_seconds_total", to_string(which), which);
  }
  if (host_counters const& h = stats.host(); h.used.load(std::memory_order_relaxed)) {
    w.header("asyncshim_pinned_bytes_in_use", "gauge", "Bytes of pinned host memory from the host pool not freed.");
    w.process_sample("asyncshim_pinned_bytes_in_use", load(h.bytes_in_use));
    w.header("asyncshim_pinned_peak_bytes_in_use", "gauge", "The most pinned bytes from the host pool in use at once.");
    w.process_sample("asyncshim_pinned_peak_bytes_in_use", load(h.peak_bytes_in_use));
    w.header("asyncshim_pinned_allocations_total", "counter",
             "Pinned host blocks the host pool served, by the entry point that asked.");
    for (int call = 0; call < static_cast<int>(pinned_call::count); ++call) {
      w.process_sample("asyncshim_pinned_allocations_total",
                       load(h.allocations_by_call[static_cast<std::size_t>(call)]),
                       fmt::format("entry_point=\"{}\",", to_string(static_cast<pinned_call>(call))));
    }
    w.header("asyncshim_pinned_frees_total", "counter", "Pinned host blocks freed back to the host pool.");
    w.process_sample("asyncshim_pinned_frees_total", load(h.frees));
    w.header("asyncshim_pinned_passed_through_total", "counter",
             "Pinned host memory requests the native call answered.");
    w.process_sample("asyncshim_pinned_passed_through_total", load(h.passed_through));
  }
  return w.take();
}

}  // namespace asyncshim::shim
