#include "cuda/api_level.hpp"

namespace asyncshim::shim {
namespace {
// Read twice per intercepted call: initial-exec, so the access is one load
// at a fixed offset from the thread pointer instead of a __tls_get_addr call
// (the library is preloaded, so its TLS is in the static block).
// Zero-initialized: no constructor runs.
__attribute__((tls_model("initial-exec"))) thread_local api_level current = api_level::none;
}  // namespace

api_level current_api_level() noexcept { return current; }

api_level_scope::api_level_scope(api_level level) noexcept : previous_{current} { current = level; }

api_level_scope::~api_level_scope() { current = previous_; }

}  // namespace asyncshim::shim
