#include "state/stream_tracker.hpp"

#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "state/shim_state.hpp"
#include "support/log.hpp"

#include <algorithm>
#include <mutex>
#include <new>

namespace asyncshim::shim {
namespace {

// Makes the calling thread's stream capture mode relaxed for the scope, so
// that a wait of the shim's own is not a call another thread's global-mode
// capture forbids (cuThreadExchangeStreamCaptureMode); also how the thread's
// own mode is read (previous()).
class relaxed_capture_mode {
 public:
  relaxed_capture_mode() noexcept
  {
    auto const exchange = driver().thread_exchange_stream_capture_mode;
    set_ = exchange != nullptr && exchange(&previous_) == CUDA_SUCCESS;
  }
  ~relaxed_capture_mode()
  {
    if (set_) { (void)driver().thread_exchange_stream_capture_mode(&previous_); }
  }
  relaxed_capture_mode(relaxed_capture_mode const&) = delete;
  relaxed_capture_mode& operator=(relaxed_capture_mode const&) = delete;

  // The thread's mode before the scope; the strictest reading if it could not be read.
  [[nodiscard]] CUstreamCaptureMode previous() const noexcept
  {
    return set_ ? previous_ : CU_STREAM_CAPTURE_MODE_GLOBAL;
  }

 private:
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool set_ = false;
};

// An address that names the calling thread.
void const* this_thread() noexcept
{
  thread_local char const tag = 0;
  return &tag;
}

}  // namespace

stream_tracker& tracker() noexcept
{
  // In static storage, never destroyed (calls arrive until the very end),
  // and made without a heap allocation that could fail.
  alignas(stream_tracker) static unsigned char storage[sizeof(stream_tracker)];
  static stream_tracker* const instance = [] {
    watch_for_fork();  // before its locks are first taken
    return new (storage) stream_tracker;
  }();
  return *instance;
}

void stream_tracker::stream_created(CUstream stream, unsigned flags) noexcept
{
  if (stream == nullptr) { return; }
  auto const& drv = driver();
  // Blocking streams order themselves after the legacy stream's work and
  // the legacy stream after theirs: one event there covers them all. Only
  // known, for followed submissions.
  if ((flags & CU_STREAM_NON_BLOCKING) == 0) {
    CUcontext context = nullptr;
    if (drv.ctx_get_current != nullptr) { (void)drv.ctx_get_current(&context); }
    auto lock = exclusively(stream_mutex_);
    if (known_blocking_locked(stream)) { return; }  // two threads' first work on an unseen stream
    try {
      blocking_streams_.push_back({stream, context});
    } catch (...) {  // an unknown stream's first work asks its flags again
    }
    return;
  }
  CUcontext context = nullptr;
  CUevent fence = nullptr;
  bool const have_event = drv.ctx_get_current != nullptr && drv.event_create != nullptr &&
                          drv.ctx_get_current(&context) == CUDA_SUCCESS &&
                          drv.event_create(&fence, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
  std::size_t const tracked = record_new_stream(stream, context, fence, have_event);
  log::debug("followed a new non-blocking stream: {} tracked", tracked);
  // Also before the first free (which is when in-order frees are first asked about).
  shim_state const* const s = active_state();
  if (s == nullptr || !s->settings.frees_in_order() || !in_order_possible()) { return; }
  // Each said once: a program may make and destroy streams all the time.
  static std::atomic<bool> said_first{false};
  static std::atomic<bool> said_too_many{false};
  if (tracked == 1 && !said_first.exchange(true)) {
    log::info("the program made a non-blocking stream: from now on a free under ASYNCSHIM_ORDERING=device is made "
              "in the legacy stream's order only while no non-blocking stream {}has work in progress; otherwise it is "
              "queued and fenced",
              following_submissions() ? "given work since the block was allocated " : "");
  } else if (tracked == most_streams_for_in_order_frees + 1 && !following_submissions() &&
             !said_too_many.exchange(true)) {
    log::info("the program has more than {} non-blocking streams: while it has, frees under "
              "ASYNCSHIM_ORDERING=device are queued and fenced, not made in the legacy stream's order",
              most_streams_for_in_order_frees);
  }
}

std::size_t stream_tracker::record_new_stream(CUstream stream, CUcontext context, CUevent fence,
                                              bool have_event) noexcept
{
  auto const& drv = driver();
  // One exclusive section, before the program can submit anything to the
  // stream: no free can go in order between its settle point and its entry.
  auto lock = exclusively(stream_mutex_);
  if (find_locked(stream) != nullptr) {  // two threads' first work on an unseen stream
    if (have_event) { (void)drv.event_destroy(fence); }
    return streams_.size();
  }
  order_after_in_order_frees_locked(stream);
  if (!have_event) {
    // A stream the shim cannot fence: never free in order again either.
    in_order_.store(in_order_state::impossible, std::memory_order_release);
    log::warn("cannot follow a new non-blocking stream (no event for it): frees under ASYNCSHIM_ORDERING=device are "
              "not ordered against its work");
    return 0;
  }
  try {
    drop_completed_locked();
    // Ordered after every free made in order so far (its settle point above;
    // none is in progress under the exclusive lock).
    streams_.push_back({stream, context, fence, 0, in_order_epoch_.load(std::memory_order_seq_cst)});
    count_streams_locked();
  } catch (...) {
    (void)drv.event_destroy(fence);
    in_order_.store(in_order_state::impossible, std::memory_order_release);
    log::warn("cannot follow a new non-blocking stream (no memory): frees under ASYNCSHIM_ORDERING=device are not "
              "ordered against its work");
    return 0;
  }
  return streams_.size();
}

stream_tracker::tracked_stream* stream_tracker::before_destroy(CUstream stream, bool& recorded) noexcept
{
  std::erase_if(blocking_streams_, [&](blocking_stream const& b) { return b.stream == stream; });
  drop_completed_locked();
  auto const found =
    std::find_if(streams_.begin(), streams_.end(), [&](tracked_stream const& t) { return t.stream == stream; });
  if (found == streams_.end()) { return nullptr; }
  // Not on a capturing stream (the record would join its capture): its
  // earlier record then stands for its work.
  auto const& drv = driver();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (drv.stream_is_capturing != nullptr && drv.stream_is_capturing(stream, &status) == CUDA_SUCCESS &&
      status == CU_STREAM_CAPTURE_STATUS_NONE && drv.event_record != nullptr) {
    recorded = drv.event_record(found->fence, stream) == CUDA_SUCCESS;
    // Nothing would stand for its last work: the host waits for it, so that
    // forgetting the stream is right.
    if (!recorded && drv.stream_synchronize != nullptr) { (void)drv.stream_synchronize(stream); }
  }
  return &*found;
}

void stream_tracker::drop_completed_locked() noexcept
{
  auto const& drv = driver();
  relaxed_capture_mode relaxed;  // a query another thread's global-mode capture would forbid
  std::erase_if(streams_, [&](tracked_stream const& t) {
    if (t.stream != nullptr || drv.event_query == nullptr) { return false; }
    CUresult const state = drv.event_query(t.fence);
    // Complete; or an error outside any capture (the event is gone with its
    // context). An error during a capture may be the capture's: kept.
    if (state == CUDA_ERROR_NOT_READY || (state != CUDA_SUCCESS && captures_in_progress())) { return false; }
    (void)drv.event_destroy(t.fence);
    return true;
  });
  count_streams_locked();
}

void stream_tracker::forget_captures_of(CUstream stream) noexcept
{
  if (!captures_in_progress()) { return; }
  auto lock = exclusively(capture_mutex_);  // a capture ends with its stream
  auto const before = active_captures_.size();
  std::erase_if(active_captures_,
                [&](capture const& c) { return c.stream == stream && c.per_thread_owner == nullptr; });
  captures_.fetch_sub(static_cast<int>(before - active_captures_.size()), std::memory_order_acq_rel);
}

void stream_tracker::recheck_captures() noexcept
{
  auto const is_capturing = driver().stream_is_capturing;
  if (is_capturing == nullptr) { return; }
  auto lock = exclusively(capture_mutex_);
  auto const before = active_captures_.size();
  std::erase_if(active_captures_, [&](capture const& c) {
    if (c.per_thread_owner != nullptr) { return false; }  // another thread's per-thread stream: not ours to ask
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult const r = is_capturing(c.stream, &status);
    return r == CUDA_ERROR_INVALID_HANDLE || (r == CUDA_SUCCESS && status == CU_STREAM_CAPTURE_STATUS_NONE);
  });
  auto const dropped = before - active_captures_.size();
  if (dropped > 0) {
    captures_.fetch_sub(static_cast<int>(dropped), std::memory_order_acq_rel);
    log::debug("{} stream capture(s) had ended without the shim seeing it", dropped);
  }
}

void stream_tracker::context_made(CUcontext context, int device) noexcept
{
  std::lock_guard lock{contexts_mutex_};
  try {
    program_contexts_.push_back({context, device});
    program_context_count_.store(program_contexts_.size(), std::memory_order_release);
  } catch (...) {
    log::error("out of host memory: frees will not wait for the context the program just made, so work on its "
               "legacy and blocking streams may see freed blocks handed out again");
  }
}

void stream_tracker::context_destroying(CUcontext context) noexcept
{
  {
    std::lock_guard lock{contexts_mutex_};
    std::erase_if(program_contexts_, [&](program_context const& c) { return c.context == context; });
    program_context_count_.store(program_contexts_.size(), std::memory_order_release);
  }
  // The context takes its streams and events with it: only forget them.
  auto lock = exclusively(stream_mutex_);
  std::erase_if(streams_, [&](tracked_stream const& t) { return t.context == context; });
  std::erase_if(blocking_streams_, [&](blocking_stream const& b) { return b.context == context; });
  count_streams_locked();
  // The frees made in order there went with it, and so does the settle point.
  if (settle_context_ == context) {
    settle_event_ = nullptr;
    settle_context_ = nullptr;
    settle_pending_ = false;
  }
  CUcontext expected = context;
  if (in_order_context_.compare_exchange_strong(expected, nullptr)) { unsettled_.store(false); }
  // The pool's barrier goes with its context, and so does every block freed
  // before it: no stream needs ordering after them.
  CUcontext barrier_context = context;
  if (barrier_context_.compare_exchange_strong(barrier_context, nullptr)) {
    barrier_.store(nullptr, std::memory_order_seq_cst);
  }
}

bool stream_tracker::in_order_possible() noexcept
{
  in_order_state state = in_order_.load(std::memory_order_acquire);
  if (state == in_order_state::unknown) {
    // Another device's streams do not order themselves after this one's
    // legacy stream, and its work may use this device's memory.
    auto const count = driver().device_get_count;
    int devices = 0;
    bool const one_device = count != nullptr && count(&devices) == CUDA_SUCCESS && devices == 1;
    state = one_device ? in_order_state::possible : in_order_state::impossible;
    in_order_state expected = in_order_state::unknown;
    if (!in_order_.compare_exchange_strong(expected, state)) { state = expected; }
  }
  return state == in_order_state::possible;
}

void stream_tracker::freed_in_order() noexcept
{
  if (unsettled_.load(std::memory_order_relaxed)) { return; }
  in_order_context_.store(current_context(), std::memory_order_relaxed);
  unsettled_.store(true, std::memory_order_relaxed);
}

bool stream_tracker::order_idle_streams_after_legacy_locked(CUevent barrier) noexcept
{
  if (streams_.size() > most_streams_for_in_order_frees || barrier == nullptr) { return false; }
  auto const& drv = driver();
  if (drv.stream_query == nullptr || drv.event_query == nullptr || drv.event_record == nullptr ||
      drv.stream_wait_event == nullptr) {
    return false;
  }
  // Work on a stream that uses the block was submitted before the program
  // freed it: a stream with none in progress now cannot be using it. Any
  // answer but "done" (work in progress, an error) means the fence.
  for (tracked_stream const& t : streams_) {
    CUresult const state = t.stream != nullptr ? drv.stream_query(t.stream) : drv.event_query(t.fence);
    if (state != CUDA_SUCCESS) { return false; }
  }
  // Recorded before the free, so that it stands for all the legacy and
  // blocking streams' work that may use the block, and waited for before
  // the free, so that no stream can get the block from the pool before it
  // waits. One record and its waits at a time: each wait follows the latest
  // record, which covers every earlier one.
  std::lock_guard one_order{idle_order_mutex_};
  if (drv.event_record(barrier, CU_STREAM_LEGACY) != CUDA_SUCCESS) { return false; }
  for (tracked_stream const& t : streams_) {
    if (t.stream != nullptr && drv.stream_wait_event(t.stream, barrier, 0) != CUDA_SUCCESS) { return false; }
  }
  return true;
}

namespace {

std::atomic_ref<std::uint64_t> atomically(std::uint64_t& value) noexcept
{
  return std::atomic_ref<std::uint64_t>{value};
}

}  // namespace

stream_tracker::tracked_stream* stream_tracker::find_locked(CUstream stream) noexcept
{
  for (tracked_stream& t : streams_) {
    if (t.stream == stream) { return &t; }
  }
  return nullptr;
}

bool stream_tracker::known_blocking_locked(CUstream stream) const noexcept
{
  return std::any_of(blocking_streams_.begin(), blocking_streams_.end(),
                     [&](blocking_stream const& b) { return b.stream == stream; });
}

void stream_tracker::submitting(CUstream stream, bool in_order_frees) noexcept
{
  // The default streams, legacy and per-thread, are ordered after the
  // legacy stream's work by the driver.
  if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) { return; }
  // No free goes in order (again): only whether the stream is known matters.
  if (!in_order_frees || in_order_.load(std::memory_order_acquire) == in_order_state::impossible) {
    {
      std::shared_lock lock{stream_mutex_};
      if (find_locked(stream) != nullptr || known_blocking_locked(stream)) { return; }
    }
    (void)follow_unseen_stream(stream);
    return;
  }
  // Counted before the work is submitted, so that a free after it (the
  // program orders its work before its free) finds it, and a block handed out
  // after it (not used by it) gets a larger number.
  std::uint64_t const seen = submissions_.fetch_add(1, std::memory_order_seq_cst);
  for (int attempt = 0; attempt < 2; ++attempt) {
    {
      std::shared_lock lock{stream_mutex_};
      if (tracked_stream* t = find_locked(stream)) {
        auto last = atomically(t->last_seen);
        std::uint64_t before = last.load(std::memory_order_seq_cst);
        while (before < seen && !last.compare_exchange_weak(before, seen, std::memory_order_seq_cst)) {}
        if (atomically(t->ordered_epoch).load(std::memory_order_seq_cst) >=
            in_order_epoch_.load(std::memory_order_seq_cst)) {
          return;
        }
        lock.unlock();
        order_after_recent_frees(stream);
        return;
      }
      if (known_blocking_locked(stream)) { return; }
    }
    if (!follow_unseen_stream(stream)) { return; }
  }
}

bool stream_tracker::follow_unseen_stream(CUstream stream) noexcept
{
  auto const get_flags = driver().stream_get_flags;
  unsigned flags = 0;
  if (get_flags == nullptr || get_flags(stream, &flags) != CUDA_SUCCESS) { return false; }  // the real call fails too
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) { log::debug("work went to a stream the shim did not see made: followed from now on"); }
  stream_created(stream, flags);
  return true;
}

void stream_tracker::order_after_recent_frees(CUstream stream) noexcept
{
  auto const& drv = driver();
  bool ordered = true;
  {
    auto no_capture_begins = access();  // nor does the pool (and its barrier) go meanwhile
    std::shared_lock lock{stream_mutex_};
    tracked_stream* const t = find_locked(stream);
    if (t == nullptr) { return; }  // destroyed meanwhile
    std::lock_guard one_order{idle_order_mutex_};
    auto ordered_epoch = atomically(t->ordered_epoch);
    std::uint64_t const epoch = in_order_epoch_.load(std::memory_order_seq_cst);
    if (ordered_epoch.load(std::memory_order_seq_cst) >= epoch) { return; }  // by another thread meanwhile
    // A free counted in `epoch` but not yet on the legacy stream comes after
    // the barrier: the stream is ordered after the others, and again at its next work.
    bool const all_on_legacy = frees_in_progress_.load(std::memory_order_seq_cst) == 0;
    if (captures_in_progress()) {
      // No record on the legacy stream now. Every free made in order came
      // before the captures began, and the settle point recorded then covers
      // them. A capturing stream's work runs when its graph is launched: that
      // launch is ordered instead.
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      if (drv.stream_is_capturing == nullptr || drv.stream_is_capturing(stream, &status) != CUDA_SUCCESS ||
          status != CU_STREAM_CAPTURE_STATUS_NONE) {
        return;
      }
      ordered = !unsettled_.load(std::memory_order_relaxed) &&
                (!settle_pending_ ||
                 (drv.stream_wait_event != nullptr && drv.stream_wait_event(stream, settle_event_, 0) == CUDA_SUCCESS));
    } else {
      CUevent const barrier = barrier_.load(std::memory_order_seq_cst);
      if (barrier == nullptr) {
        ordered = true;  // the frees went with their context
      } else {
        context_scope in_context{barrier_context_.load(std::memory_order_seq_cst)};
        ordered = in_context.current() && drv.event_record != nullptr && drv.stream_wait_event != nullptr &&
                  drv.event_record(barrier, CU_STREAM_LEGACY) == CUDA_SUCCESS &&
                  drv.stream_wait_event(stream, barrier, 0) == CUDA_SUCCESS;
      }
    }
    if (ordered && all_on_legacy) { ordered_epoch.store(epoch, std::memory_order_seq_cst); }
  }
  if (!ordered) {
    // The host waits instead, for good.
    end_in_order_frees("a non-blocking stream could not be ordered after the frees made in the legacy stream's order");
  }
}

bool stream_tracker::streams_idle_since_locked(std::uint64_t handed_out) noexcept
{
  auto const& drv = driver();
  if (drv.stream_query == nullptr || drv.event_query == nullptr) { return false; }
  for (tracked_stream& t : streams_) {
    // Work submitted before the block was handed out cannot use it.
    if (atomically(t.last_seen).load(std::memory_order_seq_cst) < handed_out) { continue; }
    // Any answer but "done" (work in progress, an error) means the fence.
    CUresult const state = t.stream != nullptr ? drv.stream_query(t.stream) : drv.event_query(t.fence);
    if (state != CUDA_SUCCESS) { return false; }
  }
  return true;
}

void stream_tracker::stop_following_submissions(char const* function, char const* why) noexcept
{
  if (!following_.exchange(false, std::memory_order_seq_cst)) {
    log::debug("the program looked up the driver function {} too ({})", function, why);
    return;
  }
  log::info("the program looked up the driver function {} ({}): from now on a free under "
            "ASYNCSHIM_ORDERING=device is made in the legacy stream's order only while no non-blocking stream (at "
            "most {}) has work in progress",
            function, why, most_streams_for_in_order_frees);
  // A stream given work through it would not be ordered after the frees
  // made in order so far: they are waited for now.
  settle_on_host();
}

void stream_tracker::runtime_submissions_unseen(char const* why) noexcept
{
  if (!following_.exchange(false, std::memory_order_seq_cst)) { return; }
  log::info("the shim cannot tell whether it sees the work the program's CUDA runtime puts on streams ({}): a free "
            "under ASYNCSHIM_ORDERING=device is made in the legacy stream's order only while no non-blocking stream "
            "(at most {}) has work in progress",
            why, most_streams_for_in_order_frees);
  settle_on_host();
}

CUresult stream_tracker::record_settle_point_locked() noexcept
{
  if (!unsettled_.load(std::memory_order_relaxed)) { return CUDA_SUCCESS; }
  // Never on the legacy stream during a capture (frees are settled when a
  // capture begins, so only after a failure there).
  if (captures_in_progress()) { return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; }
  auto const& drv = driver();
  CUcontext const context = in_order_context_.load(std::memory_order_relaxed);
  if (drv.event_create == nullptr || drv.event_record == nullptr || drv.event_destroy == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  context_scope in_context{context};
  if (!in_context.current()) { return in_context.status(); }
  if (settle_event_ != nullptr && settle_context_ != context) {
    (void)drv.event_destroy(settle_event_);
    settle_event_ = nullptr;
  }
  if (settle_event_ == nullptr) {
    if (CUresult const r = drv.event_create(&settle_event_, CU_EVENT_DISABLE_TIMING); r != CUDA_SUCCESS) {
      settle_event_ = nullptr;
      return r;
    }
    settle_context_ = context;
  }
  if (CUresult const r = drv.event_record(settle_event_, CU_STREAM_LEGACY); r != CUDA_SUCCESS) { return r; }
  unsettled_.store(false, std::memory_order_relaxed);
  settle_pending_ = true;
  return CUDA_SUCCESS;
}

bool stream_tracker::wait_for_settle_point_locked(CUstream stream) noexcept
{
  if (!settle_pending_) { return true; }
  auto const& drv = driver();
  // Always the wait on the device, never a query first: a query is a call
  // another thread's global-mode capture forbids (it would fail and end that
  // capture). A wait on a point long complete costs the device nothing.
  if (drv.stream_wait_event != nullptr && drv.stream_wait_event(stream, settle_event_, 0) == CUDA_SUCCESS) {
    return true;
  }
  relaxed_capture_mode relaxed;  // the host waits instead
  return drv.event_synchronize != nullptr && drv.event_synchronize(settle_event_) == CUDA_SUCCESS;
}

bool stream_tracker::synchronize_instead_locked() noexcept
{
  if (!captures_in_progress()) {
    context_scope in_context{in_order_context_.load(std::memory_order_relaxed)};
    if (in_context.current() && driver().ctx_synchronize != nullptr && driver().ctx_synchronize() == CUDA_SUCCESS) {
      unsettled_.store(false, std::memory_order_relaxed);
      settle_pending_ = false;
      return true;
    }
  }
  in_order_.store(in_order_state::impossible, std::memory_order_release);
  return false;
}

void stream_tracker::order_after_in_order_frees_locked(CUstream stream) noexcept
{
  if (record_settle_point_locked() != CUDA_SUCCESS && synchronize_instead_locked()) { return; }
  if (unsettled_.load(std::memory_order_relaxed) || !wait_for_settle_point_locked(stream)) {
    in_order_.store(in_order_state::impossible, std::memory_order_release);
    log::warn("a new non-blocking stream could not be ordered after the frees made in the legacy stream's order "
              "before it: its first work may overlap the legacy stream's, and no free is made in order again");
  }
}

void stream_tracker::settle_before_capture() noexcept
{
  if (!unsettled_.load(std::memory_order_relaxed)) { return; }
  auto lock = exclusively(stream_mutex_);
  if (record_settle_point_locked() != CUDA_SUCCESS && !synchronize_instead_locked()) {
    log::warn("the frees made in the legacy stream's order could not be settled before a stream capture: a "
              "non-blocking stream made during it is not ordered after them, and no free is made in order again");
  }
}

void stream_tracker::end_in_order_frees(char const* because) noexcept
{
  if (in_order_.exchange(in_order_state::impossible, std::memory_order_acq_rel) == in_order_state::possible) {
    log::info("{}: from now on frees under ASYNCSHIM_ORDERING=device are queued and fenced instead of made in "
              "the legacy stream's order",
              because);
  }
  settle_on_host();
}

void stream_tracker::settle_on_host() noexcept
{
  CUevent settle = nullptr;
  {
    // Recorded under the exclusive lock (no free can go in order meanwhile).
    auto lock = exclusively(stream_mutex_);
    if (record_settle_point_locked() != CUDA_SUCCESS) {
      if (!synchronize_instead_locked()) { log_unsettled(); }
      return;
    }
    if (!settle_pending_) { return; }
    settle = settle_event_;
  }
  // Waited for under the shared lock: frees and fences go on, and the event
  // cannot go with a reset of its context meanwhile (that takes it exclusively).
  std::shared_lock lock{stream_mutex_};
  if (settle_event_ != settle) { return; }  // gone with its context, and everything before it
  relaxed_capture_mode relaxed;
  if (driver().event_synchronize == nullptr || driver().event_synchronize(settle) != CUDA_SUCCESS) {
    in_order_.store(in_order_state::impossible, std::memory_order_release);
    log_unsettled();
  }
}

void stream_tracker::log_unsettled() noexcept
{
  log::warn("the frees made in the legacy stream's order could not be waited for: memory given to another process "
            "or device now may still be in use by the work before them, and no free is made in order again");
}

void stream_tracker::record_before_capture(CUstream stream) noexcept
{
  auto const record = driver().event_record;
  if (record == nullptr || stream == nullptr) { return; }
  std::shared_lock lock{stream_mutex_};
  for (tracked_stream const& t : streams_) {
    if (t.stream == stream) { (void)record(t.fence, t.stream); }
  }
}

void stream_tracker::capture_began(CUstream stream, bool per_thread_api, CUstreamCaptureMode mode) noexcept
{
  bool const per_thread = stream == CU_STREAM_PER_THREAD || (per_thread_api && stream == nullptr);
  try {
    active_captures_.push_back(
      {per_thread ? CU_STREAM_PER_THREAD : stream, per_thread ? this_thread() : nullptr, this_thread(), mode});
    captures_.fetch_add(1, std::memory_order_acq_rel);
  } catch (...) {
    // Not recorded: the shim would not know to keep out of this capture.
    log::error("out of host memory while recording a stream capture: the shim may disturb it");
  }
}

void stream_tracker::capture_maybe_ended(CUstream stream, bool per_thread_api, bool still_capturing) noexcept
{
  if (still_capturing) { return; }
  bool const per_thread = stream == CU_STREAM_PER_THREAD || (per_thread_api && stream == nullptr);
  CUstream const key = per_thread ? CU_STREAM_PER_THREAD : stream;
  void const* const owner = per_thread ? this_thread() : nullptr;
  auto lock = exclusively(capture_mutex_);
  auto const found = std::find_if(active_captures_.begin(), active_captures_.end(),
                                  [&](capture const& c) { return c.stream == key && c.per_thread_owner == owner; });
  if (found != active_captures_.end()) {
    active_captures_.erase(found);
    captures_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

bool stream_tracker::calling_thread_is_prohibited() const noexcept
{
  if (active_captures_.empty()) { return false; }
  // The calling thread's own mode decides (cuThreadExchangeStreamCaptureMode):
  // relaxed is never prohibited; thread-local only by a non-relaxed capture
  // of its own; global also by another thread's global-mode capture. Read it
  // by exchanging and putting it back.
  CUstreamCaptureMode const mode = relaxed_capture_mode{}.previous();
  if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) { return false; }
  void const* const me = this_thread();
  for (capture const& c : active_captures_) {
    if (c.thread == me && c.mode != CU_STREAM_CAPTURE_MODE_RELAXED) { return true; }
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c.thread != me && c.mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
      return true;
    }
  }
  return false;
}

CUresult stream_tracker::fence(CUstream target, CUevent legacy_fence, other_legacy const* others,
                               std::size_t other_count) noexcept
{
  auto const& drv = driver();
  if (drv.event_record == nullptr || drv.stream_wait_event == nullptr) { return CUDA_ERROR_NOT_SUPPORTED; }
  // Each record is followed by its wait before any other thread records the
  // same event (stream_tracker.hpp, the fence lock).
  std::lock_guard one_fence{fence_mutex_};
  if (CUresult const r = drv.event_record(legacy_fence, CU_STREAM_LEGACY); r != CUDA_SUCCESS) { return r; }
  if (CUresult const r = drv.stream_wait_event(target, legacy_fence, 0); r != CUDA_SUCCESS) { return r; }
  for (std::size_t i = 0; i < other_count; ++i) {
    {
      context_scope in_context{others[i].context};
      if (!in_context.current()) { return in_context.status(); }
      if (CUresult const r = drv.event_record(others[i].event, CU_STREAM_LEGACY); r != CUDA_SUCCESS) { return r; }
    }
    if (CUresult const r = drv.stream_wait_event(target, others[i].event, 0); r != CUDA_SUCCESS) { return r; }
  }
  std::shared_lock lock{stream_mutex_};
#ifdef ASYNCSHIM_TESTING_FENCE_DROPS_A_STREAM
  bool dropped = false;  // the CPU tier's broken variant (shim/CMakeLists.txt)
#endif
  for (tracked_stream const& t : streams_) {
#ifdef ASYNCSHIM_TESTING_FENCE_DROPS_A_STREAM
    if (!dropped && t.stream != nullptr) {
      dropped = true;
      continue;
    }
#endif
    // A destroyed stream: only its last work, recorded when it was destroyed.
    if (t.stream != nullptr) {
      if (CUresult const r = drv.event_record(t.fence, t.stream); r != CUDA_SUCCESS) {
        // Its work cannot be ordered (an event of another context, a stream
        // gone without the shim seeing it): the caller waits on the host.
        static std::atomic<bool> said{false};
        if (!said.exchange(true)) {
          log::info("a followed stream could not be fenced ({}); frees wait for the device instead", cuda_status{r});
        }
        return r;
      }
    }
    if (CUresult const r = drv.stream_wait_event(target, t.fence, 0); r != CUDA_SUCCESS) { return r; }
  }
  return CUDA_SUCCESS;
}

}  // namespace asyncshim::shim
