#include "core/metrics_file.hpp"

#include "core/memory_release.hpp"
#include "state/metrics_text.hpp"
#include "state/stream_tracker.hpp"
#include "support/fork_quiet.hpp"
#include "support/log.hpp"
#include "support/own_file.hpp"

#include <errno.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <span>
#include <string>

namespace asyncshim::shim {
namespace {

// The process's name as ps shows it (/proc/self/comm).
std::string program_name()
{
  std::ifstream comm{"/proc/self/comm"};
  std::string name;
  std::getline(comm, name);
  return name;
}

std::atomic<long> written_by{0};  // the process that wrote the file, for its removal
std::atomic<bool> said{false};

void say_once(std::string const& path, std::string const& why) noexcept
{
  if (said.exchange(true)) { return; }
  log::warn("cannot write the metrics file {} ({}): the program runs on without it", path, why);
}

}  // namespace

void write_metrics_file(shim_state& s) noexcept
{
  long const pid = static_cast<long>(getpid());
  // The pools' figures are CUDA calls, made first, into memory of the stack
  // (support/fork_quiet.hpp: no CUDA call in a section, no host allocation
  // outside one).
  std::array<metrics_device, max_devices> figures{};
  std::size_t count = 0;
  {
    auto access = tracker().access();  // no device reset destroys a pool meanwhile
    for (int device = 0; device < max_devices; ++device) {
      cuda_async_memory_resource const* pool = s.pools.existing(device);
      std::uint64_t const limit = s.limits.limit(device).value_or(0);
      if (pool == nullptr && limit == 0) { continue; }
      figures[count++] = {device, pool != nullptr ? usage_of(*pool).reserved : 0, limit};
    }
  }
  std::string path;
  std::string text;
  std::string temporary;
  try {
    background_work quiet;
    path = expand_stats_path(s.settings.metrics_file, pid);
    text = metrics_text(s.all_stats, std::span<metrics_device const>{figures.data(), count}, pid, program_name());
    temporary = path + "." + std::to_string(pid) + ".tmp";
  } catch (...) {  // no host memory for the text
    say_once(s.settings.metrics_file, "no host memory");
    return;
  }
  // The disk after the section: a fork waits for no disk.
  {
    written_file const file = write_own_file(temporary, text);
    if (!file.opened || !file.why.empty()) {
      if (file.opened) { (void)unlink(temporary.c_str()); }  // opened, then not written whole
      say_once(path, file.why + (file.by_rule ? std::string("; ") + own_file_rule : std::string()));
      return;
    }
    if (std::rename(temporary.c_str(), path.c_str()) != 0) {
      int const error = errno;
      (void)unlink(temporary.c_str());
      say_once(path, std::strerror(error));
      return;
    }
    written_by.store(pid, std::memory_order_release);
  }
}

void remove_metrics_file(shim_state& s) noexcept
{
  long const pid = static_cast<long>(getpid());
  if (written_by.load(std::memory_order_acquire) != pid) { return; }  // none, or the parent's
  try {
    std::string const path = expand_stats_path(s.settings.metrics_file, pid);
    (void)unlink(path.c_str());
  } catch (...) {
  }
}

}  // namespace asyncshim::shim
