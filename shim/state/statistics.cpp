#include "state/statistics.hpp"

#include <ctime>

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
    case interposed_call::count: break;
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

void statistics::allocation_failed(int device) noexcept
{
  if (device_counters* c = slot(device)) {
    c->used.store(true, relaxed);
    c->failed_allocations.fetch_add(1, relaxed);
  }
}

void statistics::allocation_passed_through(int device, passthrough_reason reason) noexcept
{
  if (device_counters* c = slot(device)) {
    c->used.store(true, relaxed);
    c->passed_through[static_cast<std::size_t>(reason)].fetch_add(1, relaxed);
  }
}

void statistics::free_passed_through() noexcept { frees_passed_through_.fetch_add(1, relaxed); }

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

}  // namespace asyncshim::shim
