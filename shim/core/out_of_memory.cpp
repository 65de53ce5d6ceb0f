#include "core/out_of_memory.hpp"

#include "core/deferred_frees.hpp"
#include "cuda/driver.hpp"

namespace asyncshim::shim {

void recover_for_allocation(shim_state& s, int device, cuda_async_memory_resource& pool, CUstream own,
                            bool during_capture) noexcept
{
  auto const& drv = driver();
  if (!during_capture) {
    issue_queued(s, device);
    (void)return_cached_to_pool(s, device);
  }
  // The frees just issued, the cache's blocks just given back and every free
  // made on another stream come back to the pool once they have completed.
  if (!during_capture && drv.ctx_synchronize != nullptr) {
    (void)drv.ctx_synchronize();
  } else if (drv.stream_synchronize != nullptr) {
    (void)drv.stream_synchronize(own);
  }
  forget_completed_batches(s, device);
  if (drv.mem_pool_trim_to != nullptr) {
    (void)drv.mem_pool_trim_to(reinterpret_cast<CUmemoryPool>(pool.pool_handle()), 0);
  }
}

}  // namespace asyncshim::shim
