// What an allocation the pool could not serve does before it fails
// (docs/memory-limit.md#out-of-memory), in every ordering: what the process
// holds but cannot hand out yet is made usable, once, and the pool is asked
// again. In order: the queued frees are issued and the reuse cache gives its
// blocks back to the pool; the streams those frees are on (the shim's and
// the legacy stream; the whole device under stream ordering on per-thread
// streams, where a free may be on any thread's stream) are waited for, as
// native cudaFree would have waited; the pool gives back the memory it holds
// unused, so that the request can be mapped anew rather than fail on pieces
// too small. During a stream capture only the shim's own stream is waited
// for (anything more would break the capture).
#pragma once

#include "state/shim_state.hpp"

#include <cuda.h>

namespace asyncshim::shim {

/// What a device's pool held back before a recovery: blocks kept for reuse,
/// and frees queued behind a fence not yet issued.
struct held_back {
  std::uint64_t cached = 0;
  std::uint64_t queued = 0;
};
[[nodiscard]] held_back held_back_of(shim_state& s, int device) noexcept;

/// Makes what `device`'s pool holds usable again; `own`: the shim's stream
/// there. The caller holds the tracker's access and has the pool's context
/// current.
void recover_for_allocation(shim_state& s, int device, cuda_async_memory_resource& pool, CUstream own,
                            bool during_capture) noexcept;

/// Gives the pool's unused memory back once the work on `stream` (where a
/// block was just given back) has completed.
void trim_pool_after(cuda_async_memory_resource& pool, CUstream stream) noexcept;

/// An allocation that failed out of memory.
struct failed_request {
  interposed_call call;
  void const* caller;  ///< the program's return address, where known (the runtime's entry points)
  std::size_t size;
  int device;
};

/// The warning of an allocation that failed out of memory, with the figures
/// that answer "who holds the memory?": the request, the limit, the pool's
/// reservation and use, what it held back before the recovery, the native
/// blocks, the device's free and total memory. Once per call site (the
/// entry point and the program's return address): a program that retries
/// in a loop is told once.
void report_out_of_memory(shim_state& s, failed_request const& request, cuda_async_memory_resource& pool,
                          held_back before_recovery) noexcept;

}  // namespace asyncshim::shim
