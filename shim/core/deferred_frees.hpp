// Frees under ASYNCSHIM_ORDERING=device, and frees deferred by a stream
// capture in every ordering: the policy (the data: state/deferred_frees.hpp).
//
// Invariant: a freed block is handed out again only after every piece of
// work that could touch it has finished, or is ordered before its next
// owner's work. A free takes one of three paths:
//  1. in order: no non-blocking stream that may use the block has work in
//     progress: to the pool at once on the legacy stream, which orders it
//     after the legacy and blocking streams' work, or kept in the reuse
//     cache in that order (core/allocator.cpp freed_in_order,
//     stream_tracker::free_in_order);
//  2. fenced: queued, and issued with its batch behind a fence, an event
//     recorded on every stream that may use it and waited for by the
//     shim's stream; the pool gets it after the fence, or the reuse cache
//     keeps it until the fence's event has completed. A free made while a
//     capture is in progress is issued this way once no capture is; one made
//     in a context not the pool's is fenced at once (core/allocator.cpp
//     free_fenced, then queue_free and issue_queued below);
//  3. waited for: where no fence can cover every user of the block (a
//     record fails, a device given access has no pool of the shim's, a
//     context of the program's own), the host waits for the device first,
//     as native cudaFree does (fence_or_synchronize below). With a backlog limit a free also waits for
//     the oldest issued batches once too much freed memory waits.
#pragma once

#include "cuda/calling_thread.hpp"
#include "state/allocation_registry.hpp"
#include "state/device_pools.hpp"
#include "state/shim_state.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>

namespace asyncshim::shim {

// ---- How the frees waiting in free_queue reach the pool: behind one fence
// per chunk, on the shim's own stream, in the pool's context, and only while
// no stream capture is in progress (docs/design.md, "Ordering").
/// Whether the calling thread's current context is the one `device`'s pool
/// and the shim's stream and events live in: a free made there can wait in
/// the queue, because the fence recorded later in that same context covers
/// the work the program had submitted there.
[[nodiscard]] bool in_pool_context(shim_state& s, int device) noexcept;

/// Makes the shim's stream on `device` (the current context's) wait for the
/// work submitted so far to the legacy stream of the current context (and so
/// to every blocking stream), to the legacy streams of the devices given
/// access to its memory, and to every non-blocking stream; where it cannot,
/// waits on the host instead, as native cudaFree does. The contexts the
/// program made on `device`, whose legacy and blocking streams no fence
/// reaches, are waited for on the host first.
[[nodiscard]] cudaError_t fence_or_synchronize(shim_state& s, int device, api_level level) noexcept;

/// Waits on the host for the contexts the program made on `device` (neither a
/// fence nor a synchronization of the device's primary context reaches their
/// legacy and blocking streams).
[[nodiscard]] cudaError_t synchronize_program_contexts(int device) noexcept;

/// Waits on the host for `device`'s primary context (retained for the wait);
/// none when it cannot be retained.
[[nodiscard]] std::optional<cudaError_t> synchronize_primary_context(int device) noexcept;

/// Waits on the host for the current context's work, for the contexts the
/// program made on `device` and for the work of every device given access to
/// `device`'s memory (it may use a block on its own streams), as native
/// cudaFree does.
[[nodiscard]] cudaError_t synchronize_with_accessors(int device, api_level level) noexcept;

/// Hands the frees queued for `device` to the pool, or to its reuse cache
/// (below); the bytes handed over.
/// The caller holds the stream tracker's access and has checked that no
/// capture is in progress.
std::size_t issue_queued(shim_state& s, int device) noexcept;

/// Queues a claimed free; issues the device's queue when it is due and no
/// capture is in progress. Fails (cudaErrorMemoryAllocation) only without
/// host memory to remember it (or for a device past max_devices, which has
/// no pool either).
[[nodiscard]] cudaError_t queue_free(shim_state& s, void* ptr, allocation_record const& record, bool urgent) noexcept;

/// Issues the queues that hold frees put off by a capture, once none is in progress.
void issue_urgent_queues(shim_state& s) noexcept;
/// The same, for every interposed call: nothing but one atomic load when no
/// free is waiting for a capture to end.
inline void issue_urgent(shim_state& s) noexcept
{
  if (s.pending.urgent_devices() != 0) { issue_urgent_queues(s); }
}

/// Frees put off while a stream capture was in progress, issued now that
/// none is (called when a capture ends, and by the next allocation or free).
void issue_urgent_frees() noexcept;
/// After a successful cuCtxSynchronize (cudaDeviceSynchronize), and from the
/// idle release: every queued free is handed to the pool.
void issue_all_queued_frees() noexcept;

// ---- Device ordering's reuse of freed blocks without the pool (state/deferred_frees.hpp;
// docs/design.md, "Reuse cache"): what goes in, what comes out, and when
// everything goes back to the pool.
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
/// not fit within the limit (the caller frees it to the pool). The thread's
/// older blocks it takes the room of go to the pool, their bytes added to
/// `to_pool`. In the pool's context.
[[nodiscard]] bool keep_freed_in_order(shim_state& s, int device, void* ptr, std::size_t bytes,
                                       std::size_t& to_pool) noexcept;

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

// ---- ASYNCSHIM_FREE_BACKLOG under device ordering (README, "Choosing an
// ordering"; docs/design.md, "The free backlog"): how much freed memory of a
// device may wait for the device to catch up with the work submitted before
// its free, before a free waits. A free that finds more waiting (queued, and
// issued on the shim's stream but not yet seen to complete:
// state/deferred_frees.hpp) issues the queue and waits for the oldest issued
// frees until at most half the limit waits, as native cudaFree waits for the
// device. No block is handed out any earlier than without it; the host only
// stops running further ahead.
/// Whether `device` has a backlog limit. Without the setting this is one
/// branch on a flag of the settings, and nothing else is called.
[[nodiscard]] inline bool limits_backlog(shim_state& s, int device) noexcept
{
  return s.backlog_limited && s.pools.backlog_limit(device) != device_pools::no_backlog_limit;
}

/// Whether more than the limit of `device` waits now (queued and issued); the
/// device has a limit.
[[nodiscard]] bool waiting_over_limit(shim_state& s, int device) noexcept;
/// The same for any device, for every free: without the setting, one branch
/// here and no call.
[[nodiscard]] inline bool backlog_over_limit(shim_state& s, int device) noexcept
{
  return limits_backlog(s, device) && waiting_over_limit(s, device);
}

/// A batch of `bytes` was just issued on the shim's stream `own` of `device`,
/// in the pool's context: remembered behind an event recorded there, when the
/// device has a backlog limit.
void note_issued_batch(shim_state& s, int device, CUstream own, std::uint64_t bytes) noexcept;

/// After the program's free was queued and the queue issued: waits for the
/// oldest issued frees of `device` until at most half its limit waits, or
/// nothing issued is left to wait for. Not while a capture is in progress (the
/// shim then touches no stream), and holding the tracker's access meanwhile,
/// so that none begins. The calling thread holds no lock of the shim's.
void wait_for_backlog(shim_state& s, int device) noexcept;

/// After the device (or the shim's stream) was synchronized: every issued
/// batch has completed and is forgotten. In the pool's context, or any: only
/// events are asked.
void forget_completed_batches(shim_state& s, int device) noexcept;

/// A device reset: the events of its issued batches go with its context. The
/// caller holds the tracker's access exclusively.
void forget_issued_at_reset(shim_state& s, int device) noexcept;

}  // namespace asyncshim::shim
