#include "state/event_log.hpp"

#include "state/statistics.hpp"  // expand_stats_path
#include "support/background_thread.hpp"
#include "support/fork_quiet.hpp"
#include "support/log.hpp"
#include "support/own_file.hpp"
#include "support/spin_lock.hpp"
#include "support/thread_id.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

namespace asyncshim::shim {

namespace {

// A thread's buffer wakes the writer when it holds this many records.
constexpr std::size_t batch_records = 4096;
constexpr std::size_t first_reserve = 256;
// Records buffered in all, at most; beyond, events are dropped (and counted)
// rather than the host's memory filled while the disk is slow.
constexpr std::uint64_t most_buffered = std::uint64_t{1} << 20;
constexpr auto write_every = std::chrono::milliseconds{100};
constexpr unsigned passes_between_looks = 10;  // at whether the program's threads have ended
// What the writer formats into before each write().
constexpr std::size_t chunk_bytes = 64 * 1024;
// How long a lock held by someone else is tried: by a writer's pass before it
// gives the pass up (nothing written, order kept), and at exit before the
// records behind it are given up (counted as dropped).
constexpr auto pass_lock_wait = std::chrono::milliseconds{20};
constexpr auto exit_lock_wait = std::chrono::seconds{2};

// One thread's records, in call order. Registered for good (the exit and
// crash handlers reach every one), and taken over by a new thread once its
// own has exited and the writer has emptied it.
struct thread_buffer {
  spin_lock lock;  // held for a push_back by its thread, for a swap by the writer
  std::vector<event_record> records;
  // Set without the lock when the owner's thread ends: that thread
  // may hold the lock for good (exit() from a signal handler that
  // interrupted it inside a call).
  std::atomic<bool> owner_gone{false};
};

std::int64_t realtime_ns() noexcept
{
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

long local_utc_offset_s() noexcept
{
  time_t const now = time(nullptr);
  tm local{};
  return localtime_r(&now, &local) != nullptr ? local.tm_gmtoff : 0;
}

// Takes `m` within `wait`, or not at all: a thread interrupted inside a call
// by a signal whose handler calls exit() holds its lock for good.
template <class Lock>
bool lock_within(Lock& m, std::chrono::milliseconds wait) noexcept
{
  auto const until = std::chrono::steady_clock::now() + wait;
  for (;;) {
    if (m.try_lock()) { return true; }
    if (std::chrono::steady_clock::now() >= until) { return false; }
    sched_yield();
  }
}

}  // namespace

class event_log {
 public:
  event_log(int fd, long pid, bool memory_column)
      : fd_{fd}, pid_{pid}, utc_offset_{local_utc_offset_s()}, memory_column_{memory_column}
  {
  }

  void record(event_action action, void const* pointer, std::size_t bytes, std::uintptr_t stream,
              event_memory memory) noexcept
  {
    if (buffered() >= most_buffered) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    thread_buffer* b = my_buffer();
    if (b == nullptr) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    bool wake = false;
    bool numbered = false;
    {
      std::lock_guard lock{b->lock};
      try {
        if (b->records.capacity() == 0) { b->records.reserve(first_reserve); }
        // The number is taken under the buffer's lock: a writer that read the
        // next number first finds every record numbered below it.
        event_record const r{next_sequence_.fetch_add(1, std::memory_order_relaxed),
                             this_thread_id(),
                             realtime_ns(),
                             action,
                             reinterpret_cast<std::uintptr_t>(pointer),
                             bytes,
                             stream,
                             memory};
        numbered = true;
        b->records.push_back(r);
        wake = b->records.size() == batch_records;
      } catch (...) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        if (numbered) { numbered_dropped_.fetch_add(1, std::memory_order_relaxed); }
      }
    }
    if (wake) { wake_.notify_one(); }
  }

  // Writes out what every thread has buffered, in the order of the events
  // across threads: records numbered from the pass's start on wait for the
  // next pass (a thread may still be adding one numbered before them). A
  // pass that cannot take a thread's lock soon writes nothing (the order
  // stays whole). `final`: everything, at exit, giving up only what stays
  // locked. The writer's passes gather the records in a background_work
  // section (support/fork_quiet.hpp) and write them after it, so that a fork
  // waits for no disk; every lock inside it is tried for a short time only.
  void write_pending(bool final) noexcept
  {
    auto const wait = final ? std::chrono::milliseconds{exit_lock_wait} : pass_lock_wait;
    // The writer thread and exit take it (exit while the writer may be
    // stopped in the middle of a pass by a signal handler that exits).
    if (!lock_within(write_mutex_, wait)) { return; }
    std::lock_guard one_writer{write_mutex_, std::adopt_lock};
    std::uint64_t const horizon =
      final ? std::numeric_limits<std::uint64_t>::max() : next_sequence_.load(std::memory_order_relaxed);
    bool gathered = false;
    if (final) {
      gathered = gather(wait, final);
    } else {
      background_work const working;
      gathered = gather(wait, final);
    }
    if (gathered) {
      std::vector<event_record>& batch = pending_;
      auto const first_held = std::lower_bound(batch.begin(), batch.end(), horizon,
                                               [](event_record const& r, auto h) { return r.sequence < h; });
      write_records(batch.begin(), first_held);
      auto const written = static_cast<std::uint64_t>(first_held - batch.begin());
      written_.fetch_add(written, std::memory_order_relaxed);
      batch.erase(batch.begin(), first_held);
      if (!final && batch.empty()) { written_below_.store(horizon, std::memory_order_relaxed); }
    }
    if (final) {
      // What stayed locked, or was recorded while this pass ran: every event
      // numbered and neither written nor dropped already.
      dropped_.fetch_add(buffered(), std::memory_order_relaxed);
      say_what_was_lost();
    }
  }

  // Takes every thread's records into pending_, merged in the order of the
  // events; false when a pass (not `final`) must be given up: a thread's
  // lock stayed taken, or there was no host memory (what was taken stays in
  // pending_ for the next pass). Under write_mutex_.
  bool gather(std::chrono::milliseconds wait, bool final) noexcept
  {
    try {
      std::vector<thread_buffer*> all;
      if (!lock_within(buffers_mutex_, wait)) { return false; }
      {
        std::lock_guard lock{buffers_mutex_, std::adopt_lock};
        all = buffers_;
      }
      // Each thread's records are in order already, and so is pending_:
      // merging them run by run orders the whole batch. Taken out under the
      // thread's lock by a swap (the thread gets a recycled vector), merged
      // after it.
      std::vector<event_record>& batch = pending_;
      auto const by_sequence = [](event_record const& x, event_record const& y) { return x.sequence < y.sequence; };
      for (thread_buffer* b : all) {
        std::vector<event_record> taken;
        if (!recycled_.empty()) {
          taken = std::move(recycled_.back());
          recycled_.pop_back();
        }
        if (!lock_within(b->lock, wait)) {
          if (!final) {  // written by a later pass, in order
            recycled_.push_back(std::move(taken));
            return false;
          }
          continue;  // its records are lost (counted by the caller)
        }
        {
          std::lock_guard lock{b->lock, std::adopt_lock};
          taken.swap(b->records);
        }
        auto const merged = static_cast<std::ptrdiff_t>(batch.size());
        batch.insert(batch.end(), taken.begin(), taken.end());
        std::inplace_merge(batch.begin(), batch.begin() + merged, batch.end(), by_sequence);
        taken.clear();
        if (recycled_.size() < all.size()) { recycled_.push_back(std::move(taken)); }
      }
      return true;
    } catch (...) {  // no host memory for the pass
      return final;  // at exit, what was gathered is written
    }
  }

  // From a fatal signal's handler: what can be reached without waiting, with
  // no heap and no stdio. Locks stay taken: the writer must not write the
  // same records again before the process ends.
  void write_from_crash() noexcept
  {
    if (static_cast<long>(getpid()) != pid_) { return; }
    crashing_.store(true, std::memory_order_relaxed);  // the writer writes nothing more
    char line[event_line_max];
    auto const put = [&](event_record const& r) {
      (void)write_all(fd_, line, format_event_line(r, utc_offset_, memory_column_, line));
    };
    // What is written is cleared (no heap work) and every lock given back:
    // a program that carries on after the signal (its own handler chained to
    // this one) finds the log in order.
    if (write_mutex_.try_lock()) {
      for (event_record const& r : pending_) {
        put(r);
      }
      written_.fetch_add(pending_.size(), std::memory_order_relaxed);
      pending_.clear();
      write_mutex_.unlock();
    }
    if (!buffers_mutex_.try_lock()) { return; }
    for (thread_buffer* b : buffers_) {
      if (!b->lock.try_lock()) { continue; }  // its thread is inside a call: skipped
      for (event_record const& r : b->records) {
        put(r);
      }
      written_.fetch_add(b->records.size(), std::memory_order_relaxed);
      b->records.clear();
      b->lock.unlock();
    }
    buffers_mutex_.unlock();
    crashing_.store(false, std::memory_order_relaxed);
  }

  void writer_loop() noexcept
  {
    for (unsigned pass = 1; !crashing_.load(std::memory_order_relaxed); ++pass) {
      {
        std::unique_lock lock{wake_mutex_};
        (void)wake_.wait_for(lock, write_every);
      }
      // Once a second: when the program's threads have all ended, the thread
      // ends (what is left is written at exit).
      if (pass % passes_between_looks == 0 && only_background_threads_left()) { return; }
      // A pass with nothing to write allocates nothing: no event has been
      // numbered since the last pass wrote everything below its start.
      if (next_sequence_.load(std::memory_order_relaxed) == written_below_.load(std::memory_order_relaxed)) {
        continue;
      }
      write_pending(false);
    }
  }

  [[nodiscard]] long pid() const noexcept { return pid_; }

  // Events numbered and neither written nor dropped: in the threads' buffers
  // or pending_. The counts are read before the number, which only grows.
  [[nodiscard]] std::uint64_t buffered() const noexcept
  {
    std::uint64_t const accounted =
      written_.load(std::memory_order_relaxed) + numbered_dropped_.load(std::memory_order_relaxed);
    std::uint64_t const numbered = next_sequence_.load(std::memory_order_relaxed);
    return numbered > accounted ? numbered - accounted : 0;
  }

 private:
  // Formats into chunk_ (made with the log: no allocation here) and writes
  // it out each time it is full. Under write_mutex_.
  template <class Iterator>
  void write_records(Iterator begin, Iterator end) noexcept
  {
    std::size_t used = 0;
    auto const flush = [&] {
      if (used == 0 || crashing_.load(std::memory_order_relaxed)) { return; }
      if (!write_all(fd_, chunk_.data(), used) && write_error_ == 0) { write_error_ = errno; }
      used = 0;
    };
    for (Iterator r = begin; r != end; ++r) {
      if (crashing_.load(std::memory_order_relaxed)) { return; }  // the crash handler writes what is left
      if (used + event_line_max > chunk_bytes) { flush(); }
      used += format_event_line(*r, utc_offset_, memory_column_, chunk_.data() + used);
    }
    flush();
  }

  void say_what_was_lost() noexcept
  {
    if (std::uint64_t const dropped = dropped_.load(std::memory_order_relaxed); dropped > 0) {
      log::warn("ASYNCSHIM_EVENT_LOG: {} events are missing from the log (more than {} were waiting to be written, "
                "or there was no host memory for them)",
                dropped, most_buffered);
    }
    if (write_error_ != 0) {
      log::warn("ASYNCSHIM_EVENT_LOG: writing the log failed ({}): it is incomplete", std::strerror(write_error_));
    }
  }

  static void mark_buffer_free(void* buffer) noexcept
  {
    static_cast<thread_buffer*>(buffer)->owner_gone.store(true, std::memory_order_release);
  }

  // The calling thread's buffer: its own, or one a finished thread left.
  thread_buffer* my_buffer() noexcept
  {
    thread_local thread_buffer* mine = nullptr;
    if (mine != nullptr) { return mine; }
    try {
      std::lock_guard lock{buffers_mutex_};
      for (thread_buffer* b : buffers_) {
        if (!b->lock.try_lock()) { continue; }  // busy (or held for good): not one to take over
        std::lock_guard inner{b->lock, std::adopt_lock};
        if (b->owner_gone.load(std::memory_order_acquire) && b->records.empty()) {
          b->owner_gone.store(false, std::memory_order_relaxed);
          mine = b;
          mark_gone_at_thread_end(b);
          return b;
        }
      }
      auto* made = new thread_buffer;
      try {
        buffers_.push_back(made);
      } catch (...) {
        delete made;
        return nullptr;
      }
      mine = made;
      mark_gone_at_thread_end(made);
      return made;
    } catch (...) {
      return nullptr;
    }
  }

  // A thread's end marks its buffer free for the next new thread, through a
  // pthread key's destructor: unlike a thread_local's destructor, which the C
  // library keeps in a list it allocates and, for a main thread that ends
  // with pthread_exit, never frees (LeakSanitizer reports it), it runs for
  // every thread's end. Without a key (the process has used them all) no
  // buffer is taken over: each new thread adds one, which is said once.
  static void mark_gone_at_thread_end(thread_buffer* b) noexcept
  {
    static pthread_key_t key{};
    static bool const have_key = [] {
      if (pthread_key_create(&key, mark_buffer_free) == 0) { return true; }
      log::warn("ASYNCSHIM_EVENT_LOG: no thread-specific key is left in this process: each new thread that "
                "allocates or frees keeps a buffer of its own in the log until the process ends");
      return false;
    }();
    if (have_key) { (void)pthread_setspecific(key, b); }
  }

  int fd_;
  long pid_;
  long utc_offset_;     // taken once: the times of a run that crosses a change of daylight saving time keep it
  bool memory_column_;  // the host pool is on: each line says which memory it is about
  std::atomic<std::uint64_t> next_sequence_{0};
  std::mutex buffers_mutex_;
  std::vector<thread_buffer*> buffers_;              // never shrinks; the buffers are never freed
  std::mutex write_mutex_;                           // one writer at a time; guards pending_ and write_error_
  std::vector<event_record> pending_;                // taken, not yet written (numbered after a pass began)
  std::vector<std::vector<event_record>> recycled_;  // emptied vectors with their capacity, for the swaps
  std::array<char, chunk_bytes> chunk_{};            // what write_records formats into
  int write_error_ = 0;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> written_below_{0};     // every event numbered below it is written
  std::atomic<std::uint64_t> written_{0};           // events written, for what exit says was lost
  std::atomic<std::uint64_t> numbered_dropped_{0};  // numbered, then dropped (no host memory)
  std::atomic<bool> crashing_{false};
};

namespace {

std::atomic<event_log*> the_log{nullptr};

void* writer_main(void* log) noexcept
{
  static_cast<event_log*>(log)->writer_loop();
  return nullptr;
}

// The fatal signals whose default action ends the process, and the handler
// that writes the buffered records first. Installed only where the program
// left the default; a handler the program sets later replaces it.
constexpr std::array fatal_signals{SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

void on_fatal_signal(int sig, siginfo_t* info, void*)
{
  int const saved = errno;
  if (event_log* log = the_log.load(std::memory_order_acquire)) { log->write_from_crash(); }
  errno = saved;
  // SA_RESETHAND put the default action back. A fault the kernel raised
  // comes again when the instruction is retried, with its own siginfo (and
  // core dump); any other signal (a SIGABRT of abort(), raise() or kill) is
  // raised again here.
  if (info != nullptr && info->si_code > 0 && sig != SIGABRT) { return; }
  raise(sig);  // inside abort() as well: the default action ends the process here
}

void write_before_fatal_signals() noexcept
{
  for (int sig : fatal_signals) {
    struct sigaction ours {};
    ours.sa_sigaction = on_fatal_signal;
    sigemptyset(&ours.sa_mask);
    ours.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_NODEFER;
    struct sigaction previous {};
    if (sigaction(sig, &ours, &previous) != 0) { continue; }
    // The program (or a library) has a handler of its own: it stays.
    if ((previous.sa_flags & SA_SIGINFO) != 0 || previous.sa_handler != SIG_DFL) {
      (void)sigaction(sig, &previous, nullptr);
    }
  }
}

event_log* open_log(std::string const& pattern, bool memory_column) noexcept
{
  try {
    long const pid = static_cast<long>(getpid());
    std::string const path = expand_stats_path(pattern, pid);
    opened_file const file = open_own_file(path, file_write::replace);
    if (file.fd < 0 && file.by_rule) {
      log::error("ASYNCSHIM_EVENT_LOG: no event log is written to '{}': {} ({})", path, file.why, own_file_rule);
      return nullptr;
    }
    if (file.fd < 0) {
      log::error("ASYNCSHIM_EVENT_LOG: no event log is written to '{}': {}", path, file.why);
      return nullptr;
    }
    std::string_view const header =
      memory_column ? std::string_view{event_log_header_with_memory} : std::string_view{event_log_header};
    if (!write_all(file.fd, header.data(), header.size())) {
      log::error("ASYNCSHIM_EVENT_LOG: cannot write the event log to '{}': {}", path, std::strerror(errno));
      (void)::close(file.fd);
      return nullptr;
    }
    auto* made = new event_log{file.fd, pid, memory_column};  // never destroyed: calls may come until the very end
    the_log.store(made, std::memory_order_release);
    write_before_fatal_signals();
    if (int const started = start_background_thread(writer_main, made, "asyncshim-log"); started != 0) {
      log::warn("ASYNCSHIM_EVENT_LOG: cannot start the log's writer ({}): the log is written at exit only",
                std::strerror(started));
    }
    return made;
  } catch (...) {
    log::error("ASYNCSHIM_EVENT_LOG: no host memory for the event log; none is written");
    return nullptr;
  }
}

}  // namespace

void flush_event_log_at_exit() noexcept
{
  event_log* log = the_log.load(std::memory_order_acquire);
  if (log != nullptr && static_cast<long>(getpid()) == log->pid()) { log->write_pending(true); }
}

event_log* start_event_log(std::string const& pattern, bool memory_column) noexcept
{
  static event_log* const log = open_log(pattern, memory_column);
  return log;
}

void log_event(event_log& log, event_action action, void const* pointer, std::size_t bytes, std::uintptr_t stream,
               event_memory memory) noexcept
{
  log.record(action, pointer, bytes, stream, memory);
}

}  // namespace asyncshim::shim
