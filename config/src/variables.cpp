// The table of configuration variables (variables.hpp), and what is read from
// it directly: known_variables(), variables() and to_string(on_invalid).

#include "variables.hpp"

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "asyncshim/config/settings.hpp"
#include "memory_limit.hpp"
#include "messages.hpp"
#include "size_parser.hpp"
#include "text.hpp"

namespace asyncshim::config::detail {
namespace {

constexpr std::string_view initial_pool_size_variable = "ASYNCSHIM_INITIAL_POOL_SIZE";

// The forms of every size, and half-free for the initial pool size only.
constexpr std::string_view half_free_accepted = ", or half-free (half of the device's free memory)";
constexpr std::string_view initial_pool_size_accepted =
  "a number of bytes with an optional unit B, K/KiB, M/MiB, G/GiB or T/TiB "
  "(powers of 1024; e.g. 4GiB, 1.5G, 1048576) or a percentage of the device's total memory (e.g. 25%)"
  ", or half-free (half of the device's free memory)";
static_assert(initial_pool_size_accepted.ends_with(half_free_accepted));
constexpr std::string_view size_accepted =
  initial_pool_size_accepted.substr(0, initial_pool_size_accepted.size() - half_free_accepted.size());

// size_accepted's forms, or off.
constexpr std::string_view free_backlog_accepted =
  "a number of bytes with an optional unit B, K/KiB, M/MiB, G/GiB or T/TiB "
  "(powers of 1024; e.g. 4GiB, 1.5G, 1048576) or a percentage of the device's total memory (e.g. 25%), or off "
  "(or 0)";
static_assert(free_backlog_accepted.starts_with(size_accepted));

constexpr std::string_view memory_limit_accepted =
  "off, or a size (e.g. 20GiB, 1.5G) or a percentage of the device's total memory (e.g. 40%) for every device, or "
  "device:size entries separated by commas for some (e.g. 0:20GiB,1:10%), with at most one size without a device "
  "for the others";

constexpr std::string_view boolean_accepted = "1, true, yes, on, 0, false, no, off";

// Sizes: an invalid value, or half-free where it is not accepted, is refused.
template <std::optional<size_spec> settings::*field, bool half_free_allowed>
std::optional<std::string> apply_size(variable const& self, std::string_view value, settings& values)
{
  auto const parsed = parse_size_detailed(value);
  if (!parsed.value) { return invalid_size_message(self.info.name, value, parsed, self.info.accepted); }
  if (parsed.value->unit == size_spec::kind::half_of_free && !half_free_allowed) {
    return half_free_not_allowed_message(self.info.name, value, self.info.accepted, initial_pool_size_variable);
  }
  values.*field = parsed.value;
  return std::nullopt;
}

// A size, or off (no limit: the default); 0 is off too, as for the reuse
// cache and the idle release.
std::optional<std::string> apply_free_backlog(variable const& self, std::string_view value, settings& values)
{
  if (iequals(trim(value), "off")) {
    values.free_backlog.reset();
    return std::nullopt;
  }
  if (auto message = apply_size<&settings::free_backlog, false>(self, value, values)) { return message; }
  if (values.free_backlog->bytes == 0 && values.free_backlog->percent == 0.0) { values.free_backlog.reset(); }
  return std::nullopt;
}

std::optional<std::string> apply_memory_limit(variable const& self, std::string_view value, settings& values)
{
  auto parsed = parse_memory_limit_detailed(self.info.name, value, self.info.accepted);
  if (!parsed.value) { return parsed.message; }
  values.memory_limit = std::move(*parsed.value);
  return std::nullopt;
}

std::string show_memory_limit(settings const& values)
{
  return values.memory_limit.any() ? values.memory_limit.to_string() : std::string("off (default)");
}

std::optional<std::string> apply_idle_release(variable const& self, std::string_view value, settings& values)
{
  auto const parsed = parse_duration_ms(value);
  if (!parsed) { return invalid_duration_message(self.info.name, value, self.info.accepted); }
  values.idle_release_ms = *parsed;
  return std::nullopt;
}

// What a message about a bad value adds, for the variables whose bad value
// does not disable the shim: what happens instead.
std::string nothing_more() { return {}; }
// A bad level only affects messages, and the message says which level is used.
std::string default_level_used() { return std::string{"; using "} + to_string(settings{}.level); }
// The table only reports: a bad value prints none.
std::string native_pinned_memory() { return "; pinned host memory is allocated natively"; }
std::string no_table_printed() { return "; no statistics table is printed"; }
// The report only reports: a bad value means none.
std::string no_leak_report() { return "; no leak report is made"; }
std::string no_stacks() { return "; the leak report shows no call stacks"; }

// One of a few words, read by `parse` (which returns nothing for other text).
template <auto field, auto parse, auto instead = nothing_more>
std::optional<std::string> apply_choice(variable const& self, std::string_view value, settings& values)
{
  auto const parsed = parse(value);
  if (!parsed) { return invalid_choice_message(self.info.name, value, self.what, self.info.accepted) + instead(); }
  values.*field = *parsed;
  return std::nullopt;
}

// Any path, as given; whether it can be opened is the shim's business.
template <std::string settings::*field>
std::optional<std::string> apply_path(variable const&, std::string_view value, settings& values)
{
  values.*field = std::string(value);
  return std::nullopt;
}

std::string show_initial_pool_size(settings const& values)
{
  return values.initial_pool_size ? values.initial_pool_size->to_string() : std::string("0 (default)");
}

std::string show_reuse_cache(settings const& values)
{
  return values.reuse_cache ? values.reuse_cache->to_string()
                            : size_spec{.bytes = default_reuse_cache_bytes}.to_string() + " (default)";
}

std::string show_free_backlog(settings const& values)
{
  return values.free_backlog ? values.free_backlog->to_string() : std::string("off (default)");
}

std::string show_release_threshold(settings const& values)
{
  return values.release_threshold ? values.release_threshold->to_string()
                                  : std::string("total device memory (default)");
}

std::string show_idle_release(settings const& values)
{
  std::string text = duration_text(values.idle_release_ms);
  if (values.idle_release_ms == default_idle_release_ms) { text += " (default)"; }
  return text;
}

template <auto field>
std::string show_choice(settings const& values)
{
  return to_string(values.*field);
}

std::string show_log_file(settings const& values)
{
  return values.log_file.empty() ? std::string("stderr") : escaped(values.log_file);
}

std::string show_stats_file(settings const& values)
{
  return values.stats_file.empty() ? std::string("none") : escaped(values.stats_file);
}

// A whole number from 0 to settings::max_leak_stack_depth, in decimal.
std::optional<std::string> apply_leak_stack_depth(variable const& self, std::string_view value, settings& values)
{
  std::string_view const digits = trim(value);
  unsigned parsed = 0;
  bool ok = !digits.empty() && digits.size() <= 3;
  for (char c : digits) {
    if (c < '0' || c > '9') {
      ok = false;
      break;
    }
    parsed = parsed * 10 + static_cast<unsigned>(c - '0');
  }
  if (!ok || parsed > settings::max_leak_stack_depth) {
    return invalid_count_message(self.info.name, value, self.info.accepted) + no_stacks();
  }
  values.leak_stack_depth = parsed;
  return std::nullopt;
}

std::string show_leak_stack_depth(settings const& values) { return std::to_string(values.leak_stack_depth); }

// A duration from 1 ms to 24 h; a bad one (off included: the file would
// never be written again) leaves the default.
std::optional<std::string> apply_metrics_interval(variable const& self, std::string_view value, settings& values)
{
  auto const parsed = parse_duration_ms(value);
  if (!parsed || *parsed == 0) {
    return invalid_duration_message(self.info.name, value, self.info.accepted) + "; using " +
           duration_text(default_metrics_interval_ms);
  }
  values.metrics_interval_ms = *parsed;
  return std::nullopt;
}

std::string show_metrics_interval(settings const& values)
{
  std::string text = duration_text(values.metrics_interval_ms);
  if (values.metrics_interval_ms == default_metrics_interval_ms) { text += " (default)"; }
  return text;
}

std::string show_metrics_file(settings const& values)
{
  return values.metrics_file.empty() ? std::string("none") : escaped(values.metrics_file);
}

std::string show_event_log(settings const& values)
{
  return values.event_log.empty() ? std::string("none") : escaped(values.event_log);
}

std::string show_leak_report_file(settings const& values)
{
  return values.leak_report_file.empty() ? std::string("none") : escaped(values.leak_report_file);
}

template <bool settings::*field>
std::string show_yes_no(settings const& values)
{
  return values.*field ? "yes" : "no";
}

constexpr std::array table{
  variable{
    .info = {.name = initial_pool_size_variable,
             .field = "initial_pool_size",
             .default_text = "0",
             .accepted = initial_pool_size_accepted,
             .invalid = on_invalid::disables,
             .summary = "the memory each device's pool reserves when it is created"},
    .what = "size",
    .describe_key = "initial_pool_size",
    .apply = apply_size<&settings::initial_pool_size, true>,
    .show = show_initial_pool_size,
  },
  variable{
    .info = {.name = "ASYNCSHIM_RELEASE_THRESHOLD",
             .field = "release_threshold",
             .default_text = "(total device memory)",
             .accepted = size_accepted,
             .invalid = on_invalid::disables,
             .summary = "unused pool memory above it goes back to the device at each synchronization"},
    .what = "size",
    .describe_key = "release_threshold",
    .apply = apply_size<&settings::release_threshold, false>,
    .show = show_release_threshold,
  },
  variable{
    .info = {.name = "ASYNCSHIM_MEMORY_LIMIT",
             .field = "memory_limit",
             .default_text = "off",
             .accepted = memory_limit_accepted,
             .invalid = on_invalid::disables,
             .summary = "the most device memory the process may hold on a device (its pool's reservation and the "
                        "allocations passed to the native allocator): beyond it an allocation fails as out of "
                        "memory, and memory info reports the limit as the total"},
    .what = "limit",
    .describe_key = "memory_limit",
    .apply = apply_memory_limit,
    .show = show_memory_limit,
  },
  variable{
    .info = {.name = "ASYNCSHIM_IDLE_RELEASE",
             .field = "idle_release_ms",
             .default_text = "1s",
             .accepted = "a number with the unit ms or s from 1ms to 24h (e.g. 500ms, 2s, 1.5s), "
                         "or off (or 0) for never",
             .invalid = on_invalid::disables,
             .summary = "after this long without an allocation or a free, the pools give their unused memory "
                        "back"},
    .what = "duration",
    .describe_key = "idle_release",
    .apply = apply_idle_release,
    .show = show_idle_release,
  },
  variable{
    .info = {.name = "ASYNCSHIM_REUSE_CACHE",
             .field = "reuse_cache",
             .default_text = "256MiB",
             .accepted = size_accepted,
             .invalid = on_invalid::disables,
             .summary = "under device ordering, the most memory per device kept in freed blocks for reuse by "
                        "an allocation of the same size without a CUDA call: at once for a free in the legacy "
                        "stream's order, otherwise once the work before the free has finished; 0: none kept"},
    .what = "size",
    .describe_key = "reuse_cache",
    .apply = apply_size<&settings::reuse_cache, false>,
    .show = show_reuse_cache,
  },
  variable{
    .info = {.name = "ASYNCSHIM_HOST_POOL",
             .field = "host_pool",
             .default_text = "off",
             .accepted = boolean_accepted,
             .invalid = on_invalid::uses_default,
             .summary = "serve cudaMallocHost, cudaHostAlloc (not write-combined) and cuMemAllocHost from one pool "
                        "in pinned host memory that every device can reach; cudaFreeHost waits for the devices as "
                        "natively, then frees to the pool"},
    .what = "boolean",
    .describe_key = "host_pool",
    .apply = apply_choice<&settings::host_pool, parse_bool, native_pinned_memory>,
    .show = show_yes_no<&settings::host_pool>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_FREE_BACKLOG",
             .field = "free_backlog",
             .default_text = "off",
             .accepted = free_backlog_accepted,
             .invalid = on_invalid::disables,
             .summary =
               "retired: under device ordering, how much freed memory per device may wait for the device to catch "
               "up with the work before its free: a cudaFree that finds more waits for the oldest of those "
               "frees, down to half of it; off: never",
             .retired = "ASYNCSHIM_ORDERING=sync makes every cudaFree wait for the device, as native cudaFree does"},
    .what = "size",
    .describe_key = "free_backlog",
    .apply = apply_free_backlog,
    .show = show_free_backlog,
  },
  variable{
    .info = {.name = "ASYNCSHIM_IN_ORDER_FREES",
             .field = "in_order_frees",
             .default_text = "on",
             .accepted = boolean_accepted,
             .invalid = on_invalid::disables,
             .summary =
               "retired: under device ordering, while none of the program's non-blocking streams (at most 4) has work "
               "in progress (and the process sees one device), a cudaFree goes to the pool at once in the "
               "legacy stream's order, so the next cudaMalloc can have the block again; off: every free is "
               "queued and fenced",
             .retired = "device ordering (ASYNCSHIM_ORDERING=device, the default) decides by itself when a free may go "
                        "in order; ASYNCSHIM_ORDERING=sync or stream for another ordering"},
    .what = "boolean",
    .describe_key = "in_order_frees",
    .apply = apply_choice<&settings::in_order_frees, parse_bool>,
    .show = show_yes_no<&settings::in_order_frees>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_EXPORT_HANDLE_TYPE",
             .field = "export_handle_type",
             .default_text = "auto",
             .accepted = "auto, none, posix_file_descriptor (or posix_fd), fabric, win32, win32_kmt",
             .invalid = on_invalid::disables,
             .summary = "the handle type the pools' memory can be exported with to other processes; auto: "
                        "posix_file_descriptor where the device supports it (legacy IPC then works on pool "
                        "memory), else none"},
    .what = "export handle type",
    .describe_key = "export_handle_type",
    .apply = apply_choice<&settings::export_handle_type, parse_handle_type>,
    .show = show_choice<&settings::export_handle_type>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_STREAM",
             .field = "stream",
             .default_text = "legacy",
             .accepted = "legacy, per-thread (or per_thread)",
             .invalid = on_invalid::disables,
             .summary = "the stream cudaMalloc and cudaFree use"},
    .what = "stream",
    .describe_key = "stream",
    .apply = apply_choice<&settings::stream, parse_stream>,
    .show = show_choice<&settings::stream>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_MODE",
             .field = "mode",
             .default_text = "pool",
             .accepted = "pool, observe",
             .invalid = on_invalid::disables,
             .summary = "pool: the pools serve cudaMalloc and cudaFree; observe: they go to the native "
                        "allocator and are only counted"},
    .what = "mode",
    .describe_key = "mode",
    .apply = apply_choice<&settings::mode, parse_mode>,
    .show = show_choice<&settings::mode>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_INTERCEPT",
             .field = "intercept",
             .default_text = "all",
             .accepted = "runtime, driver, all",
             .invalid = on_invalid::disables,
             .summary = "which API level is caught: the runtime's cudaMalloc/cudaFree, the driver's "
                        "cuMemAlloc_v2/cuMemFree_v2, or all"},
    .what = "interception level",
    .describe_key = "intercept",
    .apply = apply_choice<&settings::intercept, parse_intercept>,
    .show = show_choice<&settings::intercept>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_ORDERING",
             .field = "ordering",
             .default_text = "device",
             .accepted = "device, stream, sync",
             .invalid = on_invalid::disables,
             .summary = "how a free is ordered against the program's GPU work (device: as native cudaFree)"},
    .what = "ordering",
    .describe_key = "ordering",
    .apply = apply_choice<&settings::ordering, parse_ordering>,
    .show = show_choice<&settings::ordering>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_LOG_LEVEL",
             .field = "level",
             .default_text = "warn",
             .accepted = "trace, debug, info, warn (or warning), error, critical, off",
             .invalid = on_invalid::uses_default,
             .summary = "the least severe message printed"},
    .what = "log level",
    .describe_key = "log_level",
    .apply = apply_choice<&settings::level, parse_log_level, default_level_used>,
    .show = show_choice<&settings::level>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_LOG_FILE",
             .field = "log_file",
             .default_text = "(standard error)",
             .accepted = "a path, appended to (a regular file of the process's user, never a symbolic link)",
             .invalid = on_invalid::none,
             .summary = "where messages go"},
    .what = "path",
    .describe_key = "log_file",
    .apply = apply_path<&settings::log_file>,
    .show = show_log_file,
  },
  variable{
    .info = {.name = "ASYNCSHIM_STATS_FILE",
             .field = "stats_file",
             .default_text = "(none)",
             .accepted = "a path, replaced (the same rules as the log file); %p becomes the process id",
             .invalid = on_invalid::none,
             .summary = "where the statistics are written as JSON at exit"},
    .what = "path",
    .describe_key = "stats_file",
    .apply = apply_path<&settings::stats_file>,
    .show = show_stats_file,
  },
  variable{
    .info = {.name = "ASYNCSHIM_SHOW_STATS",
             .field = "show_stats",
             .default_text = "off",
             .accepted = boolean_accepted,
             .invalid = on_invalid::uses_default,
             .summary = "print a statistics table at exit (standard error or the log file)"},
    .what = "boolean",
    .describe_key = "show_stats",
    .apply = apply_choice<&settings::show_stats, parse_bool, no_table_printed>,
    .show = show_yes_no<&settings::show_stats>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_LEAK_REPORT",
             .field = "leak_report",
             .default_text = "off",
             .accepted = boolean_accepted,
             .invalid = on_invalid::uses_default,
             .summary = "at exit, list the blocks still allocated (the largest, then the oldest) in the log"},
    .what = "boolean",
    .describe_key = "leak_report",
    .apply = apply_choice<&settings::leak_report, parse_bool, no_leak_report>,
    .show = show_yes_no<&settings::leak_report>,
  },
  variable{
    .info = {.name = "ASYNCSHIM_LEAK_REPORT_FILE",
             .field = "leak_report_file",
             .default_text = "(none)",
             .accepted = "a path, replaced (the same rules as the log file); %p becomes the process id",
             .invalid = on_invalid::none,
             .summary = "where the blocks still allocated at exit are written as JSON"},
    .what = "path",
    .describe_key = "leak_report_file",
    .apply = apply_path<&settings::leak_report_file>,
    .show = show_leak_report_file,
  },
  variable{
    .info = {.name = "ASYNCSHIM_LEAK_STACK_DEPTH",
             .field = "leak_stack_depth",
             .default_text = "0",
             .accepted = "a whole number from 0 to 64",
             .invalid = on_invalid::uses_default,
             .summary = "how many frames of each allocating call stack the leak report and the out-of-memory "
                        "warning's largest blocks show (recorded at each allocation); 0: none"},
    .what = "number",
    .describe_key = "leak_stack_depth",
    .apply = apply_leak_stack_depth,
    .show = show_leak_stack_depth,
  },
  variable{
    .info = {.name = "ASYNCSHIM_EVENT_LOG",
             .field = "event_log",
             .default_text = "(none)",
             .accepted = "a path, replaced (the same rules as the log file); %p becomes the process id",
             .invalid = on_invalid::none,
             .summary = "where every allocation and free is written, one line each, in RMM's CSV event log "
                        "format (Thread,Time,Action,Pointer,Size,Stream; with ASYNCSHIM_HOST_POOL on, a Memory "
                        "column: device or pinned)"},
    .what = "path",
    .describe_key = "event_log",
    .apply = apply_path<&settings::event_log>,
    .show = show_event_log,
  },
  variable{
    .info = {.name = "ASYNCSHIM_METRICS_FILE",
             .field = "metrics_file",
             .default_text = "(none)",
             .accepted = "a path, replaced (the same rules as the log file); %p becomes the process id",
             .invalid = on_invalid::none,
             .summary = "where live metrics are written in Prometheus's text format (for node_exporter's textfile "
                        "collector), again every ASYNCSHIM_METRICS_INTERVAL, and removed at exit"},
    .what = "path",
    .describe_key = "metrics_file",
    .apply = apply_path<&settings::metrics_file>,
    .show = show_metrics_file,
  },
  variable{
    .info = {.name = "ASYNCSHIM_METRICS_INTERVAL",
             .field = "metrics_interval_ms",
             .default_text = "10s",
             .accepted = "a number with the unit ms or s from 1ms to 24h (e.g. 500ms, 10s, 1.5s)",
             .invalid = on_invalid::uses_default,
             .summary = "how often the metrics file is written again"},
    .what = "duration",
    .describe_key = "metrics_interval",
    .apply = apply_metrics_interval,
    .show = show_metrics_interval,
  },
  variable{
    .info = {.name = disable_variable,
             .field = "disabled",
             .default_text = "off",
             .accepted = boolean_accepted,
             .invalid = on_invalid::disables,
             .summary = "send every cudaMalloc and cudaFree to the native allocator unchanged"},
    .what = "boolean",
    .describe_key = "disabled",
    .apply = apply_choice<&settings::disabled, parse_bool>,
    .show = show_yes_no<&settings::disabled>,
  },
};

}  // namespace

std::span<variable const> variable_table() noexcept { return table; }

std::optional<std::size_t> variable_index(std::string_view name) noexcept
{
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (table[i].info.name == name) { return i; }
  }
  return std::nullopt;
}

}  // namespace asyncshim::config::detail

namespace asyncshim::config {

std::vector<std::string> const& known_variables()
{
  static std::vector<std::string> const names = [] {
    std::vector<std::string> all;
    for (detail::variable const& entry : detail::variable_table()) {
      all.emplace_back(entry.info.name);
    }
    return all;
  }();
  return names;
}

std::vector<variable_info> const& variables()
{
  static std::vector<variable_info> const all = [] {
    std::vector<variable_info> infos;
    for (detail::variable const& entry : detail::variable_table()) {
      infos.push_back(entry.info);
    }
    return infos;
  }();
  return all;
}

char const* to_string(on_invalid value)
{
  switch (value) {
    case on_invalid::disables: return "disables";
    case on_invalid::uses_default: return "uses-default";
    case on_invalid::none: return "-";
  }
  return "unknown";
}

}  // namespace asyncshim::config
