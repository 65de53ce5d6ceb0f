// model.h: the state of the CUDA TEST DOUBLES (see cuda_double.h): configuration,
// devices and their primary contexts, pools, streams, the allocation registry,
// counters and the per-thread context stack.
//
// INTERNAL. This is not CUDA and not an API for tests or programs. The model
// lives in the driver double (libcuda.so.1), which exports what is declared
// CUDA_DOUBLE_INTERNAL below (C++ names in namespace cuda_double, never CUDA
// names) for one user only: the runtime double (libcudart_double.so), so that
// both libraries work on the same devices, allocations, pools and streams. The
// exported CUDA functions of either library never call each other; they share
// code only through this namespace (here and in operations.h), so an interposer sees exactly the CUDA
// calls that the program makes.
#ifndef ASYNCSHIM_TESTS_CUDA_DOUBLE_MODEL_H
#define ASYNCSHIM_TESTS_CUDA_DOUBLE_MODEL_H

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda_double.h"
#include "outcome.h"

// Exported by libcuda.so.1 for libcudart_double.so only (see above).
#define CUDA_DOUBLE_INTERNAL __attribute__((visibility("default")))

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
inline constexpr std::size_t kMaxContextStackDepth = 256;  // per thread

// The environment controls, parsed once (thread-safely) at first use.
struct Config {
  int devices = 1;
  bool no_driver = false;
  std::uint64_t memory = kDefaultMemory;
  bool no_pools = false;
  unsigned pool_handle_types = kDefaultPoolHandleTypes;
};
CUDA_DOUBLE_INTERNAL Config const& config();

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

// What cuda_double_pointer_kind reports.
enum class AllocationKind : int { runtime = 1, pool = 2, driver = 3 };

struct Allocation {
  std::size_t size = 0;
  int device = 0;
  Pool* pool = nullptr;  // set exactly for AllocationKind::pool
  AllocationKind kind = AllocationKind::runtime;
};

// A device's primary context; CUcontext is a pointer to one of these. Contexts
// are never destroyed (not even when the retain count drops to 0).
struct Context {
  int device = 0;
  int retains = 0;  // cuDevicePrimaryCtxRetain - cuDevicePrimaryCtxRelease; guarded by Model::mu
};

struct Device {
  std::uint64_t used = 0;      // bytes in live cudaMalloc / cuMemAlloc allocations
  std::uint64_t reserved = 0;  // sum of reserved over the live pools on this device
  Pool* default_pool = nullptr;
};

// Orders cuGetProcAddress symbol names; lets a map be searched with a C string
// (no allocation). Its own (hidden) type keeps the map's code out of the
// libraries' dynamic symbol tables.
struct NameLess {
  using is_transparent = void;
  bool operator()(std::string const& a, std::string const& b) const { return a < b; }
  bool operator()(std::string const& a, char const* b) const { return a.compare(b) < 0; }
  bool operator()(char const* a, std::string const& b) const { return b.compare(a) > 0; }
};

struct Counters {
  std::atomic<unsigned long long> native_mallocs{0}, native_frees{0}, pool_allocs{0},
      pool_frees{0}, pools_created{0}, pools_destroyed{0}, failed_calls{0}, driver_mallocs{0},
      driver_frees{0};
};

// Everything but the counters, the contexts' device fields and the
// thread-locals is guarded by mu. The class is exported whole (its non-inline
// members are defined in the driver double).
class CUDA_DOUBLE_INTERNAL Model {
 public:
  explicit Model(Config const& config);

  std::mutex mu;
  Counters counters;
  cudaStream_t last_alloc_stream = CUDA_DOUBLE_NO_STREAM;
  cudaStream_t last_free_stream = CUDA_DOUBLE_NO_STREAM;
  std::map<std::string, unsigned long long, NameLess> proc_lookups;  // cuGetProcAddress calls by symbol

  int device_count() const { return static_cast<int>(devices_.size()); }
  bool valid_device(int device) const { return device >= 0 && device < device_count(); }
  Device& device(int d) { return devices_[static_cast<std::size_t>(d)]; }

  // Contexts: one primary context per device, at a fixed address.
  Context* primary_context(int device);        // device must be valid
  Context* find_context(void const* handle);  // nullptr unless a primary context

  // Bytes of the device neither in cudaMalloc/cuMemAlloc allocations nor reserved by a pool.
  std::uint64_t free_bytes(int device);

  // Allocation registry.
  std::map<std::uintptr_t, Allocation> const& allocations() const { return allocations_; }
  Allocation const* find_allocation(void const* p) const;  // exact start only
  // The live allocation containing p (its start or inside), if any.
  std::pair<void*, Allocation const*> allocation_containing(void const* p) const;
  // A range [p, p + count) that starts inside a live allocation ends inside it.
  bool range_ok(void const* p, std::size_t count) const;
  // Accounting plus host memory; Outcome::out_of_memory if either says no.
  // kind: runtime (cudaMalloc) or driver (cuMemAlloc).
  Outcome allocate_native(int device, std::size_t size, AllocationKind kind, void** out);
  Outcome allocate_from_pool(Pool& pool, std::size_t size, void** out);
  // Releases a live allocation (of any kind) found by find_allocation.
  void release(void* p);

  // Pools.
  Pool* find_pool(void const* handle);  // live pools only
  Pool& create_pool(int device, unsigned handle_types, std::uint64_t max_size, bool is_default);
  void destroy_pool(Pool& pool);  // frees whatever is still allocated from it
  void set_reserved(Pool& pool, std::uint64_t reserved);
  void trim_pools(int device);  // the "synchronization event": reserved -> max(used, threshold)
  // attr: a cudaMemPoolAttr (the CUmemPool_attribute values are the same).
  // Outcome::invalid_value for attributes that cannot be set / read.
  static Outcome set_pool_attribute(Pool& pool, int attr, void const* value);
  static Outcome get_pool_attribute(Pool const& pool, int attr, void* value);

  // Streams (cudaStream_t and CUstream are the same type).
  static bool is_special_stream(cudaStream_t s);  // 0, legacy or per-thread
  bool valid_stream(cudaStream_t s) const;
  // The device of a valid stream; the special streams stand for current_device.
  int stream_device(cudaStream_t s, int current_device) const;
  cudaStream_t create_stream(int device, unsigned flags);
  bool destroy_stream(cudaStream_t s);  // false: not a live created stream

 private:
  std::vector<Device> devices_;
  std::vector<Context> contexts_;  // one per device, never resized
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
CUDA_DOUBLE_INTERNAL Model& model();

// cudaErrorInsufficientDriver / cudaErrorNoDevice when the configuration says
// so, else cudaSuccess.
CUDA_DOUBLE_INTERNAL cudaError_t availability();

// The driver's initialization (cuInit, or the runtime double's implicit one).
// initialize() may be called only when availability() is cudaSuccess.
CUDA_DOUBLE_INTERNAL void initialize();
CUDA_DOUBLE_INTERNAL bool initialized();

// Counts one failed call of an exported CUDA function (either library).
CUDA_DOUBLE_INTERNAL void count_failure() noexcept;

// The calling thread's context stack (the driver's per-thread state).
CUDA_DOUBLE_INTERNAL Context* current_context();  // top of the stack, or nullptr
// cuCtxSetCurrent: replaces the top (pushes onto an empty stack); nullptr pops.
CUDA_DOUBLE_INTERNAL void set_current_context(Context* context);
CUDA_DOUBLE_INTERNAL bool push_context(Context* context);  // false: the stack is full
CUDA_DOUBLE_INTERNAL Context* pop_context();               // nullptr: the stack was empty

}  // namespace cuda_double

#endif  // ASYNCSHIM_TESTS_CUDA_DOUBLE_MODEL_H
