#include "state/shim_state.hpp"

#include "state/process.hpp"

#include <atomic>
#include <new>

namespace asyncshim::shim {
namespace {

std::atomic<shim_state*> created_state{nullptr};

}  // namespace

shim_state* active_state() noexcept
{
  if (in_forked_child() || process_settings().disabled) { return nullptr; }
  static shim_state* const instance = []() noexcept {
    watch_for_fork();
    auto* made = new (std::nothrow) shim_state{process_settings()};
    created_state.store(made, std::memory_order_release);
    return made;
  }();
  return instance;
}

shim_state* existing_state() noexcept
{
  if (in_forked_child()) { return nullptr; }
  return created_state.load(std::memory_order_acquire);
}

}  // namespace asyncshim::shim
