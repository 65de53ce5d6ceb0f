// The calling thread's id as the kernel, ps and top -H name it (gettid),
// asked once per thread.
#pragma once

#include <unistd.h>

namespace asyncshim::shim {

[[nodiscard]] inline long this_thread_id() noexcept
{
  thread_local long const id = static_cast<long>(gettid());
  return id;
}

}  // namespace asyncshim::shim
