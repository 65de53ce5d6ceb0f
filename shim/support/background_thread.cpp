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

// The shim's threads that run their body now, counted by each thread itself:
// a thread not yet counted, or no longer, is taken for one of the program's,
// so that no thread ends early.
std::atomic<long> running{0};
// Changes whenever a thread may be about to appear or has stopped counting:
// a look at the process that saw it change looks again later.
std::atomic<unsigned long> changes{0};
// Set on a thread that has found only the shim's threads left.
thread_local bool program_ended = false;

struct thread_start {
  void* (*body)(void*);
  void* argument;
  sigset_t program_mask;
  sem_t started;
};

void* counted(void* start) noexcept
{
  running.fetch_add(1);
  auto& what = *static_cast<thread_start*>(start);
  void* (*const body)(void*) = what.body;
  void* const argument = what.argument;
  sigset_t const program_mask = what.program_mask;
  (void)sem_post(&what.started);  // `what` is gone after this
  void* const result = body(argument);
  running.fetch_sub(1);
  changes.fetch_add(1);
  // The last thread's end runs the exit handlers on this thread: with the
  // signal mask of the program thread that started it, not the shim's.
  if (program_ended) { (void)pthread_sigmask(SIG_SETMASK, &program_mask, nullptr); }
  return result;
}

// The thread count and the state of the main thread, from /proc/self/stat;
// false when it cannot be read.
bool read_process(long& threads, bool& main_thread_ended) noexcept
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
  if (at == nullptr || at[1] != ' ' || at[2] == '\0') { return false; }
  main_thread_ended = at[2] == 'Z';
  for (int field = 3; at != nullptr && field <= 20; ++field) {
    at = std::strchr(at + 1, ' ');
  }
  if (at == nullptr) { return false; }
  threads = std::strtol(at + 1, nullptr, 10);
  return true;
}

}  // namespace

int start_background_thread(void* (*body)(void*), void* argument, char const* name) noexcept
{
  quiet_background_work_at_fork();
  thread_start start{body, argument, {}, {}};
  if (sem_init(&start.started, 0, 0) != 0) { return errno; }
  // sem_wait is a cancellation point, and this runs inside the program's
  // CUDA call: a cancellation pending on the calling thread waits for the
  // program's next cancellation point, as without the shim.
  int cancel_state = PTHREAD_CANCEL_ENABLE;
  (void)pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &cancel_state);
  // The new thread inherits this thread's mask: block everything around its creation.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &start.program_mask);
  pthread_t thread{};
  changes.fetch_add(1);
  int const made = pthread_create(&thread, nullptr, counted, &start);
  pthread_sigmask(SIG_SETMASK, &start.program_mask, nullptr);
  if (made == 0) {
    // Returns once the thread runs: what the C library and a sanitizer's
    // runtime allocate as a thread starts is done before the program's next
    // step, which may be a fork (support/fork_quiet.hpp).
    while (sem_wait(&start.started) != 0 && errno == EINTR) {}
    (void)pthread_setname_np(thread, name);
    (void)pthread_detach(thread);
  }
  (void)sem_destroy(&start.started);
  (void)pthread_setcancelstate(cancel_state, nullptr);
  return made;
}

bool only_background_threads_left() noexcept
{
  // The shim's count first, then the process: a thread that starts counting
  // between the two reads is in neither or only in the process's count, and
  // one that stops changes `changes`.
  unsigned long const before = changes.load();
  long const ours = running.load();
  long threads = 0;
  bool main_thread_ended = false;
  if (!read_process(threads, main_thread_ended) || !main_thread_ended) { return false; }
  if (changes.load() != before || threads - 1 != ours) { return false; }
  program_ended = true;
  return true;
}

}  // namespace asyncshim::shim
