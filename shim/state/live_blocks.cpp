#include "state/live_blocks.hpp"

#include <unistd.h>  // gettid

#include <chrono>

namespace asyncshim::shim {
namespace {

long this_thread_id() noexcept
{
  thread_local long const id = static_cast<long>(gettid());
  return id;
}

}  // namespace

std::int64_t live_blocks::now_ns() noexcept
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

void live_blocks::allocated(void const* ptr, std::size_t bytes, int device, interposed_call call) noexcept
{
  auto const address = reinterpret_cast<std::uintptr_t>(ptr);
  live_block const block{address, bytes, device, call, this_thread_id(), now_ns()};
  std::lock_guard lock{mutex_};
  try {
    blocks_.insert_or_assign(address, block);
  } catch (...) {
    ++untracked_;
  }
}

void live_blocks::freed(void const* ptr) noexcept
{
  std::lock_guard lock{mutex_};
  blocks_.erase(reinterpret_cast<std::uintptr_t>(ptr));
}

void live_blocks::forget_device(int device) noexcept
{
  std::lock_guard lock{mutex_};
  std::erase_if(blocks_, [&](auto const& entry) { return entry.second.device == device; });
}

std::vector<live_block> live_blocks::snapshot() const
{
  std::lock_guard lock{mutex_};
  std::vector<live_block> all;
  all.reserve(blocks_.size());
  for (auto const& [address, block] : blocks_) {
    all.push_back(block);
  }
  return all;
}

std::uint64_t live_blocks::untracked() const noexcept
{
  std::lock_guard lock{mutex_};
  return untracked_;
}

}  // namespace asyncshim::shim
