#include "core/free_backlog.hpp"

#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "state/stream_tracker.hpp"

#include <chrono>
#include <vector>

namespace asyncshim::shim {
namespace {

// Completed batches an issue forgets at most (each costs a cuEventQuery).
constexpr int forget_per_issue = 2;

std::uint64_t waiting_bytes(shim_state& s, int device) noexcept
{
  return s.pending.queued_bytes(device) + s.issued.bytes(device);
}

// Forgets the oldest batches whose events have completed, at most `most`.
void forget_completed(shim_state& s, int device, int most) noexcept
{
  auto const query = driver().event_query;
  if (query == nullptr) { return; }
  for (int i = 0; i < most; ++i) {
    issued_frees::batch_name const oldest = s.issued.oldest(device);
    if (oldest.done == nullptr || query(oldest.done) == CUDA_ERROR_NOT_READY) { return; }
    (void)s.issued.completed(device, oldest.serial);
  }
}

}  // namespace

bool waiting_over_limit(shim_state& s, int device) noexcept
{
  std::uint64_t const waiting = waiting_bytes(s, device);
  if (s.stats != nullptr) { s.stats->backlog_seen(device, waiting); }
  return waiting > s.pools.backlog_limit(device);
}

void note_issued_batch(shim_state& s, int device, CUstream own, std::uint64_t bytes) noexcept
{
  if (bytes == 0 || !limits_backlog(s, device)) { return; }
  auto const& drv = driver();
  if (drv.event_record == nullptr || drv.event_create == nullptr || drv.event_query == nullptr) { return; }
  // Batches the device has caught up with are forgotten here too, a few per
  // issue, so that a device that keeps up never has a long list (nor many
  // events) behind it.
  forget_completed(s, device, forget_per_issue);
  CUevent done = s.issued.spare_event(device);
  if (done == nullptr && drv.event_create(&done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) { return; }
  // Not remembered (no event record, no host memory): this batch is not
  // waited for; the limit is about memory, never about correctness. The event
  // goes back to the spares, not destroyed: a recycled one may still be held
  // by a thread that read it as the oldest of an earlier batch.
  if (drv.event_record(done, own) == CUDA_SUCCESS && s.issued.add(device, done, bytes)) { return; }
  s.issued.keep_spare_event(device, done);
}

void wait_for_backlog(shim_state& s, int device) noexcept
{
  auto const& drv = driver();
  if (drv.event_synchronize == nullptr || drv.event_query == nullptr) { return; }
  stream_tracker& streams = tracker();
  auto access = streams.access();
  if (streams.captures_in_progress() || s.pools.existing(device) == nullptr) { return; }
  device_streams const own = s.pools.streams(device);
  api_level_scope level{api_level::driver};
  context_scope in_context{own.context};
  if (!in_context.current()) { return; }
  // Down to half the limit, so that the frees after this one do not each
  // find the backlog over the limit again and wait for one small batch each.
  std::uint64_t const down_to = s.pools.backlog_limit(device) / 2;
  auto const start = std::chrono::steady_clock::now();
  bool waited = false;
  while (waiting_bytes(s, device) > down_to) {
    issued_frees::batch_name const oldest = s.issued.oldest(device);
    if (oldest.done == nullptr) { break; }  // nothing issued left: the queue itself is over
    if (drv.event_query(oldest.done) == CUDA_ERROR_NOT_READY) {
      // Still the oldest batch? Its event may have been recorded again for a
      // newer one meanwhile, whose work this free need not wait for.
      if (s.issued.oldest(device).serial != oldest.serial) { continue; }
      // An error of the program's earlier work also ends the wait: its own
      // calls report it.
      if (drv.event_synchronize(oldest.done) != CUDA_SUCCESS) { break; }
      waited = true;
    }
    (void)s.issued.completed(device, oldest.serial);  // false: another thread saw it first
  }
  if (s.stats != nullptr) {
    auto const ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start);
    s.stats->backlog_over(device, waited, waited ? static_cast<std::uint64_t>(ns.count()) : 0);
  }
}

void forget_completed_batches(shim_state& s, int device) noexcept
{
  if (!limits_backlog(s, device)) { return; }
  forget_completed(s, device, 1 << 30);
}

void forget_issued_at_reset(shim_state& s, int device) noexcept
{
  std::vector<CUevent> events;
  s.issued.take_all(device, events);
  auto const destroy = driver().event_destroy;
  for (CUevent e : events) {
    if (destroy != nullptr) { (void)destroy(e); }
  }
}

}  // namespace asyncshim::shim
