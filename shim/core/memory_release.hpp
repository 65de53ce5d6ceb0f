// Giving the pools' unused memory back to the device, so that other processes
// on the GPU can have it (README, "Sharing a GPU"). Two occasions:
//  - a device that runs short: once a thread has freed another 64 MiB to the
//    pool (a block the reuse cache keeps leaves it as it was), if
//    its pool holds more unused memory than the device has free (and more
//    than 256 MiB), the freeing thread waits for those frees on the device,
//    as native cudaFree waits, and the pool gives its unused memory back
//    (the device's free memory is read again only once the pool holds twice
//    as much unused, or a second later);
//  - a process gone idle: the idle release, below.
// A release leaves the pool what the user asked it to keep: the release
// threshold or the initial pool size they set, else nothing.
#pragma once

#include "state/shim_state.hpp"

#include <cuda.h>

#include <cstddef>
#include <cstdint>

namespace asyncshim::shim {

/// Below this much unused memory a pool is never released early (the device's
/// free memory, which costs about 6 us to read on an H200, is not even asked).
inline constexpr std::uint64_t short_device_floor = std::uint64_t{256} << 20;

/// What a pool has reserved, and how much of that it holds unused (frees
/// queued by the shim are still in use for the pool; frees in flight on the
/// device are not).
/// @{
struct pool_usage {
  std::uint64_t reserved = 0;
  std::uint64_t unused = 0;
};
[[nodiscard]] pool_usage usage_of(cuda_async_memory_resource const& pool) noexcept;
/// @}

/// Gives the pool's unused memory back to the device down to `keep` bytes
/// reserved; in the pool's context. False when the driver cannot trim.
bool trim_pool_to(cuda_async_memory_resource& pool, std::uint64_t keep) noexcept;

/// The program freed `bytes` of `device`'s pool memory, now handed to the pool
/// on `stream` (a free at once, or a batch of queued frees). The calling
/// thread holds the tracker's access and no capture is in progress.
void note_freed(shim_state& s, int device, std::size_t bytes, CUstream stream) noexcept;

/// What the pool of `device` holds unused beyond what it keeps (0 without a pool).
[[nodiscard]] std::uint64_t releasable_bytes(shim_state& s, int device) noexcept;

/// Gives back what the pool of `device` holds unused beyond what it keeps;
/// memory whose frees are still in flight on the device stays. The caller
/// holds the tracker's access and no capture is in progress. Returns the bytes
/// given back.
std::uint64_t release_unused(shim_state& s, int device) noexcept;

// The idle release (README, "Sharing a GPU"): once the program has allocated
// and freed nothing for ASYNCSHIM_IDLE_RELEASE, its pools give their unused
// memory back to the device. A program that has gone quiet makes no calls the
// shim could act in, so this is a thread of the shim's own ("asyncshim-idle"),
// started with the process's first pool: it wakes once a period, does nothing
// while the program is busy, never works while a stream capture is in
// progress, and stops before the process's exit handlers tear CUDA down. Its
// signals are blocked; a forked child has no such thread. The same thread
// writes the metrics file (core/metrics_file.hpp), every
// ASYNCSHIM_METRICS_INTERVAL, and removes it at exit ("asyncshim-metric"
// when the idle release is off).

/// Starts the thread, once per process, unless ASYNCSHIM_IDLE_RELEASE is off
/// and no metrics file is wanted (cheap once started: one atomic load, for
/// the allocation path).
/// @{
void start_idle_release_thread(shim_state& s) noexcept;
inline void start_idle_release(shim_state& s) noexcept
{
  if (!s.idle_release_started.load(std::memory_order_relaxed)) { start_idle_release_thread(s); }
}
/// @}

/// One period's work, when the program has done nothing for a whole period:
/// queued frees are issued and every pool gives back what it holds unused
/// beyond what it keeps. (What the thread runs; a test calls it directly.)
void release_when_idle(shim_state& s) noexcept;

}  // namespace asyncshim::shim
