// Keeps the shim's own threads out of the host allocator while a program
// thread forks.
//
// The program may allocate in a forked child, as a single-threaded program
// may. The shim made its process multithreaded: an allocator that does not
// take its locks around fork() (AddressSanitizer's before LLVM 18, some
// custom allocators) leaves a lock that one of the shim's threads held at
// the fork held for good in the child, whose next malloc, or LeakSanitizer's
// check at exit, then waits forever. glibc's malloc is safe either way.
//
// So start_background_thread returns once the new thread runs (what the C
// library and a sanitizer's runtime allocate for it is done by then), the
// shim's threads allocate as little as they can between their work,
// and the work that comes again and again, the event log's gathering of
// its records (ten times a second; the writes come after, so that a fork
// waits for no disk), goes in a background_work section: fork() waits until none is in
// one, and none starts until fork() has returned (pthread_atfork). A
// section makes no CUDA call and waits for no lock that a program thread
// holds across a CUDA call: the driver's own fork handlers may take its
// locks first, and a fork must never wait for the driver. So the idle
// release's releases (CUDA calls) and the IPC channel's answers (which look
// up what program threads record under a lock) are left out: both are rare.
#pragma once

namespace asyncshim::shim {

/// Installs the fork handlers, once; start_background_thread does it before
/// each of the shim's threads starts.
void quiet_background_work_at_fork() noexcept;

/// A section of host-memory work on one of the shim's threads. Waits while a
/// fork is in progress. Not nested.
class background_work {
 public:
  background_work() noexcept;
  ~background_work();
  background_work(background_work const&) = delete;
  background_work& operator=(background_work const&) = delete;
};

}  // namespace asyncshim::shim
