// The shim's own threads (the event log's writer, the idle release, the
// legacy IPC channel): detached, named, and with every signal blocked, so
// that signals meant for the program reach the program's threads. What they
// do about a fork: support/fork_quiet.hpp.
#pragma once

namespace asyncshim::shim {

/// Starts `body(argument)` on a new thread named `name` (at most 15
/// characters); 0, or the error pthread_create returned.
[[nodiscard]] int start_background_thread(void* (*body)(void*), void* argument, char const* name) noexcept;

/// Whether the program's own threads have all ended (its main thread with
/// pthread_exit, the others after it) and only the shim's are left. Each of
/// the shim's threads asks now and then and ends when so: the last thread's
/// end ends the process, which then ends as it would without the shim, its
/// exit handlers run (on that thread, with the signal mask of the program
/// thread that started it). Threads of the CUDA driver or of other libraries are
/// the program's here: they keep the process alive without the shim too.
/// Reads /proc/self/stat into the stack: allocates nothing.
[[nodiscard]] bool only_background_threads_left() noexcept;

}  // namespace asyncshim::shim
