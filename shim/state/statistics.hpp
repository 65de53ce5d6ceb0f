// Per-device counters behind ASYNCSHIM_STATS_FILE and ASYNCSHIM_SHOW_STATS.
// They exist only when statistics were asked for: otherwise the allocator
// holds a null pointer and pays one branch per call.
#pragma once

#include "state/device_pools.hpp"
#include "support/device_limit.hpp"

#include <asyncshim/config/settings.hpp>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace asyncshim::shim {

/// Why an allocation went to the native allocator although the shim is active.
enum class passthrough_reason : int {
  zero_size_or_null,  ///< cudaMalloc(&p, 0) or cudaMalloc(nullptr, n): native semantics
  no_current_device,  ///< cudaGetDevice failed (no device, no driver, ...)
  pool_unavailable,   ///< the device's pool could not be created
  capture,            ///< a stream capture forbids the call: the native call fails as natively
  count
};
[[nodiscard]] char const* to_string(passthrough_reason reason) noexcept;

/// The interposed entry points, as named in the statistics.
enum class interposed_call : int {
  malloc,
  free,
  driver_malloc,
  driver_free,
  malloc_pitch,         ///< cudaMallocPitch
  malloc_3d,            ///< cudaMalloc3D
  driver_malloc_pitch,  ///< cuMemAllocPitch_v2
  count
};
/// Whether `call` allocates (rather than frees).
[[nodiscard]] constexpr bool allocates(interposed_call call) noexcept
{
  return call != interposed_call::free && call != interposed_call::driver_free && call != interposed_call::count;
}
[[nodiscard]] char const* to_string(interposed_call call) noexcept;

/// The pinned host memory calls the host pool serves (ASYNCSHIM_HOST_POOL), as named in the statistics.
enum class pinned_call : int {
  malloc_host,        ///< cudaMallocHost
  host_alloc,         ///< cudaHostAlloc
  driver_alloc_host,  ///< cuMemAllocHost_v2
  driver_host_alloc,  ///< cuMemHostAlloc
  count
};
[[nodiscard]] char const* to_string(pinned_call call) noexcept;

/// Pinned host memory: the host pool's blocks, and the requests it left to the native call.
struct host_counters {
  std::atomic<std::uint64_t> allocations{0};
  std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(pinned_call::count)> allocations_by_call{};
  std::atomic<std::uint64_t> frees{0};
  std::atomic<std::uint64_t> bytes_requested{0};
  std::atomic<std::uint64_t> bytes_in_use{0};
  std::atomic<std::uint64_t> peak_bytes_in_use{0};
  std::atomic<std::uint64_t> passed_through{0};  ///< answered by the native call (write-combined, no pool, ...)
  std::atomic<bool> used{false};                 ///< anything recorded
};

struct device_counters {
  std::atomic<std::uint64_t> allocations{0};  ///< served: by the pool, or counted in observe mode
  /// The same, by the entry point that caught them (cudaMalloc, cuMemAlloc_v2, the pitched calls).
  std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(interposed_call::count)> allocations_by_call{};
  std::atomic<std::uint64_t> frees{0};
  std::atomic<std::uint64_t> in_order_frees{0};  ///< of them, to the pool at once on the legacy stream
  std::atomic<std::uint64_t> bytes_requested{0};
  std::atomic<std::uint64_t> bytes_in_use{0};
  std::atomic<std::uint64_t> peak_bytes_in_use{0};
  std::atomic<std::uint64_t> failed_allocations{0};
  /// Allocations the pool could not serve at first, for which the shim made
  /// what it holds usable again and tried once more (core/out_of_memory.hpp),
  /// and those of them that then succeeded.
  /// @{
  std::atomic<std::uint64_t> oom_recoveries{0};
  std::atomic<std::uint64_t> oom_recovered{0};
  /// @}
  std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(passthrough_reason::count)> passed_through{};
  std::array<std::atomic<std::uint64_t>, static_cast<std::size_t>(interposed_call::count)> time_ns{};
  /// Legacy IPC on pool memory: blocks given a handle here, blocks opened
  /// here from other processes' handles (core/ipc_export.cpp, core/ipc_import.cpp).
  /// @{
  std::atomic<std::uint64_t> ipc_exported_blocks{0};
  std::atomic<std::uint64_t> ipc_imported_blocks{0};
  /// @}
  /// The reuse cache under device ordering (state/deferred_frees.hpp): allocations
  /// served from it, those that looked and found no block of their size, and
  /// the most it held at once (idle and in flight).
  /// @{
  std::atomic<std::uint64_t> reuse_hits{0};
  std::atomic<std::uint64_t> reuse_misses{0};
  std::atomic<std::uint64_t> reuse_peak_held_bytes{0};
  /// @}
  /// The free backlog under device ordering (ASYNCSHIM_FREE_BACKLOG,
  /// core/deferred_frees.hpp): frees that found more than the limit waiting,
  /// those of them that then waited on the host for issued frees the device
  /// had not finished, how long they waited in all, and the most memory seen
  /// waiting.
  /// @{
  std::atomic<std::uint64_t> backlog_frees_over_limit{0};
  std::atomic<std::uint64_t> backlog_frees_waited{0};
  std::atomic<std::uint64_t> backlog_wait_ns{0};
  std::atomic<std::uint64_t> backlog_peak_bytes{0};
  /// @}
  std::atomic<bool> used{false};  ///< anything recorded: reported only then
};

class statistics {
 public:
  static constexpr int max_devices = shim::max_devices;
  static constexpr int unattributed = -1;  ///< a call that cannot be tied to a device

  void allocation_served(int device, std::size_t bytes, interposed_call call) noexcept;
  void free_served(int device, std::size_t bytes) noexcept;
  void free_in_order(int device) noexcept;
  void allocation_failed(int device) noexcept;
  void oom_recovery(int device, bool succeeded) noexcept;
  void allocation_passed_through(int device, passthrough_reason reason) noexcept;
  void free_passed_through() noexcept;
  void block_exported(int device) noexcept;
  void block_imported(int device) noexcept;
  void reuse_hit(int device) noexcept;
  void reuse_miss(int device) noexcept;
  void reuse_held(int device, std::uint64_t bytes_now) noexcept;
  void backlog_seen(int device, std::uint64_t bytes_now) noexcept;
  void backlog_over(int device, bool waited, std::uint64_t nanoseconds) noexcept;
  void add_time(int device, interposed_call call, std::uint64_t nanoseconds) noexcept;
  /// Pinned host memory (ASYNCSHIM_HOST_POOL).
  /// @{
  void pinned_served(std::size_t bytes, pinned_call call) noexcept;
  void pinned_freed(std::size_t bytes) noexcept;
  void pinned_passed_through() noexcept;
  [[nodiscard]] host_counters const& host() const noexcept { return host_; }
  /// @}

  /// nullptr for a device outside [0, max_devices).
  [[nodiscard]] device_counters const* device(int index) const noexcept;
  [[nodiscard]] device_counters const& unattributed_counters() const noexcept { return unattributed_; }
  [[nodiscard]] std::uint64_t frees_passed_through() const noexcept { return frees_passed_through_.load(); }

 private:
  device_counters* slot(int device) noexcept;
  /// Adds one to a count of `device` (which is then reported).
  void count(int device, std::atomic<std::uint64_t> device_counters::*counter) noexcept;

  std::array<device_counters, max_devices> devices_;
  device_counters unattributed_;
  host_counters host_;
  std::atomic<std::uint64_t> frees_passed_through_{0};
};

/// Measures one interposed call when `stats` is not null, charging the device
/// set in `device` by the time the call returns.
class timed_call {
 public:
  timed_call(statistics* stats, interposed_call call) noexcept;
  ~timed_call();
  timed_call(timed_call const&) = delete;
  timed_call& operator=(timed_call const&) = delete;

  int device = statistics::unattributed;

 private:
  statistics* stats_;
  interposed_call call_;
  std::uint64_t start_ns_;
};

// The statistics report written at process exit: the JSON document of
// ASYNCSHIM_STATS_FILE (format: docs/statistics-format.md, "format_version" 1) and
// the table of ASYNCSHIM_SHOW_STATS.
class stream_tracker;

class out_of_memory_reports;

struct report_sources {
  config::settings const& settings;
  statistics const& stats;
  device_pools const& pools;
  stream_tracker const* streams = nullptr;  ///< whether submissions were followed; none: they were not
  out_of_memory_reports const* oom_reports = nullptr;
};

/// The JSON document for process `pid`.
[[nodiscard]] std::string stats_json(report_sources const& sources, long pid);
/// The human-readable table, one string per line.
[[nodiscard]] std::string stats_table(report_sources const& sources);
/// `path` with every "%p" replaced by `pid`.
[[nodiscard]] std::string expand_stats_path(std::string const& path, long pid);

/// Arranges for the report to be written when the process exits (once; call
/// it after the program's CUDA runtime is initialized, so that this handler
/// runs before the runtime's own teardown). A child made by fork reports
/// nothing: it passes everything through (see state/shim_state.cpp).
void report_at_exit(report_sources const& sources) noexcept;

}  // namespace asyncshim::shim
