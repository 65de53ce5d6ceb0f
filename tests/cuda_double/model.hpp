// model.hpp: the state of the CUDA TEST DOUBLES (see cuda_double.hpp): configuration,
// devices and their primary contexts, pools, streams, events, stream captures
// and the graphs they end in, the allocation registry, counters and the
// per-thread state (context stack, capture mode).
//
// INTERNAL. This is not CUDA and not an API for tests or programs. The model
// lives in the driver double (libcuda.so.1), which exports what is declared
// CUDA_DOUBLE_INTERNAL below (C++ names in namespace cuda_double, never CUDA
// names) for one user only: the runtime double (libcudart_double.so), so that
// both libraries work on the same devices, allocations, pools and streams. The
// exported CUDA functions of either library never call each other by name;
// they share code through this namespace (here and in operations.hpp), and the
// runtime double reaches the driver's stream, event, capture, synchronization,
// reset, peer access, pool access, export and IPC functions only through
// pointers it fetched with
// cuGetProcAddress_v2 (as the real runtime does), so an interposer sees
// exactly the CUDA calls that the program and the real runtime would make.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include <cuda_runtime_api.h>

#include "cuda_double.hpp"
#include "outcome.hpp"
#include "virtual_gpu.hpp"

// Exported by libcuda.so.1 for libcudart_double.so only (see above).
#define CUDA_DOUBLE_INTERNAL __attribute__((visibility("default")))

namespace cuda_double {

inline constexpr std::uint64_t default_memory = 8ULL << 30;  // 8 GiB per device
inline constexpr unsigned default_pool_handle_types =
  cudaMemHandleTypePosixFileDescriptor | cudaMemHandleTypeFabric;  // 9, as on an H200
inline constexpr std::uint64_t pool_granularity = 2ULL << 20;      // pools grow in 2 MiB steps
// Every block's base (CUDA promises 256 bytes; 512 is what the GPUs give, and
// what the texture alignment asks of a pitched block's base).
inline constexpr std::size_t allocation_alignment = 512;
inline constexpr int max_devices = 1024;
inline constexpr int host_device = -1;  // the `device` of a pool in host memory
inline constexpr int driver_version = 13000;
// The driver's version under CUDA_DOUBLE_NEWER_ABI: one newer than the headers.
inline constexpr int newer_driver_version = 13010;
inline constexpr int runtime_version = 13000;
inline constexpr int compute_capability_major = 9;  // an H200
inline constexpr int compute_capability_minor = 0;
inline constexpr std::size_t max_context_stack_depth = 256;  // per thread
// Stream priorities (lower is higher), as cuCtxGetStreamPriorityRange reports
// on an H200; others are clamped into the range.
inline constexpr int least_stream_priority = 0;
inline constexpr int greatest_stream_priority = -5;
// Capture modes and statuses: CUstreamCaptureMode / cudaStreamCaptureMode and
// CUstreamCaptureStatus / cudaStreamCaptureStatus (same values in both APIs).
inline constexpr int capture_mode_global = 0;
inline constexpr int capture_mode_thread_local = 1;
inline constexpr int capture_mode_relaxed = 2;
inline constexpr int capture_status_none = 0;
inline constexpr int capture_status_active = 1;
inline constexpr int capture_status_invalidated = 2;

// The environment controls, parsed once (thread-safely) at first use.
struct configuration {
  int devices = 1;
  bool no_driver = false;
  std::uint64_t memory = default_memory;
  bool no_pools = false;
  bool no_pool_max_size = false;  // CUDA_DOUBLE_NO_POOL_MAX_SIZE: a pool with a maxSize is refused (older drivers)
  unsigned pool_handle_types = default_pool_handle_types;
  bool no_peer = false;                      // CUDA_DOUBLE_NO_PEER: no pair of devices can access each other
  bool fabric_ok = false;                    // CUDA_DOUBLE_FABRIC_OK: fabric handles can be exported (IMEX)
  std::string shared_memory;                 // CUDA_DOUBLE_SHARED_MEMORY: the file the processes of one "GPU" share
  std::vector<std::string> newer_abis;       // CUDA_DOUBLE_NEWER_ABI: names with an ABI newer than the headers
  bool runtime_private_submissions = false;  // CUDA_DOUBLE_RUNTIME_PRIVATE_SUBMISSIONS
  bool simulate = false;                     // CUDA_DOUBLE_SIMULATE: the virtual GPU runs, with this seed
  std::uint64_t simulate_seed = 0;
  bool simulate_lazy = false;  // CUDA_DOUBLE_SIMULATE_LAZY: work runs only when a synchronization waits for it
  // CUDA_DOUBLE_TEXTURE_ALIGNMENT: the device's texture alignment, which the
  // double's pitched allocations round their rows up to (its native rule).
  std::size_t texture_alignment = 512;
  std::size_t max_pitch = 2147483647;  // the largest pitch (the attribute's value on NVIDIA GPUs)
  bool tight_pool = false;
  bool no_host_pools = false;  // CUDA_DOUBLE_NO_HOST_POOLS: pools in host memory are not supported (before CUDA 12.6)
                               // // CUDA_DOUBLE_TIGHT_POOL: a kept block's bytes serve only its own size until trimmed
};
CUDA_DOUBLE_INTERNAL configuration const& config();

// What cuDriverGetVersion and cudaDriverGetVersion report.
inline int reported_driver_version() { return config().newer_abis.empty() ? driver_version : newer_driver_version; }

// How a device may access a pool's memory: CUmemAccess_flags /
// cudaMemAccessFlags values (the same in both APIs). The standard library
// code instantiated over the model's types is kept out of the dynamic symbol
// tables by the libraries' version scripts (cuda_driver_double.map).
enum class access_level : unsigned char { none = 0, read = 1, read_write = 3 };

// Where the bytes of a pool that can be shared with other processes live
// (pools created with the POSIX file descriptor handle type, and the pools
// imported from them): one memfd per pool, the size of the device's memory
// (sparse: only the pages written cost memory), mapped once, shared, so that
// another process that maps the same file sees the same bytes. Plain data:
// model_state creates and closes it (create_pool, import_pool, destroy_pool).
struct arena_state {
  int fd = -1;           // the memfd (close-on-exec); -1 in an imported pool (its mapping keeps the file)
  char* base = nullptr;  // the mapping; nullptr: the pool has no arena (host memory per allocation)
  std::uint64_t size = 0;
  std::uint64_t file_device = 0;  // st_dev and st_ino of the memfd: what export data names
  std::uint64_t file_inode = 0;
  // The free ranges, offset -> length, coalesced (the exporting pool's only;
  // an imported pool allocates nothing).
  std::map<std::uint64_t, std::uint64_t> free;
};

struct pool_state {
  std::uint64_t id = 0;  // 1, 2, ... in order of creation, never reused
  int device = 0;        // host_device for a pool in host memory
  bool on_host = false;  // in pinned host memory (location type host): no device's, no device's access until set
  unsigned handle_types = 0;
  std::uint64_t max_size = 0;  // 0: no limit but the device's memory
  bool is_default = false;
  bool alive = true;
  // cuMemPoolExportToShareableHandle gave out a POSIX file descriptor: export
  // data made from now on can be imported.
  bool exported = false;
  bool imported = false;  // made by cuMemPoolImportFromShareableHandle
  arena_state arena;
  std::uint64_t reserved = 0;
  std::uint64_t used = 0;
  std::uint64_t kept = 0;  // CUDA_DOUBLE_TIGHT_POOL: bytes of the kept blocks, unusable for other sizes
  std::uint64_t reserved_high = 0;
  std::uint64_t used_high = 0;
  std::uint64_t release_threshold = 0;
  int reuse_follow_event_dependencies = 1;
  int reuse_allow_opportunistic = 1;
  int reuse_allow_internal_dependencies = 1;
  // The access of the other devices, by ordinal (missing entries: none); the
  // pool's own device always has read_write (cuMemPoolSetAccess).
  std::vector<access_level> access;
};

struct stream_state {
  int device = 0;
  int domain = 0;  // the virtual GPU's legacy stream it synchronizes with: its context's (context_state::domain)
  unsigned flags = 0;
  int priority = 0;
  std::uint64_t capture = 0;     // id of its ongoing capture, 0 if none
  bool busy = false;             // a query says work is in progress (cuda_double_set_stream_busy)
  std::uint64_t busy_epoch = 0;  // how many times it was marked busy
};

// A device pointer as a key (a type of its own, so that it cannot be mixed up
// with other integers).
enum class device_address : std::uintptr_t {};
inline device_address address_of(void const* p)
{
  return static_cast<device_address>(reinterpret_cast<std::uintptr_t>(p));
}

// An ongoing stream capture (from cuStreamBeginCapture_v2 until
// cuStreamEndCapture, or until its stream or device goes away).
struct capture_state {
  std::uint64_t id = 0;  // never 0, never reused
  int device = 0;
  stream_state* stream = nullptr;  // nullptr: the per-thread default stream of (thread, device)
  std::uint64_t thread = 0;        // thread_token() of the thread that began it
  int mode = capture_mode_global;
  bool blocking = true;  // its stream synchronizes with the legacy stream
  bool invalidated = false;
  std::uint64_t nodes = 0;         // operations captured
  std::set<device_address> freed;  // pointers freed by captured frees
  // The memory its captured launches of cuda_double_touch_kernel touch.
  std::vector<std::pair<void const*, std::size_t>> touched;
};

struct event_state {
  int device = 0;
  unsigned flags = 0;
  std::uint64_t captured_in = 0;  // the capture it was last recorded in; 0: recorded outside (or never)
  // The stream it was last recorded on while that was marked busy
  // (cuda_double_set_stream_busy): a query says not ready while it still is.
  stream_state const* recorded_on_busy = nullptr;
  std::uint64_t busy_epoch = 0;  // the stream's busy_epoch then: only that busy spell holds it up
  std::uint64_t sim_record = 0;  // the virtual GPU's task of its last record (0: none)
};

// What cuStreamEndCapture hands out. Allocations captured in its capture
// (tagged with capture) live until the graph is destroyed.
// An executable graph (cuGraphInstantiateWithFlags) is one too, with no
// capture of its own: its launch is one task touching what its graph's
// captured launches touch.
struct graph_state {
  std::uint64_t capture = 0;
  std::vector<char> nodes;  // one byte per node; the CUgraphNode tokens are their addresses
  std::vector<std::pair<void const*, std::size_t>> touched;
  bool executable = false;
};

// What cuda_double_pointer_kind reports. imported: cuMemPoolImportPointer's
// (bytes of another pool's arena, never counted in the device's memory).
// host: pinned host memory (cudaMallocHost, cudaHostAlloc, cuMemAllocHost_v2, cuMemHostAlloc).
enum class allocation_kind : int { runtime = 1, pool = 2, driver = 3, imported = 4, host = 5 };

struct allocation_record {
  std::size_t size = 0;
  int device = 0;
  pool_state* pool = nullptr;  // set exactly for allocation_kind::pool and ::imported (the imported pool)
  allocation_kind kind = allocation_kind::runtime;
  std::uint64_t capture = 0;  // the capture that allocated it (a graph's memory); 0: none
  std::uint64_t serial = 0;   // 1, 2, ... in order of allocation, never reused (even for a reused address)
  unsigned host_flags = 0;    // allocation_kind::host: the cudaHostAlloc flags it was made with
};

// A context; CUcontext is a pointer to one of these. Primary contexts are
// never destroyed (not even when the retain count drops to 0); a context made
// with cuCtxCreate is marked destroyed by cuCtxDestroy, its address kept.
struct context_state {
  int device = 0;
  // The virtual GPU's device for its legacy, per-thread and blocking
  // streams: the device for a primary context, a number of its own for a
  // context made with cuCtxCreate (whose legacy stream is its own).
  int domain = 0;
  int retains = 0;         // cuDevicePrimaryCtxRetain - cuDevicePrimaryCtxRelease; guarded by model_state::mu
  bool destroyed = false;  // cuCtxDestroy'ed (a made context only); guarded by made_contexts_mu_
  std::set<context_state const*>
    peers;  // contexts whose memory it may access (cuCtxEnablePeerAccess); guarded by model_state::mu
};

struct device_state {
  std::uint64_t used = 0;      // bytes in live cudaMalloc / cuMemAlloc allocations
  std::uint64_t reserved = 0;  // sum of reserved over the live pools on this device
  pool_state* default_pool = nullptr;
};

// Orders cuGetProcAddress symbol names; lets a map be searched with a C string
// (no allocation).
struct name_less {
  using is_transparent = void;
  bool operator()(std::string const& a, std::string const& b) const { return a < b; }
  bool operator()(std::string const& a, char const* b) const { return a.compare(b) < 0; }
  bool operator()(char const* a, std::string const& b) const { return b.compare(a) > 0; }
};

// In the order of struct cuda_double_counters; all() lists every one of them.
struct counter_set {
  std::atomic<unsigned long long> native_mallocs{0}, native_frees{0}, pool_allocs{0}, pool_frees{0}, pools_created{0},
    pools_destroyed{0}, failed_calls{0}, driver_mallocs{0}, driver_frees{0}, streams_created{0}, streams_destroyed{0},
    events_recorded{0}, stream_waits{0}, context_synchronizes{0}, stream_synchronizes{0}, captures_begun{0},
    captures_invalidated{0}, captured_operations{0}, primary_context_resets{0}, free_async_legacy_stream{0},
    free_async_per_thread_stream{0}, free_async_blocking_stream{0}, free_async_non_blocking_stream{0},
    peer_access_enables{0}, peer_access_disables{0}, pool_access_sets{0}, pool_access_owner_entries{0},
    pool_handle_exports{0}, pool_pointer_exports{0}, ipc_mem_handles{0}, pool_handle_imports{0},
    pool_pointer_imports{0}, ipc_mem_opens{0}, ipc_mem_closes{0}, runtime_device_queries{0}, pitched_mallocs{0},
    host_mallocs{0}, host_frees{0};
  static constexpr std::size_t counter_count = 38;
  std::array<std::atomic<unsigned long long>*, counter_count> all()
  {
    return {&native_mallocs,
            &native_frees,
            &pool_allocs,
            &pool_frees,
            &pools_created,
            &pools_destroyed,
            &failed_calls,
            &driver_mallocs,
            &driver_frees,
            &streams_created,
            &streams_destroyed,
            &events_recorded,
            &stream_waits,
            &context_synchronizes,
            &stream_synchronizes,
            &captures_begun,
            &captures_invalidated,
            &captured_operations,
            &primary_context_resets,
            &free_async_legacy_stream,
            &free_async_per_thread_stream,
            &free_async_blocking_stream,
            &free_async_non_blocking_stream,
            &peer_access_enables,
            &peer_access_disables,
            &pool_access_sets,
            &pool_access_owner_entries,
            &pool_handle_exports,
            &pool_pointer_exports,
            &ipc_mem_handles,
            &pool_handle_imports,
            &pool_pointer_imports,
            &ipc_mem_opens,
            &ipc_mem_closes,
            &runtime_device_queries,
            &pitched_mallocs,
            &host_mallocs,
            &host_frees};
  }
};
static_assert(sizeof(cuda_double_counters) == counter_set::counter_count * sizeof(unsigned long long));

// Everything but the counters, the contexts' device fields and the
// thread-locals is guarded by mu. The class is exported whole (its non-inline
// members are defined in the driver double).
class CUDA_DOUBLE_INTERNAL model_state {
 public:
  explicit model_state(configuration const& config);

  std::mutex mu;
  counter_set counters;
  virtual_gpu gpu;  // on with CUDA_DOUBLE_SIMULATE
  cudaStream_t last_alloc_stream = CUDA_DOUBLE_NO_STREAM;
  cudaStream_t last_free_stream = CUDA_DOUBLE_NO_STREAM;
  cudaStream_t last_wait_stream = CUDA_DOUBLE_NO_STREAM;
  cudaStream_t last_record_stream = CUDA_DOUBLE_NO_STREAM;
  // In what order the last free, wait and record came (cuda_double_last_serial).
  std::uint64_t serial = 0;
  std::uint64_t last_free_serial = 0;
  std::uint64_t last_wait_serial = 0;
  std::uint64_t last_record_serial = 0;
  std::vector<cuda_double_stream_op> stream_ops;  // cuda_double_stream_ops
  static constexpr std::size_t most_stream_ops = 4096;
  void note_stream_op(int call, cudaEvent_t event, cudaStream_t stream)
  {
    if (stream_ops.size() < most_stream_ops) { stream_ops.push_back({call, event, stream}); }
  }
  std::map<std::string, unsigned long long, name_less> proc_lookups;  // cuGetProcAddress calls by symbol

  int device_count() const { return static_cast<int>(devices_.size()); }
  bool valid_device(int device) const { return device >= 0 && device < device_count(); }
  device_state& device(int d) { return devices_[static_cast<std::size_t>(d)]; }

  // Contexts: one primary context per device, at a fixed address.
  context_state* primary_context(int device);       // device must be valid
  context_state* find_context(void const* handle);  // nullptr unless a primary or made, live context
  context_state* create_context(int device);        // cuCtxCreate
  // cuCtxDestroy of a made context: false for a primary one or one unknown.
  bool destroy_context(context_state* context);

  // Bytes of the device neither in cudaMalloc/cuMemAlloc allocations nor
  // reserved by a pool, of this process or (CUDA_DOUBLE_SHARED_MEMORY) of the
  // other live processes sharing the devices.
  std::uint64_t free_bytes(int device);

  // Allocation registry.
  std::map<std::uintptr_t, allocation_record> const& allocations() const { return allocations_; }
  allocation_record const* find_allocation(void const* p) const;  // exact start only
  // The live allocation containing p (its start or inside), if any.
  std::pair<void*, allocation_record const*> allocation_containing(void const* p) const;
  // A range [p, p + count) that starts inside a live allocation ends inside it.
  bool range_ok(void const* p, std::size_t count) const;
  // Accounting plus host memory; operation_outcome::out_of_memory if either says no.
  // kind: runtime (cudaMalloc) or driver (cuMemAlloc).
  operation_outcome allocate_native(int device, std::size_t size, allocation_kind kind, void** out,
                                    std::size_t alignment = allocation_alignment);
  // Pinned host memory (allocation_kind::host), charged to no device.
  operation_outcome allocate_host(int device, std::size_t size, unsigned flags, void** out);
  // capture: the id of the capture that makes it (a graph's memory), or 0.
  // reuse: a block the virtual GPU kept (virtual_gpu::take_kept), or nullptr.
  operation_outcome allocate_from_pool(pool_state& pool, std::size_t size, void** out, std::uint64_t capture = 0,
                                       void* reuse = nullptr);
  // Under the virtual GPU, a pool block that release() frees is kept for
  // reuse, freed on this queue by this task (set by the caller around it).
  virtual_gpu::queue_key freeing_on = 0;
  std::uint64_t freeing_task = 0;
  // The kept blocks of a pool go back to its memory: those whose free has
  // run (a trim), or all (the pool goes).
  void release_kept(pool_state& pool, bool only_finished);
  // Releases a live allocation (of any kind) found by find_allocation.
  void release(void* p);
  // Releases every live allocation tagged with capture id `capture`.
  void release_captured(std::uint64_t capture);

  // Pools.
  pool_state* find_pool(void const* handle);  // live pools only
  pool_state& create_pool(int device, unsigned handle_types, std::uint64_t max_size, bool is_default);
  void destroy_pool(pool_state& pool);  // frees whatever is still allocated from it
  void set_reserved(pool_state& pool, std::uint64_t reserved);
  // What `device` may do with the pool's memory (its own device: read_write).
  static access_level pool_access(pool_state const& pool, int device);
  void set_pool_access(pool_state& pool, int device, access_level access);  // device: not the pool's own
  // Sharing between processes. A pool created with the POSIX file descriptor
  // handle type has an arena (create_pool throws std::bad_alloc when the
  // system refuses one).
  // The live imported pool that maps the arena file (st_dev, st_ino), if any.
  pool_state* find_imported_pool(std::uint64_t file_device, std::uint64_t file_inode);
  // Maps the arena file behind fd (which the caller keeps) into a new imported
  // pool on `device` (the exporting pool's).
  operation_outcome import_pool(int device, int fd, std::uint64_t file_device, std::uint64_t file_inode,
                                std::uint64_t size, pool_state*& out);
  // Registers [base + offset, + size) of an imported pool as an imported
  // allocation; the same block imported again gives the same pointer.
  void* import_allocation(pool_state& pool, std::uint64_t offset, std::uint64_t size);
  int imported_allocations() const;  // live ones

  // Peer access (cuCtxEnablePeerAccess): whether `from` may access `to`'s memory.
  static bool peer_enabled(context_state const& from, context_state const& to) { return from.peers.count(&to) != 0; }
  // Whether `device` may access the live allocation `a`: its own device, a
  // device whose context has peer access to the owner's (cudaMalloc and
  // cuMemAlloc memory), or a device the pool grants access (pool memory).
  bool can_access(int device, allocation_record const& a);
  void trim_pools(int device);  // the "synchronization event": reserved -> max(used, threshold)
  // cuMemPoolTrimTo: reserved -> max(used, min(reserved, keep)).
  void trim_pool(pool_state& pool, std::uint64_t keep);
  // attr: a cudaMemPoolAttr (the CUmemPool_attribute values are the same).
  // operation_outcome::invalid_value for attributes that cannot be set / read.
  static operation_outcome set_pool_attribute(pool_state& pool, int attr, void const* value);
  static operation_outcome get_pool_attribute(pool_state const& pool, int attr, void* value);

  // Streams (cudaStream_t and CUstream are the same type).
  static bool is_special_stream(cudaStream_t s);  // 0, legacy or per-thread
  bool valid_stream(cudaStream_t s) const;
  // The device of a valid stream; the special streams stand for current_device.
  int stream_device(cudaStream_t s, int current_device) const;
  static bool is_legacy_stream(cudaStream_t s) { return s == nullptr || s == cudaStreamLegacy; }
  stream_state* find_stream(cudaStream_t s);       // live created streams only
  stream_state* find_stream_ever(cudaStream_t s);  // created streams, destroyed ones too
  cudaStream_t create_stream(int device, unsigned flags, int priority);
  bool destroy_stream(cudaStream_t s);  // false: not a live created stream; drops its capture

  // Events (cudaEvent_t and CUevent are the same type).
  event_state* find_event(void const* handle);  // live events only
  void* create_event(int device, unsigned flags);
  bool destroy_event(void const* handle);  // false: not a live event

  // Stream captures. The capture of a valid stream: a created stream's own,
  // the calling thread's per-thread default stream of `device` for
  // cudaStreamPerThread; never one for the legacy stream. nullptr if none.
  capture_state* capture_of(cudaStream_t s, int device);
  capture_state* find_capture(std::uint64_t id);  // ongoing captures only
  // Starts a capture on a valid, non-legacy stream that has none.
  capture_state& begin_capture(cudaStream_t s, int device, int mode);
  // Forgets an ongoing capture (the stream is no longer capturing); with
  // release_allocations, what it allocated is released too.
  void end_capture(capture_state& capture, bool release_allocations);
  std::map<std::uint64_t, capture_state>& captures() { return captures_; }
  // Marks a capture invalidated, counting it the first time.
  void invalidate(capture_state& capture);

  // Graphs.
  void* create_graph(capture_state const& capture);
  void* instantiate_graph(graph_state const& graph);
  graph_state* find_graph(void const* handle);  // live graphs only
  void destroy_graph(graph_state& graph);       // releases the allocations of its capture

  // cuDevicePrimaryCtxReset: every allocation, non-default pool, created
  // stream, event and capture of the device goes; the default pool starts
  // over; the peer access from and to the device's context goes.
  void reset_device(int device);

 private:
  std::vector<device_state> devices_;
  std::vector<context_state> contexts_;      // one per device, never resized
  std::deque<context_state> made_contexts_;  // cuCtxCreate's (a deque: their addresses stay)
  std::mutex made_contexts_mu_;              // guards made_contexts_ (find_context runs without mu)
  std::map<std::uintptr_t, allocation_record> allocations_;
  std::unordered_set<pool_state*> live_pools_;
  std::unordered_set<stream_state*> live_streams_;
  std::unordered_set<event_state*> live_events_;
  std::unordered_set<graph_state*> live_graphs_;
  std::map<std::uint64_t, capture_state> captures_;  // the ongoing ones, by id
  std::uint64_t next_capture_id_ = 1;
  std::uint64_t next_allocation_serial_ = 1;
  // Every pool, stream, event and graph ever created, destroyed ones
  // included: their memory is never reused, so a stale handle can never alias
  // a newer object.
  std::vector<std::unique_ptr<pool_state>> all_pools_;
  std::vector<std::unique_ptr<stream_state>> all_streams_;
  std::vector<std::unique_ptr<event_state>> all_events_;
  std::vector<std::unique_ptr<graph_state>> all_graphs_;

  void* host_allocate(std::size_t size, std::size_t alignment = allocation_alignment);
  void insert_allocation(void* p, allocation_record const& a);
  // The memory of an allocation goes back where it came from: the pool's
  // arena, host memory, or (imported) nowhere.
  void free_memory(void* p, allocation_record const& a);
  // The memfd is named "cuda_double_arena.<device>": a process that imports
  // it learns from the name which device the memory lives on.
  static bool create_arena(arena_state& arena, int device);
  static void close_arena(arena_state& arena);
  static void* arena_allocate(arena_state& arena, std::size_t size);  // nullptr: no free range fits
  static void arena_free(arena_state& arena, void* p, std::size_t size);
  // The whole pages of the free ranges go back to the system (a trim).
  static void arena_release_free_pages(arena_state& arena);
  // After this process's used or reserved bytes on `device` changed: tells
  // the processes sharing the devices (shared_devices.hpp).
  void taken_changed(int device);
};

// The process-wide model; built at first use and never destroyed, so that calls
// made from other libraries' static destructors or atexit handlers still work.
CUDA_DOUBLE_INTERNAL model_state& model();

// cudaErrorInsufficientDriver / cudaErrorNoDevice when the configuration says
// so, else cudaSuccess.
CUDA_DOUBLE_INTERNAL cudaError_t availability();

// The driver's initialization (cuInit, or the runtime double's implicit one).
// initialize() may be called only when availability() is cudaSuccess.
CUDA_DOUBLE_INTERNAL void initialize();
CUDA_DOUBLE_INTERNAL bool initialized();

// Counts one failed call of an exported CUDA function (either library),
// except inside a runtime call (see runtime_call_scope): a driver function that the
// runtime double called for the program does not count on its own, the
// runtime function that failed with it does.
CUDA_DOUBLE_INTERNAL void count_failure() noexcept;

// Marks the calling thread as inside a runtime double function while alive.
class CUDA_DOUBLE_INTERNAL runtime_call_scope {
 public:
  runtime_call_scope();
  ~runtime_call_scope();
  runtime_call_scope(runtime_call_scope const&) = delete;
  runtime_call_scope& operator=(runtime_call_scope const&) = delete;
};

// A number for the calling thread, unique in the process (never 0, never reused).
CUDA_DOUBLE_INTERNAL std::uint64_t thread_token();
// The calling thread's stream capture mode (cuThreadExchangeStreamCaptureMode;
// capture_mode_global at start).
CUDA_DOUBLE_INTERNAL int capture_mode();
CUDA_DOUBLE_INTERNAL void set_capture_mode(int mode);

// The calling thread's context stack (the driver's per-thread state).
CUDA_DOUBLE_INTERNAL context_state* current_context();  // top of the stack, or nullptr
// cuCtxSetCurrent: replaces the top (pushes onto an empty stack); nullptr pops.
CUDA_DOUBLE_INTERNAL void set_current_context(context_state* context);
CUDA_DOUBLE_INTERNAL bool push_context(context_state* context);  // false: the stack is full
CUDA_DOUBLE_INTERNAL context_state* pop_context();               // nullptr: the stack was empty

}  // namespace cuda_double
