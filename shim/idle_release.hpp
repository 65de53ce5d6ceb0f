// The idle release (README, "Sharing a GPU"): once the program has allocated
// and freed nothing for ASYNCSHIM_IDLE_RELEASE, its pools give their unused
// memory back to the device. A program that has gone quiet makes no calls the
// shim could act in, so this is a thread of the shim's own ("asyncshim-idle"),
// started with the process's first pool: it wakes once a period, does nothing
// while the program is busy, never works while a stream capture is in
// progress, and stops before the process's exit handlers tear CUDA down. Its
// signals are blocked; a forked child has no such thread.
#pragma once

#include "shim_state.hpp"

namespace asyncshim::shim {

// Starts the thread, once per process, unless ASYNCSHIM_IDLE_RELEASE is off
// (cheap once started: one atomic load, for the allocation path).
void start_idle_release_thread(shim_state& s) noexcept;
inline void start_idle_release(shim_state& s) noexcept
{
  if (!s.idle_release_started.load(std::memory_order_relaxed)) { start_idle_release_thread(s); }
}

// One period's work, when the program has done nothing for a whole period:
// queued frees are issued and every pool gives back what it holds unused
// beyond what it keeps. (What the thread runs; a test calls it directly.)
void release_when_idle(shim_state& s) noexcept;

}  // namespace asyncshim::shim
