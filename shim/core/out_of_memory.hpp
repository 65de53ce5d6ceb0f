// What an allocation the pool could not serve does before it fails
// (docs/memory-limit.md#out-of-memory), in every ordering: what the process
// holds but cannot hand out yet is made usable, once, and the pool is asked
// again. In order: the queued frees are issued and the reuse cache gives its
// blocks back to the pool; the device is waited for, so that every free on
// any stream has completed (as native cudaFree would have waited); the pool
// gives back the memory it holds unused, so that the request can be mapped
// anew rather than fail on pieces too small. During a stream capture the
// device is not waited for (that would break the capture): only the shim's
// own stream.
#pragma once

#include "state/shim_state.hpp"

#include <cuda.h>

namespace asyncshim::shim {

/// Makes what `device`'s pool holds usable again; `own`: the shim's stream
/// there. The caller holds the tracker's access and has the pool's context
/// current.
void recover_for_allocation(shim_state& s, int device, cuda_async_memory_resource& pool, CUstream own,
                            bool during_capture) noexcept;

}  // namespace asyncshim::shim
