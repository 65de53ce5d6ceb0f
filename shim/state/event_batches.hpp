// Batches issued on one stream behind an event each, oldest first: the
// shape both the reuse cache's batches in flight and the free backlog's issued
// batches take (state/deferred_frees.hpp).
//
// Invariant: batches complete in the order they were added (their events are
// recorded on one stream), and a batch is named by its serial number, never
// by its event: once a batch has completed its event is recorded again for a
// later one, so a thread that looked at the earlier batch must not complete
// the later. Nothing here calls CUDA or locks: the owner holds its own lock.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <utility>
#include <vector>

namespace asyncshim::shim {

template <class Payload>
class event_batches {
 public:
  struct name {
    CUevent done = nullptr;  ///< null: none
    std::uint64_t serial = 0;
  };

  /// Throws std::bad_alloc (nothing is added then).
  void add(CUevent done, Payload payload)
  {
    batches_.push_back({done, next_serial_, std::move(payload)});
    ++next_serial_;
  }

  [[nodiscard]] bool empty() const noexcept { return batches_.empty(); }
  template <class F>
  void for_each_payload(F&& f) const
  {
    for (batch const& b : batches_) {
      f(b.payload);
    }
  }
  [[nodiscard]] name oldest() const noexcept
  {
    if (batches_.empty()) { return {}; }
    return {batches_.front().done, batches_.front().serial};
  }

  struct completed_batch {
    CUevent done = nullptr;  ///< the caller's again
    Payload payload;
  };
  /// Batch `serial` has completed: taken out; nothing when it is no longer
  /// the oldest (another thread completed it first, or everything was taken).
  [[nodiscard]] std::optional<completed_batch> complete(std::uint64_t serial) noexcept
  {
    if (batches_.empty() || batches_.front().serial != serial) { return std::nullopt; }
    std::optional<completed_batch> out{completed_batch{batches_.front().done, std::move(batches_.front().payload)}};
    batches_.pop_front();
    return out;
  }

  /// Every event to `events` (when given: their context is going; otherwise
  /// the batches' stay as spares, as another thread may be asking one of them
  /// whether its batch has completed), every batch's payload to `f` (which
  /// must not throw), and the batches forgotten. Throws std::bad_alloc before
  /// anything is forgotten.
  template <class F>
  void take_all(F&& f, std::vector<CUevent>* events)
  {
    std::size_t const spares_before = spare_events_.size();
    try {
      for (batch const& b : batches_) {
        spare_events_.push_back(b.done);
      }
      if (events != nullptr) { events->insert(events->end(), spare_events_.begin(), spare_events_.end()); }
    } catch (...) {
      spare_events_.resize(spares_before);
      throw;
    }
    for (batch& b : batches_) {
      f(std::move(b.payload));
    }
    batches_.clear();
    if (events != nullptr) { spare_events_.clear(); }
  }

  /// Everything forgotten, events included, without allocating.
  void forget() noexcept
  {
    batches_.clear();
    spare_events_.clear();
  }

  /// Events of completed batches, kept for later batches.
  /// @{
  [[nodiscard]] CUevent spare_event() noexcept
  {
    if (spare_events_.empty()) { return nullptr; }
    CUevent const e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  /// False when there is no room to keep it.
  [[nodiscard]] bool keep_spare_event(CUevent event) noexcept
  {
    try {
      spare_events_.push_back(event);
    } catch (...) {
      return false;
    }
    return true;
  }
  /// @}

 private:
  struct batch {
    CUevent done = nullptr;
    std::uint64_t serial = 0;
    Payload payload;
  };
  std::deque<batch> batches_;
  std::vector<CUevent> spare_events_;
  std::uint64_t next_serial_ = 1;
};

}  // namespace asyncshim::shim
