// What the shim knows about the program's streams and stream captures, from
// the driver calls it follows (core/followed_calls.cpp): the live
// non-blocking streams, each with an event of the shim's for fences; the
// captures in progress; whether frees may go to the pool at once in the
// legacy stream's order; and, with followed submissions, which streams were
// given work since each block was handed out.
//
// Invariant: a free goes in order only when no work that may use its block
// can run after the next owner's work without being ordered before it: no
// capture in progress, one device, no context of the program's own, and
// every non-blocking stream that may use the block idle (with followed
// submissions, only those given work since the block was handed out). The
// free goes on the legacy stream, after the legacy and blocking streams'
// work; a non-blocking stream waits (on the device) for the legacy stream
// before it can use the block again: at the free, or, with followed
// submissions, when it next gets work; one made later, from the last such
// free on (its settle point). Everything else is fenced. The locks and why there are two: docs/design.md, "Thread
// safety"; the mechanism: docs/design.md, "In-order frees" and "Followed
// submissions".
#pragma once

#include "cuda/calling_thread.hpp"
#include "support/sharded_shared_mutex.hpp"

#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <vector>

namespace asyncshim::shim {

class stream_tracker {
 public:
  /// Held while the shim issues stream work of its own.
  /// @{
  using shared_access = std::shared_lock<sharded_shared_mutex>;
  [[nodiscard]] shared_access access() { return shared_access{capture_mutex_}; }
  /// @}
  /// Held while a device's pool goes (a reset): no stream work of the shim's
  /// own is in progress meanwhile. Never taken by a thread holding access().
  [[nodiscard]] std::unique_lock<sharded_shared_mutex> exclusive_access() { return exclusively(capture_mutex_); }

  /// Whether a capture is in progress anywhere in the process (cheap).
  [[nodiscard]] bool captures_in_progress() const noexcept { return captures_.load(std::memory_order_acquire) > 0; }
  /// Whether CUDA forbids the calling thread "potentially unsafe" calls
  /// (cudaMalloc, cudaFree, synchronization) now: a non-relaxed capture of its
  /// own, or, in global mode, a global-mode capture of another thread. The
  /// caller holds access().
  [[nodiscard]] bool calling_thread_is_prohibited() const noexcept;

  /// Stream lifetime. `created` runs after the real creation (the stream's
  /// context is current). `destroy` runs the real destruction: a destroyed
  /// stream's work goes on on the device, so its event is recorded first and
  /// stays in every fence until it has completed.
  /// @{
  void stream_created(CUstream stream, unsigned flags) noexcept;
  template <class RealDestroy>
  CUresult destroy_stream(CUstream stream, RealDestroy real_destroy) noexcept
  {
    CUresult result = CUDA_SUCCESS;
    {
      auto lock = exclusively(stream_mutex_);
      bool recorded = false;
      tracked_stream* const found = before_destroy(stream, recorded);
      result = real_destroy();
      if (result == CUDA_SUCCESS && found != nullptr) {
        found->stream = nullptr;
        // At once if the work its event now stands for is done: it no longer
        // counts (not when the record could not be made: the event is older).
        if (recorded) { drop_completed_locked(); }
      }
    }
    if (result == CUDA_SUCCESS) { forget_captures_of(stream); }
    return result;
  }
  /// @}
  /// Everything that lives in `context` (a context being destroyed or reset).
  void context_destroying(CUcontext context) noexcept;
  /// A context the program made on `device` (cuCtxCreate*): no fence reaches
  /// its legacy and blocking streams, so fences wait for it on the host
  /// (core/deferred_frees.hpp) until it is destroyed.
  void context_made(CUcontext context, int device) noexcept;
  /// Calls each(context) for every context the program made on `device`,
  /// under a lock that context_made and context_destroying also take.
  template <class Each>
  void for_each_program_context(int device, Each each) noexcept
  {
    // Nearly every program makes none: no lock for them at each fence.
    if (program_context_count_.load(std::memory_order_acquire) == 0) { return; }
    std::lock_guard lock{contexts_mutex_};
    for (program_context const& c : program_contexts_) {
      if (c.device == device) { each(c.context); }
    }
  }
  /// Waits on the host until the work submitted before the last in-order
  /// free has finished, so that every block handed out so far is idle: for
  /// one block about to be used outside the legacy stream's order (a legacy
  /// IPC export).
  void settle_on_host() noexcept;
  /// The same, and no free is made in order again: for what uses memory
  /// outside the legacy stream's order from now on (a context the program
  /// makes, cuCtxCreate and cuGreenCtxCreate; memory given to other devices).
  /// `because` completes the one info line that says so ("the program ...").
  void end_in_order_frees(char const* because) noexcept;

  /// The most non-blocking streams that are checked for work in progress
  /// before a free in order. Each costs the free a query and a wait (an H200:
  /// a 256 B pair 3.1 µs with one idle stream, 7.9 with eight, against 1.5 µs
  /// queued and fenced), which buys the block back at once; with more, the
  /// queue's fence of a whole batch is the better price.
  static constexpr std::size_t most_streams_for_in_order_frees = 4;

  /// Whether a free may go in order, at a first look without a lock (few
  /// enough streams tracked, or submissions followed): free_in_order() decides.
  [[nodiscard]] bool frees_may_go_in_order() noexcept
  {
    return writers_waiting_.load(std::memory_order_acquire) == 0 &&
           (following_submissions() ||
            known_streams_.load(std::memory_order_acquire) <= most_streams_for_in_order_frees) &&
           in_order_possible();
  }

  // ---- Followed submissions (docs/design.md#followed-submissions).
  /// A block is handed out to the program: its number, kept in its record
  /// (allocation_record::handed_out) for free_in_order(). Submissions count,
  /// not hand-outs: work submitted before the hand-out saw a smaller number,
  /// work after it (the program had the block first) this one or more. So
  /// allocations, far more frequent than submissions on many threads, write
  /// no shared line.
  [[nodiscard]] std::uint64_t block_handed_out() const noexcept { return submissions_.load(std::memory_order_seq_cst); }
  /// Work is about to be submitted to `stream`: every hook of a function that
  /// puts work on a stream calls this before the real call
  /// (core/followed_submissions.cpp). A stream the shim did not see made is
  /// followed from now on, so that fences cover it. Where frees may go in
  /// order (`in_order_frees`: the setting), the work is noted, and a
  /// non-blocking stream that gets work after frees made in order since its
  /// last work first waits (on the device) for the legacy stream's work
  /// before them.
  void submitting(CUstream stream, bool in_order_frees) noexcept;
  /// Whether the shim sees every submission of work, so that frees may rely
  /// on it; false for good once the program may submit work it does not see.
  [[nodiscard]] bool following_submissions() const noexcept { return following_.load(std::memory_order_acquire); }
  /// The program looked up `function`, whose submissions the shim would not
  /// see (`why`): frees go as without followed submissions from now on.
  void stop_following_submissions(char const* function, char const* why) noexcept;
  /// The same when work the program's runtime submits may not reach the
  /// hooks (core/followed_submissions.hpp), `why` saying how that was found.
  void runtime_submissions_unseen(char const* why) noexcept;
  /// Runs `free_on_legacy(recorded)` (a free to the pool on the legacy stream
  /// of the current context, the pool's; it returns 0 for success) and
  /// returns true when frees may go in order now; returns false without
  /// running it when the free must be queued and fenced instead (a
  /// non-blocking stream has work in progress: with followed submissions, only
  /// one given work since the block was handed out, `handed_out` being its
  /// block_handed_out() number, 0 if unknown). `context`: the current
  /// context, the pool's; `barrier`: the pool's event of that context,
  /// recorded on the legacy stream before the free when the program has
  /// non-blocking streams (`recorded` says so), for them to wait for. The
  /// caller has found frees_may_go_in_order() and holds access() (no capture
  /// begins meanwhile).
  template <class FreeOnLegacy, class Result>
  bool free_in_order(CUcontext context, CUevent barrier, std::uint64_t handed_out, FreeOnLegacy free_on_legacy,
                     Result& result)
  {
    if (captures_in_progress()) { return false; }
    std::shared_lock lock{stream_mutex_};  // no stream is made or destroyed meanwhile
    // Read again under the lock: a context made meanwhile settles under it.
    if (in_order_.load(std::memory_order_acquire) != in_order_state::possible) { return false; }
    if (following_submissions()) {
      if (!streams_idle_since_locked(handed_out)) { return false; }
      // Counted before the block can go to anyone else, so that a stream
      // given work with it afterwards sees the count and is ordered after
      // this free (submitting()); counted in progress until the free is on
      // the legacy stream, so that an ordering made meanwhile counts it again.
      // Stored only when they change (one pool, one barrier: nearly never),
      // so that frees on many threads do not all write their cache line.
      if (barrier_context_.load(std::memory_order_seq_cst) != context) {
        barrier_context_.store(context, std::memory_order_seq_cst);
      }
      if (barrier_.load(std::memory_order_seq_cst) != barrier) { barrier_.store(barrier, std::memory_order_seq_cst); }
      // With no non-blocking stream tracked, none is ordered meanwhile (each
      // is added under the exclusive lock, after the settle point that covers
      // this free): frees on many threads then write no shared line.
      bool const streams_to_order = !streams_.empty();
      if (streams_to_order) {
        frees_in_progress_.fetch_add(1, std::memory_order_seq_cst);
        in_order_epoch_.fetch_add(1, std::memory_order_seq_cst);
      }
      result = free_on_legacy(false);
      if (streams_to_order) { frees_in_progress_.fetch_sub(1, std::memory_order_seq_cst); }
    } else {
      bool const recorded = !streams_.empty();
      if (recorded && !order_idle_streams_after_legacy_locked(barrier)) { return false; }
      result = free_on_legacy(recorded);
    }
    if (result == Result{}) { freed_in_order(); }
    return true;
  }

  /// Capture lifetime. `begin` runs the real call under the exclusive lock
  /// and records the capture when it succeeded; `end` re-reads the stream's
  /// state after the real end call and forgets the capture once it is over.
  /// @{
  template <class RealBegin>
  CUresult begin_capture(CUstream stream, bool per_thread_api, CUstreamCaptureMode mode, RealBegin real_begin)
  {
    auto lock = exclusively(capture_mutex_);
    // A fence after the capture has begun cannot record on the stream (the
    // record would join the capture): record now what stands for the work
    // submitted before it, in case the stream is destroyed mid-capture.
    record_before_capture(stream);
    // Nor can a stream made during the capture: the settle point is recorded now.
    settle_before_capture();
    CUresult const result = real_begin();
    if (result == CUDA_SUCCESS) { capture_began(stream, per_thread_api, mode); }
    return result;
  }
  void capture_maybe_ended(CUstream stream, bool per_thread_api, bool still_capturing) noexcept;
  /// @}
  /// Forgets captures whose stream the driver says is not capturing (any more):
  /// a capture this bookkeeping missed the end of must not defer frees forever.
  void recheck_captures() noexcept;

  /// The legacy stream of another context to fence too, with an event of that context.
  struct other_legacy {
    CUcontext context = nullptr;
    CUevent event = nullptr;
  };
  /// Makes `target` wait for the work submitted so far to the legacy stream of
  /// the current context (`legacy_fence`, an event of that context), to the
  /// legacy streams of `others` (and so to the blocking streams of each) and
  /// to every known non-blocking stream; fails without waiting for all of
  /// them if any record fails. The caller holds access() and has checked that
  /// no capture is in progress.
  [[nodiscard]] CUresult fence(CUstream target, CUevent legacy_fence, other_legacy const* others = nullptr,
                               std::size_t other_count = 0) noexcept;

 private:
  /// Takes `mutex` (the capture or the stream lock) exclusively. Meanwhile no
  /// free tries to go in order: each would hold it shared, and a free that
  /// holds it across a host wait would hold up a stream's creation or a
  /// capture's beginning. Those frees are queued instead.
  [[nodiscard]] std::unique_lock<sharded_shared_mutex> exclusively(sharded_shared_mutex& mutex)
  {
    writers_waiting_.fetch_add(1, std::memory_order_acq_rel);
    std::unique_lock lock{mutex};
    writers_waiting_.fetch_sub(1, std::memory_order_acq_rel);
    return lock;
  }

  struct tracked_stream {
    CUstream stream;  ///< null once destroyed: only its last event is waited for
    CUcontext context;
    CUevent fence;
    /// Followed submissions, read and written through atomic_ref under the
    /// shared stream lock (moved only under the exclusive one): the highest
    /// submission count its work incremented from (raised, never lowered),
    /// and the in-order frees (in_order_epoch_) it has been
    /// ordered after.
    /// @{
    std::uint64_t last_seen = 0;
    std::uint64_t ordered_epoch = 0;
    /// @}
  };
  struct blocking_stream {
    CUstream stream;
    CUcontext context;
  };
  struct capture {
    CUstream stream;
    void const* per_thread_owner;  ///< the thread, for its per-thread default stream; else null
    void const* thread;            ///< the thread that began it
    CUstreamCaptureMode mode;
  };

  void capture_began(CUstream stream, bool per_thread_api, CUstreamCaptureMode mode) noexcept;
  // Followed submissions.
  /// Under the shared stream lock: the entry of a live non-blocking stream, or null.
  [[nodiscard]] tracked_stream* find_locked(CUstream stream) noexcept;
  [[nodiscard]] bool known_blocking_locked(CUstream stream) const noexcept;
  /// Under the shared stream lock: whether every non-blocking stream given
  /// work since block number `handed_out` was handed out has none in progress.
  [[nodiscard]] bool streams_idle_since_locked(std::uint64_t handed_out) noexcept;
  /// Makes `stream` wait for the legacy stream's work before the frees made in
  /// order since it was last ordered (submitting()).
  void order_after_recent_frees(CUstream stream) noexcept;
  /// A stream the shim did not see made gets work: followed from now on
  /// (false if it cannot be: not a stream).
  bool follow_unseen_stream(CUstream stream) noexcept;
  void record_before_capture(CUstream stream) noexcept;
  /// Under the exclusive stream lock: drops destroyed streams whose last work
  /// has completed, records the last work of `stream` (`recorded` says
  /// whether it could) and returns its entry.
  tracked_stream* before_destroy(CUstream stream, bool& recorded) noexcept;
  void forget_captures_of(CUstream stream) noexcept;
  void drop_completed_locked() noexcept;
  /// The tracked streams changed (under the exclusive stream lock).
  void count_streams_locked() noexcept { known_streams_.store(streams_.size(), std::memory_order_release); }
  /// Whether the process sees one device and has made no context (cheap after the first call).
  [[nodiscard]] bool in_order_possible() noexcept;
  void freed_in_order() noexcept;
  /// Under the shared stream lock, before a free in order while non-blocking
  /// streams are tracked: true when none of them has work in progress (so
  /// none can still be using the block) and each now waits for `barrier`,
  /// recorded on the legacy stream (so none uses the block again before the
  /// legacy and blocking streams' work before the free has finished); false
  /// when the free must be fenced instead.
  bool order_idle_streams_after_legacy_locked(CUevent barrier) noexcept;
  void settle_before_capture() noexcept;
  /// Under the exclusive stream lock: records the settle point after the
  /// in-order frees since the last one (CUDA_SUCCESS if there were none).
  CUresult record_settle_point_locked() noexcept;
  /// Under the exclusive stream lock: makes `stream` wait for the settle point
  /// (on the host where it cannot on the device); false if it could not.
  bool wait_for_settle_point_locked(CUstream stream) noexcept;
  /// Under the exclusive stream lock: records the settle point and makes the
  /// new non-blocking `stream` wait for it; should that fail, frees are never
  /// made in order again.
  void order_after_in_order_frees_locked(CUstream stream) noexcept;
  /// Under the exclusive stream lock, where no settle point could be
  /// recorded: synchronizes the device instead (never during a capture);
  /// false when that failed too, and then no free is made in order again.
  bool synchronize_instead_locked() noexcept;
  /// stream_created's exclusive section; how many streams are tracked now
  /// (0 if this one could not be).
  std::size_t record_new_stream(CUstream stream, CUcontext context, CUevent fence, bool have_event) noexcept;
  static void log_unsettled() noexcept;

  sharded_shared_mutex capture_mutex_;
  std::vector<capture> active_captures_;
  sharded_shared_mutex stream_mutex_;
  std::vector<tracked_stream> streams_;
  std::vector<blocking_stream> blocking_streams_;  ///< known, so that an unseen stream can be told from them
  /// One fence at a time: a fence records the shared events (the legacy
  /// stream's, each stream's) and then waits for them, and CUDA does not say
  /// that the record a wait follows is the latest in stream order when two
  /// threads record one event at once. Fences are one per batch of frees.
  std::mutex fence_mutex_;
  std::atomic<int> captures_{0};
  std::atomic<std::size_t> known_streams_{0};  ///< streams_.size(), for a check without the lock
  std::atomic<int> writers_waiting_{0};        ///< threads in exclusively(), waiting or not yet counted out

  // In-order frees.
  /// State: unknown until the first free asks, then possible or not; never
  /// possible again once the program made a context.
  /// @{
  enum class in_order_state : int { unknown, possible, impossible };
  std::atomic<in_order_state> in_order_{in_order_state::unknown};
  /// @}
  /// Set by an in-order free (the stream lock shared), cleared when the settle
  /// point is recorded after it (exclusively); the context the frees were in.
  /// @{
  std::atomic<bool> unsettled_{false};
  std::atomic<CUcontext> in_order_context_{nullptr};
  /// @}
  /// Under the exclusive stream lock: the settle point and whether new
  /// streams still have to wait for it.
  /// @{
  CUevent settle_event_ = nullptr;
  CUcontext settle_context_ = nullptr;
  bool settle_pending_ = false;
  /// @}
  /// One record of the pool's barrier and the tracked streams' waits for it
  /// at a time (order_idle_streams_after_legacy_locked and
  /// order_after_recent_frees; taken under the shared stream lock). A record
  /// made outside it (a kept block's action, core/allocator.cpp) is harmless:
  /// it is on the same legacy stream, before the free that follows the waits,
  /// and a wait that sees it waits for more, never for less.
  std::mutex idle_order_mutex_;

  struct program_context {
    CUcontext context = nullptr;
    int device = 0;
  };
  std::mutex contexts_mutex_;
  std::vector<program_context> program_contexts_;
  std::atomic<std::size_t> program_context_count_{0};  ///< program_contexts_.size(), read without the lock

  /// Followed submissions: whether they are relied on; submissions to
  /// non-blocking streams so far (from 1: a block's 0 means unknown); frees
  /// made in order so far while non-blocking streams were tracked, and of them those not yet on the legacy
  /// stream; the barrier of the last such free (the pool's event in
  /// in_order_context_).
  /// Each on its own cache line: allocations, frees and submissions on
  /// different threads write them.
  /// @{
  alignas(64) std::atomic<bool> following_{true};
  alignas(64) std::atomic<std::uint64_t> submissions_{1};
  alignas(64) std::atomic<std::uint64_t> in_order_epoch_{0};
  alignas(64) std::atomic<std::uint64_t> frees_in_progress_{0};
  alignas(64) std::atomic<CUevent> barrier_{nullptr};
  /// @}
  std::atomic<CUcontext> barrier_context_{nullptr};  ///< the barrier's (and the pool's) context
};

/// The process's tracker (never destroyed: calls arrive until the very end).
[[nodiscard]] stream_tracker& tracker() noexcept;

}  // namespace asyncshim::shim
