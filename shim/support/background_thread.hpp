// The shim's own threads (the idle release, the legacy IPC channel): detached,
// named, and with every signal blocked, so that signals meant for the program
// reach the program's threads.
#pragma once

namespace asyncshim::shim {

// Starts `body(argument)` on a new thread named `name` (at most 15
// characters); 0, or the error pthread_create returned.
[[nodiscard]] int start_background_thread(void* (*body)(void*), void* argument, char const* name) noexcept;

}  // namespace asyncshim::shim
