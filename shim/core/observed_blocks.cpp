#include "core/observed_blocks.hpp"

#include "state/event_log.hpp"
#include "state/leak_report.hpp"
#include "state/statistics.hpp"

#include <utility>

namespace asyncshim::shim {

void arm_exit_reports(shim_state& s) noexcept
{
  if (s.stats != nullptr) { report_at_exit(s.sources); }
  if (s.leaks != nullptr && s.settings.wants_leak_report()) { arm_leak_report(s.settings, *s.leaks); }
}

void note_allocated(shim_state& s, void const* ptr, std::size_t bytes, int device, char const* entry_point,
                    logged_as how) noexcept
{
  if (s.leaks != nullptr) { s.leaks->allocated(ptr, bytes, device, entry_point); }
  if (s.events != nullptr) { log_event(*s.events, event_action::allocate, ptr, bytes, how.stream, how.memory); }
}

std::optional<live_block> note_freeing(shim_state& s, void const* ptr, std::size_t bytes, logged_as how) noexcept
{
  if (s.events != nullptr) { log_event(*s.events, event_action::free, ptr, bytes, how.stream, how.memory); }
  return s.leaks != nullptr ? s.leaks->take(ptr) : std::nullopt;
}

void note_free_failed(shim_state& s, void const* ptr, std::size_t bytes, std::optional<live_block>&& live,
                      logged_as how) noexcept
{
  if (s.events != nullptr) { log_event(*s.events, event_action::allocate, ptr, bytes, how.stream, how.memory); }
  if (s.leaks != nullptr && live) { s.leaks->restore(std::move(*live)); }
}

}  // namespace asyncshim::shim
