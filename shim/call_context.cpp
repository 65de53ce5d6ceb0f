#include "call_context.hpp"

namespace asyncshim::shim {
namespace {
thread_local api_level current = api_level::none;  // zero-initialized: no constructor runs
}  // namespace

api_level current_api_level() noexcept { return current; }

api_level_scope::api_level_scope(api_level level) noexcept : previous_{current} { current = level; }

api_level_scope::~api_level_scope() { current = previous_; }

}  // namespace asyncshim::shim
