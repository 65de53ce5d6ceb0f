// The shim's last exit handler: the event log's final lines and the leak
// report. Registered when the library is loaded (no CUDA work: only the
// handler), so that it runs after the exit handlers and static destructors
// the program registers later, as those of its global objects: the frees
// they make are logged, and their blocks are not reported as leaked. The
// statistics keep their own handler, registered after the program's first
// CUDA call so that it runs before the runtime's teardown.
#include "state/event_log.hpp"
#include "state/leak_report.hpp"

#include <cstdlib>

namespace asyncshim::shim {
namespace {

void last_reports()
{
  flush_event_log_at_exit();
  make_leak_report();
}

[[gnu::constructor]] void register_last_reports() { (void)std::atexit(last_reports); }

}  // namespace
}  // namespace asyncshim::shim
