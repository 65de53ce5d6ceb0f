// How the frees waiting in free_queue reach the pool: behind one fence
// per chunk, on the shim's own stream, in the pool's context, and only while
// no stream capture is in progress (docs/design.md, "Ordering").
#pragma once

#include "cuda/calling_thread.hpp"
#include "state/allocation_registry.hpp"
#include "state/device_pools.hpp"
#include "state/shim_state.hpp"

#include <cuda_runtime_api.h>

namespace asyncshim::shim {

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

/// Waits on the host for the current context's work, for the contexts the
/// program made on `device` and for the work of every device given access to
/// `device`'s memory (it may use a block on its own streams), as native
/// cudaFree does.
[[nodiscard]] cudaError_t synchronize_with_accessors(int device, api_level level) noexcept;

/// Hands the frees queued for `device` to the pool, or to its reuse cache
/// (core/reused_blocks.hpp); the bytes handed over.
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

}  // namespace asyncshim::shim
