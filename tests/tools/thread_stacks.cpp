// A development tool, not part of the product. Preloaded into a program that
// seems stuck, it writes the call stack of each thread that receives SIGUSR2
// to the file named by THREAD_STACKS_FILE (standard error without it), so
// that a machine without gdb can still tell where every thread waits:
// scripts/thread-stacks.py sends the signal to each thread of a process and
// names the functions of the frames. The program is otherwise untouched:
// nothing happens until the signal comes.
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace {

int out_fd = STDERR_FILENO;

void write_text(char const* text) noexcept
{
  std::size_t left = std::strlen(text);
  while (left > 0) {
    ssize_t const wrote = write(out_fd, text, left);
    if (wrote <= 0) { return; }
    text += wrote;
    left -= static_cast<std::size_t>(wrote);
  }
}

// The header of one thread's stack: "== thread TID\n", made without printf
// (not async-signal-safe).
void write_header(long tid) noexcept
{
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + tid % 10);
    tid /= 10;
  } while (tid > 0 && n < 23);
  char line[48] = "== thread ";
  std::size_t at = std::strlen(line);
  while (n > 0) {
    line[at++] = digits[--n];
  }
  line[at++] = '\n';
  line[at] = '\0';
  write_text(line);
}

void on_signal(int) noexcept
{
  int const saved = errno;
  void* frames[64];
  int const count = backtrace(frames, 64);
  write_header(syscall(SYS_gettid));
  backtrace_symbols_fd(frames, count, out_fd);
  errno = saved;
}

__attribute__((constructor)) void install() noexcept
{
  if (char const* path = std::getenv("THREAD_STACKS_FILE"); path != nullptr && path[0] != '\0') {
    int const fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) { out_fd = fd; }
  }
  void* warm[1];
  (void)backtrace(warm, 1);  // loads the unwinder now, not in the handler
  struct sigaction action {};
  action.sa_handler = on_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  (void)sigaction(SIGUSR2, &action, nullptr);
}

}  // namespace
