#include "support/background_thread.hpp"

#include "support/fork_quiet.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace asyncshim::shim {

namespace {

// The shim's threads that run their body now. Counted by each thread itself,
// so that a thread not yet counted, or no longer, is taken for one of the
// program's: no thread ends early.
std::atomic<long> running{0};

struct thread_start {
  void* (*body)(void*);
  void* argument;
  sem_t started;
};

void* counted(void* start) noexcept
{
  running.fetch_add(1, std::memory_order_acq_rel);
  auto& what = *static_cast<thread_start*>(start);
  void* (*const body)(void*) = what.body;
  void* const argument = what.argument;
  (void)sem_post(&what.started);  // `what` is gone after this
  void* const result = body(argument);
  running.fetch_sub(1, std::memory_order_acq_rel);
  return result;
}

}  // namespace

int start_background_thread(void* (*body)(void*), void* argument, char const* name) noexcept
{
  quiet_background_work_at_fork();
  thread_start start{body, argument, {}};
  if (sem_init(&start.started, 0, 0) != 0) { return errno; }
  // The new thread inherits this thread's mask: block everything around its creation.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread{};
  int const made = pthread_create(&thread, nullptr, counted, &start);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (made == 0) {
    // Returns once the thread runs: what the C library and a sanitizer's
    // runtime allocate as a thread starts is done before the program's next
    // step, which may be a fork (support/fork_quiet.hpp).
    while (sem_wait(&start.started) != 0 && errno == EINTR) {}
    (void)pthread_setname_np(thread, name);
    (void)pthread_detach(thread);
  }
  (void)sem_destroy(&start.started);
  return made;
}

bool only_background_threads_left() noexcept
{
  int const fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) { return false; }
  char text[1024];
  ssize_t const got = read(fd, text, sizeof text - 1);
  (void)close(fd);
  if (got <= 0) { return false; }
  text[got] = '\0';
  // Field 2, the command name in parentheses, may hold spaces and ')':
  // field 3, the state of the main thread, starts after the last ')'. A main
  // thread that ended with pthread_exit is a zombie ('Z') until the process
  // ends, and is still counted in field 20, the number of threads.
  char const* at = std::strrchr(text, ')');
  if (at == nullptr || at[1] != ' ' || at[2] != 'Z') { return false; }
  for (int field = 3; at != nullptr && field <= 20; ++field) {
    at = std::strchr(at + 1, ' ');
  }
  if (at == nullptr) { return false; }
  long const threads = std::strtol(at + 1, nullptr, 10);
  return threads - 1 == running.load(std::memory_order_acquire);
}

}  // namespace asyncshim::shim
