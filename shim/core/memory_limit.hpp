// ASYNCSHIM_MEMORY_LIMIT on the allocation paths (docs/memory-limit.md): a
// device's limit bounds its pool's reservation (the pool's own maxSize) plus
// the blocks the shim passes to the native allocator, counted here; beyond
// it an allocation fails as a native out-of-memory does, and memory info
// reports the limit as the total.
#pragma once

#include "state/shim_state.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace asyncshim::shim {

/// The limit of `device`, the current device, resolved from its total memory
/// on the first ask; 0: none (or not known yet: no context to ask).
[[nodiscard]] std::uint64_t memory_limit_of(shim_state& s, int device) noexcept;

/// The native calls of one API level.
struct native_calls {
  cudaError_t (*malloc)(void** ptr, std::size_t size);
  cudaError_t (*free)(void* ptr);
};

/// A native allocation of `size` bytes on `device` (current) inside its
/// limit, counted until native_block_freed(); beyond the limit it fails as a
/// native out-of-memory does (native_out_of_memory).
[[nodiscard]] cudaError_t native_allocation_within_limit(shim_state& s, native_calls const& native, int device,
                                                         void** dev_ptr, std::size_t size) noexcept;
/// The native free of `ptr` succeeded: a block counted against a limit is not any more.
void native_block_freed(shim_state& s, void const* ptr) noexcept;
/// Whether `device`'s pool reservation plus its native blocks fit its limit
/// (after a pool allocation, while native blocks are counted there too).
[[nodiscard]] bool pool_within_limit(shim_state& s, int device, cuda_async_memory_resource const& pool) noexcept;
/// The error a native out-of-memory gives, left as the native call leaves it
/// (the runtime's last error): a request no device can serve is made.
[[nodiscard]] cudaError_t native_out_of_memory(native_calls const& native) noexcept;

/// What memory info reports inside `device`'s limit: `total` becomes the
/// limit where it is smaller, and `free` what the limit leaves (`used`: the
/// pool's reservation and the native blocks; `reusable`: what the pool holds
/// for the program) where that is less than the device has.
void apply_limit_to_memory_info(std::uint64_t limit, std::uint64_t used, std::uint64_t reusable, std::size_t& free,
                                std::size_t& total) noexcept;

}  // namespace asyncshim::shim
