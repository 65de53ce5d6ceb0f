#include "peer_access_changes.hpp"

#include "context_scope.hpp"
#include "driver_binding.hpp"
#include "log.hpp"
#include "peer_access.hpp"
#include "shim_state.hpp"

namespace asyncshim::shim {

void peer_access_changed(CUcontext peer, bool enabled) noexcept
{
  auto const& drv = driver();
  int accessor = -1;
  int owner = -1;
  if (drv.ctx_get_device(&accessor) != CUDA_SUCCESS) { return; }
  {
    context_scope in_peer{peer};
    if (!in_peer.current() || drv.ctx_get_device(&owner) != CUDA_SUCCESS) { return; }
  }
  if (owner == accessor) { return; }
  if (enabled) {
    peer_access().grant(accessor, owner);
  } else {
    peer_access().revoke(accessor, owner);
  }
  shim_state* s = existing_state();
  cuda_async_memory_resource* pool = s != nullptr ? s->pools.existing(owner) : nullptr;
  if (pool == nullptr) { return; }  // applied when the pool is made
  auto const handle = reinterpret_cast<CUmemoryPool>(pool->pool_handle());
  if (CUresult const r = set_pool_access(handle, accessor, enabled); r != CUDA_SUCCESS) {
    log::warn("cannot {} device {}'s access to the pool of device {} (error {}) as peer access was {}",
              enabled ? "grant" : "revoke", accessor, owner, static_cast<int>(r), enabled ? "enabled" : "disabled");
  } else {
    log::debug("device {} {} access to the pool of device {} (peer access {})", accessor,
               enabled ? "has" : "no longer has", owner, enabled ? "enabled" : "disabled");
  }
}

}  // namespace asyncshim::shim
