// model.h: internal state of the CUDA runtime TEST DOUBLE (see cuda_double.h):
// configuration, devices, pools, streams, the allocation registry, counters and
// the per-thread current device and last error. Not part of the exported API.
#ifndef ASYNCSHIM_TESTS_CUDA_DOUBLE_MODEL_H
#define ASYNCSHIM_TESTS_CUDA_DOUBLE_MODEL_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_set>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda_double.h"

namespace cuda_double {

inline constexpr std::uint64_t kDefaultMemory = 8ULL << 30;  // 8 GiB per device
inline constexpr unsigned kDefaultPoolHandleTypes =
    cudaMemHandleTypePosixFileDescriptor | cudaMemHandleTypeFabric;  // 9, as on an H200
inline constexpr std::uint64_t kPoolGranularity = 2ULL << 20;      // pools grow in 2 MiB steps
inline constexpr std::size_t kAllocationAlignment = 256;           // like cudaMalloc
inline constexpr int kMaxDevices = 1024;
inline constexpr int kDriverVersion = 13000;
inline constexpr int kRuntimeVersion = 13000;
inline constexpr int kComputeCapabilityMajor = 9;  // an H200
inline constexpr int kComputeCapabilityMinor = 0;

// The environment controls, parsed once (thread-safely) at first use.
struct Config {
  int devices = 1;
  bool no_driver = false;
  std::uint64_t memory = kDefaultMemory;
  bool no_pools = false;
  unsigned pool_handle_types = kDefaultPoolHandleTypes;
};
Config const& config();

struct Pool {
  int device = 0;
  unsigned handle_types = 0;
  std::uint64_t max_size = 0;  // 0: no limit but the device's memory
  bool is_default = false;
  bool alive = true;
  std::uint64_t reserved = 0;
  std::uint64_t used = 0;
  std::uint64_t reserved_high = 0;
  std::uint64_t used_high = 0;
  std::uint64_t release_threshold = 0;
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;
};

struct Stream {
  int device = 0;
  unsigned flags = 0;
};

struct Allocation {
  std::size_t size = 0;
  int device = 0;
  Pool* pool = nullptr;  // nullptr: from cudaMalloc
};

struct Device {
  std::uint64_t used = 0;      // bytes in live cudaMalloc allocations
  std::uint64_t reserved = 0;  // sum of reserved over the live pools on this device
  Pool* default_pool = nullptr;
};

struct Counters {
  std::atomic<unsigned long long> native_mallocs{0}, native_frees{0}, pool_allocs{0},
      pool_frees{0}, pools_created{0}, pools_destroyed{0}, failed_calls{0};
};

// Everything but the counters and the thread-locals is guarded by mu.
class Model {
 public:
  explicit Model(Config const& config);

  std::mutex mu;
  Counters counters;
  cudaStream_t last_alloc_stream = CUDA_DOUBLE_NO_STREAM;
  cudaStream_t last_free_stream = CUDA_DOUBLE_NO_STREAM;

  int device_count() const { return static_cast<int>(devices_.size()); }
  bool valid_device(int device) const { return device >= 0 && device < device_count(); }
  Device& device(int d) { return devices_[static_cast<std::size_t>(d)]; }

  // Bytes of the device neither in cudaMalloc allocations nor reserved by a pool.
  std::uint64_t free_bytes(int device);

  // Allocation registry.
  std::map<std::uintptr_t, Allocation> const& allocations() const { return allocations_; }
  Allocation const* find_allocation(void const* p) const;  // exact start only
  // The live allocation containing p (its start or inside), if any.
  std::pair<void*, Allocation const*> allocation_containing(void const* p) const;
  // Accounting plus host memory; cudaErrorMemoryAllocation if either says no.
  cudaError_t allocate_native(int device, std::size_t size, void** out);
  cudaError_t allocate_from_pool(Pool& pool, std::size_t size, void** out);
  // Releases a live allocation (native or pool) found by find_allocation.
  void release(void* p);

  // Pools.
  Pool* find_pool(cudaMemPool_t handle);  // live pools only
  Pool& create_pool(int device, unsigned handle_types, std::uint64_t max_size, bool is_default);
  void destroy_pool(Pool& pool);  // frees whatever is still allocated from it
  void set_reserved(Pool& pool, std::uint64_t reserved);
  void trim_pools(int device);  // the "synchronization event": reserved -> max(used, threshold)

  // Streams.
  static bool is_special_stream(cudaStream_t s);
  bool valid_stream(cudaStream_t s) const;
  int stream_device(cudaStream_t s) const;  // s must be valid
  cudaStream_t create_stream(int device, unsigned flags);
  bool destroy_stream(cudaStream_t s);  // false: not a live created stream

 private:
  std::vector<Device> devices_;
  std::map<std::uintptr_t, Allocation> allocations_;
  std::unordered_set<Pool*> live_pools_;
  std::unordered_set<Stream*> live_streams_;
  // Every pool and stream ever created, destroyed ones included: their memory
  // is never reused, so a stale handle can never alias a newer object.
  std::vector<std::unique_ptr<Pool>> all_pools_;
  std::vector<std::unique_ptr<Stream>> all_streams_;

  void* host_allocate(std::size_t size);
  void insert_allocation(void* p, Allocation const& a);
};

// The process-wide model; built at first use and never destroyed, so that calls
// made from other libraries' static destructors or atexit handlers still work.
Model& model();

// Per-thread state.
int& current_device();
cudaError_t& last_error();

// cudaErrorInsufficientDriver / cudaErrorNoDevice when the configuration says
// so, else cudaSuccess.
cudaError_t availability();

// Records a failing result as the calling thread's last error and counts it.
cudaError_t record(cudaError_t result);

// Runs body (a callable returning cudaError_t), turning exceptions into CUDA
// errors, and records the result. gated: fail first when no driver / no device.
template <class Body>
cudaError_t run_api(bool gated, Body&& body) noexcept {
  cudaError_t result;
  try {
    result = gated ? availability() : cudaSuccess;
    if (result == cudaSuccess) result = body();
  } catch (std::bad_alloc const&) {
    result = cudaErrorMemoryAllocation;
  } catch (...) {
    result = cudaErrorUnknown;
  }
  return record(result);
}

}  // namespace cuda_double

#endif  // ASYNCSHIM_TESTS_CUDA_DOUBLE_MODEL_H
