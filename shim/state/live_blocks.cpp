#include "state/live_blocks.hpp"

#include "support/thread_id.hpp"

#include <execinfo.h>  // backtrace
#include <link.h>      // dl_iterate_phdr
#include <sched.h>

#include <algorithm>
#include <array>
#include <chrono>

namespace asyncshim::shim {
namespace {

// The addresses of this library's own code: its frames lead every stack.
struct address_range {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
};

// Finds the loaded segment of some object that holds `found->begin`.
int find_segment(dl_phdr_info* info, std::size_t, void* data)
{
  auto* found = static_cast<address_range*>(data);
  std::uintptr_t const probe = found->begin;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    ElfW(Phdr) const& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_LOAD) { continue; }
    std::uintptr_t const start = info->dlpi_addr + segment.p_vaddr;
    if (probe >= start && probe < start + segment.p_memsz) {
      *found = {start, start + segment.p_memsz};
      return 1;
    }
  }
  return 0;
}

// The loaded code around `address`; empty when no object holds it.
address_range code_around(std::uintptr_t address) noexcept
{
  address_range found{address, 0};
  if (dl_iterate_phdr(find_segment, &found) == 0) { return address_range{}; }
  return found;
}

// The frames that lead every stack and are not the program's: this
// library's, and those of the object backtrace() lives in (the C library, or
// a sanitizer's runtime that intercepts it).
bool leading_frame(std::uintptr_t address) noexcept
{
  static address_range const own = code_around(reinterpret_cast<std::uintptr_t>(&find_segment));
  static address_range const unwinder = code_around(reinterpret_cast<std::uintptr_t>(&backtrace));
  return (address >= own.begin && address < own.end) || (address >= unwinder.begin && address < unwinder.end);
}

// Up to `depth` frames of the caller's stack outside this library.
std::vector<void*> program_stack(unsigned depth)
{
  constexpr int own_frames_at_most = 16;
  std::array<void*, live_blocks_max_frames + own_frames_at_most> frames{};
  int const n =
    backtrace(frames.data(), static_cast<int>(std::min<std::size_t>(depth + own_frames_at_most, frames.size())));
  int first = 0;
  while (first < n && leading_frame(reinterpret_cast<std::uintptr_t>(frames[first]))) {
    ++first;
  }
  int const last = std::min(n, first + static_cast<int>(depth));
  return std::vector<void*>(frames.begin() + first, frames.begin() + last);  // the range, not two pointers
}

}  // namespace

std::int64_t live_blocks::now_ns() noexcept
{
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
    .count();
}

void live_blocks::allocated(void const* ptr, std::size_t bytes, int device, char const* entry_point) noexcept
{
  auto const address = reinterpret_cast<std::uintptr_t>(ptr);
  try {
    live_block block{address, bytes, device, entry_point, this_thread_id(), now_ns(), {}};
    if (stack_depth_ > 0) { block.stack = program_stack(stack_depth_); }  // outside the lock: it is slow
    std::lock_guard lock{mutex_};
    blocks_.insert_or_assign(address, std::move(block));
  } catch (...) {
    untracked_.fetch_add(1, std::memory_order_relaxed);
  }
}

std::optional<live_block> live_blocks::take(void const* ptr) noexcept
{
  std::lock_guard lock{mutex_};
  auto found = blocks_.find(reinterpret_cast<std::uintptr_t>(ptr));
  if (found == blocks_.end()) { return std::nullopt; }
  live_block block = std::move(found->second);
  blocks_.erase(found);
  return block;
}

void live_blocks::restore(live_block&& block) noexcept
{
  std::lock_guard lock{mutex_};
  try {
    std::uintptr_t const address = block.address;
    blocks_.insert_or_assign(address, std::move(block));
  } catch (...) {
    untracked_.fetch_add(1, std::memory_order_relaxed);
  }
}

bool live_blocks::snapshot_at_exit(std::vector<live_block>& out) const
{
  std::unique_lock lock{mutex_, std::try_to_lock};
  for (int tries = 0; !lock.owns_lock() && tries < 1000; ++tries) {
    sched_yield();
    (void)lock.try_lock();
  }
  if (!lock.owns_lock()) { return false; }
  out.reserve(blocks_.size());
  for (auto const& [address, block] : blocks_) {
    out.push_back(block);
  }
  return true;
}

std::vector<live_block> live_blocks::largest(int device, std::size_t n) const
{
  std::vector<live_block> found;
  std::lock_guard lock{mutex_};
  for (auto const& [address, block] : blocks_) {
    if (block.device != device) { continue; }
    if (found.size() < n) {
      found.push_back(block);
      std::push_heap(found.begin(), found.end(),
                     [](live_block const& a, live_block const& b) { return a.bytes > b.bytes; });
    } else if (n > 0 && block.bytes > found.front().bytes) {
      auto const smaller = [](live_block const& a, live_block const& b) { return a.bytes > b.bytes; };
      std::pop_heap(found.begin(), found.end(), smaller);
      found.back() = block;
      std::push_heap(found.begin(), found.end(), smaller);
    }
  }
  std::sort(found.begin(), found.end(), [](live_block const& a, live_block const& b) { return a.bytes > b.bytes; });
  return found;
}

std::uint64_t live_blocks::untracked() const noexcept { return untracked_.load(std::memory_order_relaxed); }

}  // namespace asyncshim::shim
