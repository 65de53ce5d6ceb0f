// Device ordering's reuse of freed blocks without the pool (state/reuse_cache.hpp;
// docs/design.md, "Reuse cache"): what goes in, what comes out, and when
// everything goes back to the pool.
#pragma once

#include "state/device_pools.hpp"
#include "state/reuse_cache.hpp"
#include "state/shim_state.hpp"

#include <cstddef>

namespace asyncshim::shim {

/// Whether freed blocks of `device` are kept for reuse (device ordering, and
/// ASYNCSHIM_REUSE_CACHE not 0).
[[nodiscard]] inline bool reuses_blocks(shim_state& s, int device) noexcept { return s.pools.reuse_limit(device) > 0; }

/// A batch of freed blocks (their records still claimed: a cached block's
/// record goes once it leaves for the pool), just fenced on the shim's
/// stream of `device`, in the pool's context: kept, behind an event recorded
/// there now; when it cannot be (no event, no host memory), freed to `pool`
/// on that stream instead.
void keep_for_reuse(shim_state& s, int device, cuda_async_memory_resource& pool, device_streams const& streams,
                    reuse_cache::block const* blocks, std::size_t count) noexcept;

/// A block the program freed in the legacy stream's order (its record still
/// claimed), kept for reuse on the legacy stream (the caller has recorded its
/// action on the legacy stream; a hit makes no CUDA call); false when it does
/// not fit within the limit (the caller frees it to the pool).
[[nodiscard]] bool keep_freed_in_order(shim_state& s, int device, void* ptr, std::size_t bytes) noexcept;

/// Moves the batches of `device` whose fence has completed to the idle blocks
/// (those beyond the limit go to the pool). The caller holds the tracker's
/// access and no capture is in progress.
void collect_completed(shim_state& s, int device) noexcept;

/// An idle block of exactly `bytes` for an allocation on `device`, or null;
/// on a miss, first moves the batches whose fence has completed to the idle
/// blocks (asking the device at most once every few microseconds). Counts
/// hits and misses. The caller holds the tracker's access and
/// no capture is in progress.
[[nodiscard]] void* reused_block(shim_state& s, int device, std::size_t bytes) noexcept;

/// Everything the cache of `device` holds goes to the pool, each block's record
/// gone first: freed on the shim's stream, behind the fences already there, or
/// on the legacy stream for a block freed in its order, so the pool hands a
/// block out (or gives its memory back) only once its work has finished. The caller holds the tracker's access
/// and no capture is in progress. The bytes handed over.
std::size_t return_cached_to_pool(shim_state& s, int device) noexcept;
/// The same at a device reset (the caller holds the tracker's access
/// exclusively): the cache's events are destroyed too.
void return_cached_to_pool_at_reset(shim_state& s, int device) noexcept;

}  // namespace asyncshim::shim
