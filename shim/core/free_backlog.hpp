// ASYNCSHIM_FREE_BACKLOG under device ordering (README, "Choosing an
// ordering"; docs/design.md, "The free backlog"): how much freed memory of a
// device may wait for the device to catch up with the work submitted before
// its free, before a free waits. A free that finds more waiting (queued, and
// issued on the shim's stream but not yet seen to complete:
// state/issued_frees.hpp) issues the queue and waits for the oldest issued
// frees until at most half the limit waits, as native cudaFree waits for the
// device. No block is handed out any earlier than without it; the host only
// stops running further ahead.
#pragma once

#include "state/shim_state.hpp"

#include <cuda.h>

#include <cstdint>

namespace asyncshim::shim {

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
