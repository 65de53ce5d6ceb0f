#include "state/event_log.hpp"

#include "state/statistics.hpp"  // expand_stats_path
#include "support/background_thread.hpp"
#include "support/log.hpp"
#include "support/own_file.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace asyncshim::shim {

namespace {

// Records a thread collects before its batch is handed to the writer.
constexpr std::size_t batch_records = 4096;
constexpr auto write_every = std::chrono::milliseconds{100};
// What the writer formats into before each write().
constexpr std::size_t chunk_bytes = 64 * 1024;

// One thread's records. Registered for good (the exit and crash handlers
// reach every one), and taken over by a new thread once its own has exited
// and the writer has emptied it.
struct thread_buffer {
  std::mutex mutex;
  std::vector<std::vector<event_record>> full;  // batches, oldest first
  std::vector<event_record> current;
  bool owner_gone = false;
};

long this_thread_id() noexcept
{
  thread_local long const id = static_cast<long>(gettid());
  return id;
}

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

// Writes `records` as lines through `chunk` (chunk_bytes), flushing it to fd
// when full; returns the bytes still in the chunk.
std::size_t put_lines(int fd, std::vector<event_record> const& records, long offset, char* chunk, std::size_t used)
{
  for (event_record const& r : records) {
    if (used + event_line_max > chunk_bytes) {
      (void)write_all(fd, chunk, used);
      used = 0;
    }
    used += format_event_line(r, offset, chunk + used);
  }
  return used;
}

}  // namespace

class event_log {
 public:
  event_log(int fd, long pid) : fd_{fd}, pid_{pid}, utc_offset_{local_utc_offset_s()} {}

  void record(event_action action, void const* pointer, std::size_t bytes, std::uintptr_t stream) noexcept
  {
    thread_buffer* b = my_buffer();
    if (b == nullptr) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    event_record const r{
      this_thread_id(), realtime_ns(), action, reinterpret_cast<std::uintptr_t>(pointer), bytes, stream};
    bool batch_ready = false;
    {
      std::lock_guard lock{b->mutex};
      try {
        if (b->current.capacity() == 0) { b->current.reserve(batch_records); }
        b->current.push_back(r);
        if (b->current.size() >= batch_records) {
          b->full.push_back(std::move(b->current));
          b->current = {};
          batch_ready = true;
        }
      } catch (...) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
      }
    }
    if (batch_ready) { wake_.notify_one(); }
  }

  // Writes out everything buffered, each thread's records in order.
  void write_pending() noexcept
  {
    try {
      std::lock_guard one_writer{write_mutex_};
      std::vector<thread_buffer*> all;
      {
        std::lock_guard lock{buffers_mutex_};
        all = buffers_;
      }
      std::vector<std::vector<event_record>> taken;
      std::vector<char> chunk(chunk_bytes);
      std::size_t used = 0;
      for (thread_buffer* b : all) {
        taken.clear();
        {
          std::lock_guard lock{b->mutex};
          taken.swap(b->full);
          if (!b->current.empty()) { taken.push_back(std::exchange(b->current, {})); }
        }
        for (auto const& batch : taken) {
          used = put_lines(fd_, batch, utc_offset_, chunk.data(), used);
        }
      }
      if (used > 0) { (void)write_all(fd_, chunk.data(), used); }
    } catch (...) {  // no host memory now: the records stay for the next pass
    }
  }

  // From a fatal signal's handler: what can be reached without waiting, with
  // no heap and no stdio.
  void write_from_crash() noexcept
  {
    if (static_cast<long>(getpid()) != pid_) { return; }
    // Held to the end: the process is about to die, and no thread may grow the list meanwhile.
    if (!buffers_mutex_.try_lock()) { return; }
    char line[event_line_max];
    for (thread_buffer* b : buffers_) {
      if (!b->mutex.try_lock()) { continue; }  // its thread is inside a call: skipped
      for (auto const& batch : b->full) {
        for (event_record const& r : batch) {
          (void)write_all(fd_, line, format_event_line(r, utc_offset_, line));
        }
      }
      for (event_record const& r : b->current) {
        (void)write_all(fd_, line, format_event_line(r, utc_offset_, line));
      }
      b->mutex.unlock();
    }
  }

  void writer_loop() noexcept
  {
    for (;;) {
      {
        std::unique_lock lock{wake_mutex_};
        (void)wake_.wait_for(lock, write_every);
      }
      write_pending();
    }
  }

  [[nodiscard]] long pid() const noexcept { return pid_; }

 private:
  // The calling thread's buffer: its own, or one a finished thread left.
  thread_buffer* my_buffer() noexcept
  {
    struct owner {
      thread_buffer* buffer = nullptr;
      ~owner()
      {
        if (buffer == nullptr) { return; }
        std::lock_guard lock{buffer->mutex};
        buffer->owner_gone = true;
      }
    };
    thread_local owner mine;
    if (mine.buffer != nullptr) { return mine.buffer; }
    try {
      std::lock_guard lock{buffers_mutex_};
      for (thread_buffer* b : buffers_) {
        std::lock_guard inner{b->mutex};
        if (b->owner_gone && b->full.empty() && b->current.empty()) {
          b->owner_gone = false;
          mine.buffer = b;
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
      mine.buffer = made;
      return made;
    } catch (...) {
      return nullptr;
    }
  }

  int fd_;
  long pid_;
  long utc_offset_;
  std::mutex buffers_mutex_;
  std::vector<thread_buffer*> buffers_;  // never shrinks; the buffers are never freed
  std::mutex write_mutex_;
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::atomic<std::uint64_t> dropped_{0};
};

namespace {

event_log* the_log = nullptr;

void flush_at_exit()
{
  if (the_log != nullptr && static_cast<long>(getpid()) == the_log->pid()) { the_log->write_pending(); }
}

void* writer_main(void* log) noexcept
{
  static_cast<event_log*>(log)->writer_loop();
  return nullptr;
}

// The fatal signals whose default action ends the process, and the handler
// that writes the buffered records first. Installed only where the program
// left the default; the program's own handler, set later, replaces it.
constexpr std::array fatal_signals{SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

void on_fatal_signal(int sig)
{
  int const saved = errno;
  if (the_log != nullptr) { the_log->write_from_crash(); }
  signal(sig, SIG_DFL);
  errno = saved;
  raise(sig);
}

void write_before_fatal_signals() noexcept
{
  for (int sig : fatal_signals) {
    struct sigaction current {};
    if (sigaction(sig, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) { continue; }
    struct sigaction ours {};
    ours.sa_handler = on_fatal_signal;
    sigemptyset(&ours.sa_mask);
    ours.sa_flags = SA_RESETHAND | SA_NODEFER;
    (void)sigaction(sig, &ours, nullptr);
  }
}

event_log* open_log(std::string const& pattern) noexcept
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
    if (!write_all(file.fd, event_log_header, sizeof(event_log_header) - 1)) {
      log::error("ASYNCSHIM_EVENT_LOG: cannot write the event log to '{}': {}", path, std::strerror(errno));
      (void)::close(file.fd);
      return nullptr;
    }
    auto* made = new event_log{file.fd, pid};  // never destroyed: calls may come until the very end
    the_log = made;
    (void)std::atexit(flush_at_exit);
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

event_log* start_event_log(std::string const& pattern) noexcept
{
  static event_log* const log = open_log(pattern);
  return log;
}

void log_event(event_log& log, event_action action, void const* pointer, std::size_t bytes,
               std::uintptr_t stream) noexcept
{
  log.record(action, pointer, bytes, stream);
}

void flush_event_log(event_log& log) noexcept { log.write_pending(); }

}  // namespace asyncshim::shim
