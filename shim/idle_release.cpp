#include "idle_release.hpp"

#include "byte_text.hpp"
#include "device_limit.hpp"
#include "fork_state.hpp"
#include "log.hpp"
#include "pool_release.hpp"
#include "queued_frees.hpp"
#include "stream_tracker.hpp"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

namespace asyncshim::shim {
namespace {

// The thread's lock, held while it works, so that the exit handler, which
// takes it to stop the thread, waits for work in progress. Never destroyed.
struct idle_thread_control {
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
};

idle_thread_control* control() noexcept
{
  static auto* const made = new (std::nothrow) idle_thread_control;
  return made;
}

// An exit handler, registered after CUDA is initialized: it runs before the
// runtime's own teardown, and after it the thread makes no CUDA call. A
// forked child has no such thread, and its copy of the lock may be held by
// the parent's thread forever: it does nothing.
void stop_at_exit() noexcept
{
  if (in_forked_child()) { return; }
  idle_thread_control& c = *control();
  std::lock_guard lock{c.mutex};
  c.stopping = true;
  c.wake.notify_all();
}

// Whether this is the last thread of the process: the program's main thread
// ended with pthread_exit and every other thread has ended. The thread then
// ends too, so that the process ends as it would without the shim.
bool alone_in_the_process() noexcept
{
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) { return false; }
  int threads = 0;
  while (dirent const* task = readdir(tasks)) {
    if (task->d_name[0] != '.' && ++threads > 1) { break; }
  }
  closedir(tasks);
  return threads == 1;
}

void run(shim_state& s) noexcept
{
  idle_thread_control& c = *control();
  auto const period = std::chrono::milliseconds{s.settings.idle_release_ms};
  std::uint64_t seen = s.registry.activity();
  std::unique_lock lock{c.mutex};
  while (!c.stopping) {
    auto const deadline = std::chrono::steady_clock::now() + period;
    if (c.wake.wait_until(lock, deadline, [&] { return c.stopping; }) || alone_in_the_process()) { break; }
    std::uint64_t const now = s.registry.activity();
    if (now != seen) {  // busy: look again after another whole period
      seen = now;
      continue;
    }
    release_when_idle(s);
  }
}

void* thread_main(void* state) noexcept
{
  run(*static_cast<shim_state*>(state));
  return nullptr;
}

}  // namespace

void release_when_idle(shim_state& s) noexcept
{
  issue_all_queued_frees();
  stream_tracker& streams = tracker();
  if (streams.captures_in_progress()) { return; }
  auto access = streams.access();
  if (streams.captures_in_progress()) { return; }
  for (int device = 0; device < max_devices; ++device) {
    std::uint64_t const released = release_unused(s, device);
    if (released == 0 || !log::enabled(log::log_level::info)) { continue; }
    try {
      log::info("device {}: no allocation or free for {}: gave {} of unused asyncshim pool memory back", device,
                config::duration_text(s.settings.idle_release_ms), approximate_bytes(released));
    } catch (...) {  // no host memory for the message
    }
  }
}

void start_idle_release_thread(shim_state& s) noexcept
{
  if (s.idle_release_started.exchange(true, std::memory_order_acq_rel)) { return; }
  if (s.settings.idle_release_ms == 0) { return; }
  // Without a way to stop it before CUDA's teardown, no thread.
  if (control() == nullptr || std::atexit(stop_at_exit) != 0) {
    log::warn("cannot start the idle release (no memory for it): unused pool memory goes back only when the device "
              "runs short");
    return;
  }
  // Every signal blocked in the new thread (it inherits this mask), so that
  // signals meant for the program reach the program's threads.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread{};
  int const made = pthread_create(&thread, nullptr, thread_main, &s);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (made != 0) {
    log::warn("cannot start the idle release ({}): unused pool memory goes back only when the device runs short",
              std::strerror(made));
    return;
  }
  (void)pthread_setname_np(thread, "asyncshim-idle");
  (void)pthread_detach(thread);
}

}  // namespace asyncshim::shim
