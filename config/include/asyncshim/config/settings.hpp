// asyncshim settings: the environment turned into validated values.
//
// This library knows nothing of CUDA and logs nothing itself: parsing returns
// the settings together with the messages the caller should print, so it can be
// tested on any machine and the shim decides where messages go.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace asyncshim::config {

/// A size as the user wrote it: a number of bytes, a percentage of the
/// device's total memory, or half of the memory free on the device (RMM's
/// default initial pool size), resolved per device when the pool is created.
struct size_spec {
  enum class kind { bytes, percent_of_total, half_of_free };
  kind unit = kind::bytes;
  std::uint64_t bytes = 0;  ///< when unit == bytes
  double percent = 0.0;     ///< when unit == percent_of_total, 0..100

  /// Bytes for a device with `total_bytes` of memory of which `free_bytes` are
  /// free (percentages and halves round down).
  [[nodiscard]] std::uint64_t resolve(std::uint64_t total_bytes, std::uint64_t free_bytes) const;
  /// The value as a user would write it back, e.g. "4GiB", "25%", "1000B", "half-free".
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(size_spec const&, size_spec const&) = default;
};

/// ASYNCSHIM_MEMORY_LIMIT: the most memory the process may hold on a device
/// (its pool's reservation and the allocations passed to the native
/// allocator), as a size or a percentage of the device's total memory: one
/// for every device not listed, and one per device listed ("0:20GiB,1:10%").
struct memory_limits {
  /// The highest device index a limit may name (the shim serves 64 devices).
  static constexpr int max_device = 63;
  std::optional<size_spec> others;                 ///< every device not listed; absent: no limit
  std::vector<std::pair<int, size_spec>> devices;  ///< as written, each device once

  /// The limit of `device`, if any.
  [[nodiscard]] std::optional<size_spec> of(int device) const;
  [[nodiscard]] bool any() const { return others.has_value() || !devices.empty(); }
  /// As a user would write it back: "off", "20GiB", "0:20GiB,1:10%,4GiB".
  [[nodiscard]] std::string to_string() const;
  friend bool operator==(memory_limits const&, memory_limits const&) = default;
};

/// Values equal CUDA's cudaMemAllocationHandleType (this library has no CUDA),
/// but for automatic: posix_file_descriptor where the device supports it, else
/// none (decided when the device's pool is made).
enum class handle_type : int {
  automatic = -1,
  none = 0x0,
  posix_file_descriptor = 0x1,
  win32 = 0x2,
  win32_kmt = 0x4,
  fabric = 0x8,
};

enum class stream_choice { legacy, per_thread };

/// pool: cudaMalloc/cudaFree are served by the pool. observe: they go to the
/// native allocator unchanged and are only counted (the A arm of an A/B run).
enum class shim_mode { pool, observe };

/// Where allocations are caught: the exported runtime API (cudaMalloc/cudaFree),
/// the driver API (cuMemAlloc_v2/cuMemFree_v2, also as reached through dlsym and
/// cuGetProcAddress by statically linked runtimes), or both.
enum class intercept_level { runtime, driver, all };

/// How a free is ordered against the program's GPU work (README, "Choosing an ordering"):
///   device: as native cudaFree/cudaMalloc: freed memory is not reused before
///           all work submitted to any stream before the free has finished,
///           and allocated memory is usable from any stream at once.
///   stream: ordered on the allocation stream only (fastest; correct for
///           programs that use only the legacy default stream and blocking
///           streams).
///   sync:   cudaFree synchronizes the device first, as native cudaFree does.
enum class ordering_mode { device, stream, sync };

enum class log_level { trace, debug, info, warn, error, critical, off };

inline constexpr std::uint64_t default_idle_release_ms = 1000;
inline constexpr std::uint64_t default_metrics_interval_ms = 10000;
/// Room for the blocks of a typical training step's most frequent sizes, and
/// for a 256 MiB block, while staying a small part of a device's memory.
inline constexpr std::uint64_t default_reuse_cache_bytes = std::uint64_t{256} << 20;

struct settings {
  /// True when ASYNCSHIM_DISABLE is set, or when any variable that changes
  /// behaviour has an invalid value: everything then goes to the native allocator.
  bool disabled = false;
  /// Absent: the shim's defaults, which are not the resource class's (README,
  /// "Sharing a GPU"): no initial reservation, and the device's total memory
  /// as the release threshold.
  /// @{
  std::optional<size_spec> initial_pool_size;
  std::optional<size_spec> release_threshold;
  /// @}
  /// After this many milliseconds in which the process allocates and frees
  /// nothing, its pools give their unused memory back to the device; 0: never.
  std::uint64_t idle_release_ms = default_idle_release_ms;
  /// Under device ordering, the most memory per device that freed blocks are
  /// kept in for reuse by an allocation of the same size, once the work
  /// submitted before their free has finished; absent: default_reuse_cache_bytes
  /// (0: none are kept).
  std::optional<size_spec> reuse_cache;
  /// Under device ordering, the most freed memory per device that may wait
  /// for the device to catch up with the work submitted before its free; a
  /// free beyond it waits for the oldest of those frees. Absent: no limit.
  std::optional<size_spec> free_backlog;
  /// Under device ordering, whether a free goes to the pool at once, in the
  /// legacy stream's order, while none of the program's non-blocking streams
  /// has work in progress and the process sees one device (docs/design.md,
  /// "In-order frees").
  bool in_order_frees = true;
  /// Whether pinned host memory (cudaMallocHost and the like) comes from one
  /// pool in host memory that every device can reach (docs/pinned-memory.md).
  bool host_pool = false;
  /// No limit unless set (memory_limits::any()).
  memory_limits memory_limit;
  handle_type export_handle_type = handle_type::automatic;
  stream_choice stream = stream_choice::legacy;
  shim_mode mode = shim_mode::pool;
  intercept_level intercept = intercept_level::all;
  ordering_mode ordering = ordering_mode::device;
  log_level level = log_level::warn;
  std::string log_file;     ///< empty: standard error
  std::string stats_file;   ///< empty: no statistics file; "%p" stands for the process id
  bool show_stats = false;  ///< print a statistics table at exit
  /// At exit, the blocks the program still has allocated: listed in the log
  /// (leak_report), and/or written as JSON to leak_report_file ("%p" stands
  /// for the process id).
  /// @{
  bool leak_report = false;
  std::string leak_report_file;
  /// @}
  /// Frames of each allocating call stack the leak report shows (0: none).
  unsigned leak_stack_depth = 0;
  static constexpr unsigned max_leak_stack_depth = 64;
  /// Every allocation and free as a line of RMM's CSV event log; empty: none.
  /// "%p" stands for the process id.
  std::string event_log;
  /// Live metrics in Prometheus's text format, written again every
  /// metrics_interval_ms and removed at exit; empty: none. "%p" stands for
  /// the process id.
  /// @{
  std::string metrics_file;
  std::uint64_t metrics_interval_ms = default_metrics_interval_ms;
  /// @}

  /// Whether the shim keeps statistics at all (they cost a little per call).
  [[nodiscard]] bool wants_stats() const { return show_stats || !stats_file.empty() || !metrics_file.empty(); }
  /// Whether the shim follows each allocation for a report of what is left at exit.
  [[nodiscard]] bool wants_leak_report() const { return leak_report || !leak_report_file.empty(); }
  /// Whether pinned host memory comes from the host pool (observe mode only counts).
  [[nodiscard]] bool host_pool_serves() const { return host_pool && mode == shim_mode::pool; }
  [[nodiscard]] bool intercepts_runtime() const { return intercept != intercept_level::driver; }
  [[nodiscard]] bool intercepts_driver() const { return intercept != intercept_level::runtime; }
  /// Whether device ordering may free in the legacy stream's order while no
  /// non-blocking stream has work in progress: not on per-thread streams, which do
  /// not order themselves after each other.
  [[nodiscard]] bool frees_in_order() const
  {
    return ordering == ordering_mode::device && in_order_frees && stream == stream_choice::legacy;
  }
};

struct diagnostic {
  log_level level;
  std::string text;  ///< one line, without the "asyncshim: ..." prefix
  friend bool operator==(diagnostic const&, diagnostic const&) = default;
};

struct parse_result {
  settings values;
  std::vector<diagnostic> diagnostics;  ///< in the order they should be printed
};

/// Parses an environ-style, null-terminated array of "NAME=VALUE" strings.
/// Never throws for bad input: bad values become diagnostics and documented outcomes.
[[nodiscard]] parse_result parse_environment(char const* const* envp);

/// Parsers for single values, exposed for tests and for the launcher's rules.
/// Each returns nothing when the text is not valid.
/// @{
[[nodiscard]] std::optional<size_spec> parse_size(std::string_view text);
[[nodiscard]] std::optional<memory_limits> parse_memory_limit(std::string_view text);
[[nodiscard]] std::optional<handle_type> parse_handle_type(std::string_view text);
[[nodiscard]] std::optional<stream_choice> parse_stream(std::string_view text);
[[nodiscard]] std::optional<shim_mode> parse_mode(std::string_view text);
[[nodiscard]] std::optional<intercept_level> parse_intercept(std::string_view text);
[[nodiscard]] std::optional<ordering_mode> parse_ordering(std::string_view text);
[[nodiscard]] std::optional<log_level> parse_log_level(std::string_view text);
[[nodiscard]] std::optional<bool> parse_bool(std::string_view text);
/// @}
/// A duration: "off" or "0" (0: never), or a number with the unit ms or s
/// ("500ms", "2s", "1.5s") from 1 ms to 24 h; milliseconds, rounded down.
[[nodiscard]] std::optional<std::uint64_t> parse_duration_ms(std::string_view text);
/// "1s", "250ms", "off".
[[nodiscard]] std::string duration_text(std::uint64_t milliseconds);

[[nodiscard]] char const* to_string(handle_type);
[[nodiscard]] char const* to_string(stream_choice);
[[nodiscard]] char const* to_string(shim_mode);
[[nodiscard]] char const* to_string(intercept_level);
[[nodiscard]] char const* to_string(ordering_mode);
[[nodiscard]] char const* to_string(log_level);

/// One line listing every effective setting, e.g. for the info-level banner.
[[nodiscard]] std::string describe(settings const&);

/// The candidate `written` most likely meant, by the same rules as the
/// "did you mean" of an unknown variable (words separated by '_', then
/// spelling); nothing when none is close. For the launcher's options.
[[nodiscard]] std::optional<std::string> closest_of(std::string_view written, std::span<std::string const> candidates);

/// The names of the variables this version understands.
[[nodiscard]] std::vector<std::string> const& known_variables();

/// What an invalid value of a variable does.
enum class on_invalid {
  disables,      ///< the shim is disabled for the process (settings::disabled)
  uses_default,  ///< the value is reported and the setting keeps its default
  none,          ///< every value is accepted
};

/// One configuration variable as documented (asyncshim-settings --list).
struct variable_info {
  std::string_view name;          ///< "ASYNCSHIM_..."
  std::string_view field;         ///< the member of settings it sets
  std::string_view default_text;  ///< when unset or empty: a value, or words in parentheses
  std::string_view accepted;      ///< the values accepted, on one line
  on_invalid invalid;             ///< what an invalid value does
  std::string_view summary;       ///< what the setting does, on one line
  /// Non-empty for a retired variable, which still works: what replaced it
  /// (setting it warns "NAME=value still works but is retired: <retired>").
  std::string_view retired{};
};

/// Every variable this version understands, in the order of known_variables().
[[nodiscard]] std::vector<variable_info> const& variables();

/// "disables", "uses-default", "-".
[[nodiscard]] char const* to_string(on_invalid);

}  // namespace asyncshim::config
