// The blocks the program has allocated and not freed, with where and when
// each came from, for the leak report at exit (ASYNCSHIM_LEAK_REPORT,
// state/leak_report.hpp). Kept only when a report was asked for: each
// allocation and free then takes one lock and a host allocation here.
#pragma once

#include "state/statistics.hpp"  // interposed_call

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace asyncshim::shim {

struct live_block {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  int device = 0;
  interposed_call call = interposed_call::malloc;  // the entry point that allocated it
  long thread = 0;                                 // the allocating thread's id (gettid)
  std::int64_t allocated_ns = 0;                   // steady clock
};

class live_blocks {
 public:
  // An allocation the program now has; recorded without it when there is no
  // host memory for the record (counted in untracked()).
  void allocated(void const* ptr, std::size_t bytes, int device, interposed_call call) noexcept;
  // A free the program made of `ptr` (nothing for a pointer not recorded).
  void freed(void const* ptr) noexcept;
  // A device reset freed everything on `device`.
  void forget_device(int device) noexcept;
  // Every block still allocated, in no particular order.
  [[nodiscard]] std::vector<live_block> snapshot() const;
  // Allocations that could not be recorded (no host memory).
  [[nodiscard]] std::uint64_t untracked() const noexcept;

  // The steady clock the records use, in ns.
  [[nodiscard]] static std::int64_t now_ns() noexcept;

 private:
  mutable std::mutex mutex_;
  std::unordered_map<std::uintptr_t, live_block> blocks_;
  std::uint64_t untracked_ = 0;
};

}  // namespace asyncshim::shim
