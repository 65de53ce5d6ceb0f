// Which devices the program has given access to which other device's memory
// (cudaDeviceEnablePeerAccess / cuCtxEnablePeerAccess, followed at the driver
// level). Native cudaMalloc memory follows peer access by itself; pool memory
// does not, so the shim grants each accessor access to the owner's pool
// (cuMemPoolSetAccess), for pools that exist at the call and for pools made
// later (device_pools applies the grants when it makes one).
#pragma once

#include "support/device_limit.hpp"

#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>

namespace asyncshim::shim {

class peer_access_map {
 public:
  static constexpr int max_devices = shim::max_devices;

  /// `accessor` may (no longer) access memory of `owner`.
  /// @{
  void grant(int accessor, int owner) noexcept;
  void revoke(int accessor, int owner) noexcept;
  /// @}
  /// A device reset drops the peer access from and to the device.
  void forget(int device) noexcept;
  /// The devices that may access memory of `owner`, one bit each.
  [[nodiscard]] std::uint64_t accessors_of(int owner) const noexcept;

 private:
  /// Sequentially consistent: a grant racing with the creation of the
  /// owner's pool is applied by one of the two (state/device_pools.cpp).
  std::array<std::atomic<std::uint64_t>, max_devices> accessors_{};
};

/// The process's map (constant-initialized, never destroyed).
[[nodiscard]] peer_access_map& peer_access() noexcept;

/// Gives `accessor` read-write access to `pool` (or takes it away), as the
/// driver's cuMemPoolSetAccess does; never for the pool's own device.
CUresult set_pool_access(CUmemoryPool pool, int accessor, bool allowed) noexcept;

}  // namespace asyncshim::shim
