// What the process was told when an allocation failed out of memory
// (core/out_of_memory.hpp), kept whole for the statistics file: the first
// reports, one per failing call site, at most `kept_reports` of them.
#pragma once

#include "state/statistics.hpp"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace asyncshim::shim {

struct out_of_memory_report {
  interposed_call call = interposed_call::malloc;
  std::size_t bytes = 0;
  int device = 0;
  std::optional<std::uint64_t> limit;  ///< ASYNCSHIM_MEMORY_LIMIT's, where one is set
  std::uint64_t pool_reserved = 0;
  std::uint64_t pool_used = 0;
  std::uint64_t cached = 0;  ///< given back by the reuse cache before the retry
  std::uint64_t queued = 0;  ///< queued frees issued before the retry
  std::uint64_t native = 0;  ///< counted blocks of the native allocator
  std::uint64_t device_free = 0;
  std::uint64_t device_total = 0;
  struct block {
    std::size_t bytes = 0;
    std::uintptr_t address = 0;
    char const* entry_point = "";     ///< the call that allocated it
    std::vector<std::string> frames;  ///< where it was allocated, innermost first
  };
  std::vector<block> largest_blocks;  ///< under ASYNCSHIM_LEAK_STACK_DEPTH only
  struct process {
    unsigned pid = 0;
    std::string name;                    ///< empty where this process cannot see it
    std::optional<std::uint64_t> bytes;  ///< none where the driver cannot say
    bool this_process = false;
  };
  /// The processes using the device, as the driver's NVML library sees them;
  /// none where it cannot tell.
  std::optional<std::vector<process>> processes;
};

class out_of_memory_reports {
 public:
  static constexpr std::size_t kept_reports = 16;
  void add(out_of_memory_report report);
  [[nodiscard]] std::vector<out_of_memory_report> all() const;

 private:
  mutable std::mutex mutex_;
  std::vector<out_of_memory_report> reports_;
};

/// The reports as a JSON array.
[[nodiscard]] std::string out_of_memory_reports_json(std::vector<out_of_memory_report> const& reports);

}  // namespace asyncshim::shim
