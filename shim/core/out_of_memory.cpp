#include "core/out_of_memory.hpp"

#include "core/deferred_frees.hpp"
#include "core/memory_release.hpp"
#include "cuda/driver.hpp"
#include "cuda/nvml.hpp"
#include "state/leak_report.hpp"
#include "state/live_blocks.hpp"
#include "support/log.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace asyncshim::shim {
namespace {

constexpr std::size_t largest_blocks_reported = 5;

// The call sites already reported (0: a free slot); beyond them every
// failure is reported.
std::array<std::atomic<std::uintptr_t>, 64> reported_sites{};

bool first_at_site(interposed_call call, void const* caller) noexcept
{
  std::uintptr_t const site =
    (reinterpret_cast<std::uintptr_t>(caller) ^ (static_cast<std::uintptr_t>(call) + 1) << 56) | 1;
  for (auto& slot : reported_sites) {
    std::uintptr_t seen = slot.load(std::memory_order_acquire);
    if (seen == site) { return false; }
    if (seen == 0) {
      if (slot.compare_exchange_strong(seen, site, std::memory_order_acq_rel)) { return true; }
      if (seen == site) { return false; }
    }
  }
  return true;
}

// Whether process `pid`, as this process sees it, has a CUDA driver loaded:
// NVML's pids are the host's, and inside a container the same number can
// name an unrelated process here.
bool uses_cuda(unsigned pid)
{
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%u/maps", pid);
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) { return false; }
  char line[512];
  bool found = false;
  while (!found && std::fgets(line, sizeof line, f) != nullptr) {
    found = std::strstr(line, "libcuda.so") != nullptr;
  }
  std::fclose(f);
  return found;
}

// The name the kernel gives process `pid` (its command, at most 15
// characters), or nothing where this process cannot see it.
std::string process_name(unsigned pid)
{
  if (!uses_cuda(pid)) { return {}; }
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%u/comm", pid);
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) { return {}; }
  char name[64] = {};
  bool const read = std::fgets(name, sizeof name, f) != nullptr;
  std::fclose(f);
  if (!read) { return {}; }
  std::string text = name;
  if (!text.empty() && text.back() == '\n') { text.pop_back(); }
  return text;
}

// The processes on `device` as NVML sees them (loaded now, never at start-up).
std::optional<std::vector<out_of_memory_report::process>> device_processes(int device)
{
  auto const& drv = driver();
  char bus_id[32] = {};
  if (drv.device_get_pci_bus_id == nullptr ||
      drv.device_get_pci_bus_id(bus_id, static_cast<int>(sizeof bus_id), device) != CUDA_SUCCESS) {
    return std::nullopt;
  }
  auto const seen = processes_on_device(bus_id);
  if (!seen) { return std::nullopt; }
  auto const me = static_cast<unsigned>(::getpid());
  std::vector<out_of_memory_report::process> out;
  for (device_process const& p : *seen) {
    out.push_back({p.pid, process_name(p.pid), p.bytes, p.pid == me});
  }
  // The largest holders first.
  std::stable_sort(out.begin(), out.end(), [](auto const& a, auto const& b) { return a.bytes > b.bytes; });
  return out;
}

// Everything the report says, gathered once for the warning and the statistics.
out_of_memory_report gather_report(shim_state& s, failed_request const& request, cuda_async_memory_resource& pool,
                                   held_back before_recovery)
{
  auto const& drv = driver();
  out_of_memory_report r;
  r.call = request.call;
  r.bytes = request.size;
  r.device = request.device;
  if (auto const limit = s.limits.limit(request.device); limit && *limit > 0) { r.limit = limit; }
  auto const handle = reinterpret_cast<CUmemoryPool>(pool.pool_handle());
  if (drv.mem_pool_get_attribute != nullptr) {
    cuuint64_t value = 0;
    if (drv.mem_pool_get_attribute(handle, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &value) == CUDA_SUCCESS) {
      r.pool_reserved = value;
    }
    if (drv.mem_pool_get_attribute(handle, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &value) == CUDA_SUCCESS) {
      r.pool_used = value;
    }
  }
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (drv.mem_get_info != nullptr && drv.mem_get_info(&free_bytes, &total_bytes) == CUDA_SUCCESS) {
    r.device_free = free_bytes;
    r.device_total = total_bytes;
  }
  r.cached = before_recovery.cached;
  r.queued = before_recovery.queued;
  r.native = s.limits.native_bytes(request.device);
  if (s.leaks != nullptr && s.settings.leak_stack_depth > 0) {
    for (live_block const& b : s.leaks->largest(request.device, largest_blocks_reported)) {
      out_of_memory_report::block block{b.bytes, b.address, b.entry_point, {}};
      for (void* frame : b.stack) {
        block.frames.push_back(stack_frame_text(frame));
      }
      r.largest_blocks.push_back(std::move(block));
    }
  }
  r.processes = device_processes(request.device);
  return r;
}

void warn_out_of_memory(out_of_memory_report const& r)
{
  std::string const limit_text =
    r.limit ? fmt::format(" inside the limit of {} (ASYNCSHIM_MEMORY_LIMIT)", byte_count{*r.limit}) : std::string{};
  std::string const native_text =
    r.native == 0 ? std::string{}
                  : fmt::format(", and {} more was passed to the native allocator", byte_count{r.native});
  std::string const held_text =
    r.cached + r.queued == 0
      ? std::string{}
      : fmt::format("; before retrying, the shim gave back {} kept for reuse and issued {} of queued frees",
                    byte_count{r.cached}, byte_count{r.queued});
  log::warn("{}({} bytes = {}) on device {}: out of memory{}; the pool has {} reserved, {} of it in use{}; the "
            "device has {} free of {}{}",
            to_string(r.call), r.bytes, byte_count{r.bytes}, r.device, limit_text, byte_count{r.pool_reserved},
            byte_count{r.pool_used}, native_text, byte_count{r.device_free}, byte_count{r.device_total}, held_text);
  if (!r.largest_blocks.empty()) {
    log::warn("  the largest blocks the program holds on device {}, with where each was allocated:", r.device);
    for (auto const& b : r.largest_blocks) {
      std::string frames;
      for (auto const& frame : b.frames) {
        frames += (frames.empty() ? "" : " <- ") + frame;
      }
      log::warn("    {} at {:#x} by {}: {}", byte_count{b.bytes}, b.address, b.entry_point,
                frames.empty() ? std::string("(no frames)") : frames);
    }
  }
  if (r.processes && !r.processes->empty()) {
    log::warn("  the processes using device {} (as the driver's NVML library sees them):", r.device);
    for (auto const& p : *r.processes) {
      log::warn("    pid {} ({}): {}", p.pid,
                p.this_process   ? std::string("this process")
                : p.name.empty() ? std::string("not visible here")
                                 : p.name,
                p.bytes ? fmt::format("{}", byte_count{*p.bytes}) : std::string("memory not reported"));
    }
  }
}

}  // namespace

void trim_pool_after(cuda_async_memory_resource& pool, CUstream stream) noexcept
{
  auto const& drv = driver();
  if (drv.stream_synchronize != nullptr) { (void)drv.stream_synchronize(stream); }
  (void)trim_pool_to(pool, 0);
}

held_back held_back_of(shim_state& s, int device) noexcept
{
  return {s.reuse.held_bytes(device), s.pending.queued_bytes(device)};
}

void report_out_of_memory(shim_state& s, failed_request const& request, cuda_async_memory_resource& pool,
                          held_back before_recovery) noexcept
{
  bool const warn = log::enabled(log::log_level::warn);
  if ((!warn && s.stats == nullptr) || !first_at_site(request.call, request.caller)) { return; }
  try {
    out_of_memory_report report = gather_report(s, request, pool, before_recovery);
    if (warn) { warn_out_of_memory(report); }
    if (s.stats != nullptr) { s.oom_reports.add(std::move(report)); }
  } catch (...) {  // no host memory for the report
  }
}

void recover_for_allocation(shim_state& s, int device, cuda_async_memory_resource& pool, CUstream own,
                            bool during_capture) noexcept
{
  auto const& drv = driver();
  if (!during_capture) {
    issue_queued(s, device);
    (void)return_cached_to_pool(s, device);
  }
  // The frees just issued and the cache's blocks just given back come back
  // to the pool once they have completed: they are on the shim's stream and
  // the legacy stream. Under stream ordering on per-thread streams a free may
  // be on any thread's stream, which only the device covers (as native
  // cudaFree would have waited for it); never during a capture.
  if (!during_capture && s.settings.ordering == config::ordering_mode::stream &&
      s.settings.stream == config::stream_choice::per_thread && drv.ctx_synchronize != nullptr) {
    (void)drv.ctx_synchronize();
  } else if (drv.stream_synchronize != nullptr) {
    (void)drv.stream_synchronize(own);
    if (!during_capture) { (void)drv.stream_synchronize(CU_STREAM_LEGACY); }
  }
  forget_completed_batches(s, device);
  (void)trim_pool_to(pool, 0);
}

}  // namespace asyncshim::shim
