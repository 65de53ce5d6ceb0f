// Whether the process has begun exiting (RMM's approach): a resource destroyed
// after that skips cudaMemPoolDestroy, since the driver may already be gone.
#pragma once

namespace asyncshim::detail {

// Registers the atexit handler the first time it is called.
void watch_process_exit() noexcept;
[[nodiscard]] bool process_is_exiting() noexcept;

}  // namespace asyncshim::detail
