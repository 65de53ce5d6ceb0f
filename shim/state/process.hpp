// What is true of the whole process, decided once: its settings, read from
// the environment on the first interposed call (never at load time, with
// every diagnostic printed then), and whether it is a child made by fork
// (without exec) of a process in which the shim was already at work. Such a
// child passes every call straight through and follows nothing: it never
// waits on a lock that another parent thread held at the fork, and never
// touches the parent's pools.
#pragma once

#include <asyncshim/config/settings.hpp>

namespace asyncshim::shim {

[[nodiscard]] config::settings const& process_settings() noexcept;

[[nodiscard]] bool in_forked_child() noexcept;
// Registers the fork handler that sets the flag in children, once per process.
// Called before the shim first takes any lock of its own.
void watch_for_fork() noexcept;

}  // namespace asyncshim::shim
