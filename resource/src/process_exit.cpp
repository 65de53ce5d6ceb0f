#include "process_exit.hpp"

#include <atomic>
#include <cstdlib>

namespace asyncshim::detail {
namespace {
std::atomic<bool> exiting{false};
void mark_exiting() noexcept { exiting.store(true, std::memory_order_relaxed); }
}  // namespace

void watch_process_exit() noexcept
{
  static bool const registered = (std::atexit(mark_exiting) == 0);
  (void)registered;
}

bool process_is_exiting() noexcept { return exiting.load(std::memory_order_relaxed); }

}  // namespace asyncshim::detail
