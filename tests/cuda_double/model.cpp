// model.cpp: the state of the CUDA TEST DOUBLES: devices, primary contexts,
// memory accounting, the allocation registry, pools, streams and the
// per-thread context stack (see cuda_double.h for the model). Part of the
// driver double, libcuda.so.1; the runtime double reaches it through the
// internal API of model.h.
#include "model.h"

#include <algorithm>
#include <cstdlib>
#include <limits>

namespace cuda_double {
namespace {

constexpr std::uint64_t kMax64 = std::numeric_limits<std::uint64_t>::max();

// Rounds up to a multiple of granule; false on overflow.
bool round_up(std::uint64_t value, std::uint64_t granule, std::uint64_t& out) {
  std::uint64_t const rem = value % granule;
  if (rem == 0) {
    out = value;
    return true;
  }
  if (value > kMax64 - (granule - rem)) return false;
  out = value + (granule - rem);
  return true;
}

// The per-thread context stack: trivially destructible, so that it works in
// every thread until the very end (calls from thread-exit destructors included).
struct ContextStack {
  Context* entries[kMaxContextStackDepth];
  std::size_t depth;
};
thread_local ContextStack t_contexts{};

std::atomic<bool> g_initialized{false};

}  // namespace

Context* current_context() { return t_contexts.depth == 0 ? nullptr : t_contexts.entries[t_contexts.depth - 1]; }

void set_current_context(Context* context) {
  if (context == nullptr) {
    if (t_contexts.depth != 0) --t_contexts.depth;
  } else if (t_contexts.depth == 0) {
    t_contexts.entries[t_contexts.depth++] = context;
  } else {
    t_contexts.entries[t_contexts.depth - 1] = context;
  }
}

bool push_context(Context* context) {
  if (t_contexts.depth == kMaxContextStackDepth) return false;
  t_contexts.entries[t_contexts.depth++] = context;
  return true;
}

Context* pop_context() { return t_contexts.depth == 0 ? nullptr : t_contexts.entries[--t_contexts.depth]; }

void initialize() { g_initialized.store(true, std::memory_order_release); }
bool initialized() { return g_initialized.load(std::memory_order_acquire); }

cudaError_t availability() {
  Config const& c = config();
  if (c.no_driver) return cudaErrorInsufficientDriver;
  if (c.devices == 0) return cudaErrorNoDevice;
  return cudaSuccess;
}

void count_failure() noexcept {
  // model() is built on first use; counting must not fail, so a model that
  // cannot be built (out of memory) is not counted in.
  try {
    model().counters.failed_calls.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
  }
}

Model& model() {
  static Model* const m = new Model(config());
  return *m;
}

Model::Model(Config const& c)
    : devices_(static_cast<std::size_t>(c.devices)), contexts_(static_cast<std::size_t>(c.devices)) {
  for (int d = 0; d < c.devices; ++d) contexts_[static_cast<std::size_t>(d)].device = d;
  if (!c.no_pools && !c.no_driver)
    for (int d = 0; d < c.devices; ++d)
      device(d).default_pool = &create_pool(d, cudaMemHandleTypeNone, 0, /*is_default=*/true);
}

Context* Model::primary_context(int d) { return &contexts_[static_cast<std::size_t>(d)]; }

Context* Model::find_context(void const* handle) {
  for (Context& c : contexts_)
    if (&c == handle) return &c;
  return nullptr;
}

std::uint64_t Model::free_bytes(int d) {
  Device const& dev = device(d);
  std::uint64_t const taken = dev.used + dev.reserved;  // never above memory
  return config().memory - taken;
}

Allocation const* Model::find_allocation(void const* p) const {
  auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(p));
  return it == allocations_.end() ? nullptr : &it->second;
}

std::pair<void*, Allocation const*> Model::allocation_containing(void const* p) const {
  auto const addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = allocations_.upper_bound(addr);
  if (it == allocations_.begin()) return {nullptr, nullptr};
  --it;
  if (addr - it->first >= it->second.size) return {nullptr, nullptr};
  return {reinterpret_cast<void*>(it->first), &it->second};
}

bool Model::range_ok(void const* p, std::size_t count) const {
  auto [base, a] = allocation_containing(p);
  if (a == nullptr) return true;
  std::size_t const offset = static_cast<char const*>(p) - static_cast<char const*>(base);
  return count <= a->size - offset;
}

void* Model::host_allocate(std::size_t size) {
  if (size > std::numeric_limits<std::size_t>::max() - kAllocationAlignment) return nullptr;
  std::size_t const rounded = (size + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment;
  void* p = nullptr;
  if (posix_memalign(&p, kAllocationAlignment, rounded) != 0) return nullptr;
  return p;
}

void Model::insert_allocation(void* p, Allocation const& a) {
  try {
    allocations_.emplace(reinterpret_cast<std::uintptr_t>(p), a);
  } catch (...) {
    std::free(p);
    throw;
  }
}

Outcome Model::allocate_native(int d, std::size_t size, AllocationKind kind, void** out) {
  if (size > free_bytes(d)) return Outcome::out_of_memory;
  void* p = host_allocate(size);
  if (p == nullptr) return Outcome::out_of_memory;
  insert_allocation(p, Allocation{size, d, nullptr, kind});
  device(d).used += size;
  *out = p;
  return Outcome::ok;
}

Outcome Model::allocate_from_pool(Pool& pool, std::size_t size, void** out) {
  if (size > kMax64 - pool.used) return Outcome::out_of_memory;
  std::uint64_t const needed = pool.used + size;
  std::uint64_t new_reserved = pool.reserved;
  if (needed > pool.reserved) {
    if (pool.max_size != 0 && needed > pool.max_size) return Outcome::out_of_memory;
    if (!round_up(needed, kPoolGranularity, new_reserved)) return Outcome::out_of_memory;
    if (pool.max_size != 0) new_reserved = std::min(new_reserved, pool.max_size);
    if (new_reserved - pool.reserved > free_bytes(pool.device)) return Outcome::out_of_memory;
  }
  void* p = host_allocate(size);
  if (p == nullptr) return Outcome::out_of_memory;
  insert_allocation(p, Allocation{size, pool.device, &pool, AllocationKind::pool});
  set_reserved(pool, new_reserved);
  pool.used = needed;
  pool.used_high = std::max(pool.used_high, pool.used);
  *out = p;
  return Outcome::ok;
}

void Model::release(void* p) {
  auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == allocations_.end()) return;
  Allocation const a = it->second;
  allocations_.erase(it);
  if (a.pool != nullptr)
    a.pool->used -= a.size;
  else
    device(a.device).used -= a.size;
  std::free(p);
}

Pool* Model::find_pool(void const* handle) {
  auto* pool = static_cast<Pool*>(const_cast<void*>(handle));
  return live_pools_.count(pool) != 0 ? pool : nullptr;
}

Pool& Model::create_pool(int d, unsigned handle_types, std::uint64_t max_size, bool is_default) {
  auto pool = std::make_unique<Pool>();
  pool->device = d;
  pool->handle_types = handle_types;
  pool->max_size = max_size;
  pool->is_default = is_default;
  pool->alive = false;  // until it is in live_pools_
  Pool* raw = pool.get();
  all_pools_.push_back(std::move(pool));
  live_pools_.insert(raw);
  raw->alive = true;
  return *raw;
}

void Model::destroy_pool(Pool& pool) {
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second.pool == &pool) {
      std::free(reinterpret_cast<void*>(it->first));
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  device(pool.device).reserved -= pool.reserved;
  pool.reserved = 0;
  pool.used = 0;
  pool.alive = false;
  live_pools_.erase(&pool);
}

void Model::set_reserved(Pool& pool, std::uint64_t reserved) {
  Device& dev = device(pool.device);
  dev.reserved = dev.reserved - pool.reserved + reserved;
  pool.reserved = reserved;
  pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
}

void Model::trim_pools(int d) {
  for (Pool* pool : live_pools_) {
    if (pool->device != d) continue;
    std::uint64_t const keep = std::max(pool->used, pool->release_threshold);
    if (pool->reserved > keep) set_reserved(*pool, keep);
  }
}

Outcome Model::set_pool_attribute(Pool& pool, int attr, void const* value) {
  auto const as_int = [value] { return *static_cast<int const*>(value); };
  auto const as_u64 = [value] { return *static_cast<std::uint64_t const*>(value); };
  switch (static_cast<cudaMemPoolAttr>(attr)) {
    case cudaMemPoolReuseFollowEventDependencies: pool.reuse_follow_event_dependencies = as_int() != 0; break;
    case cudaMemPoolReuseAllowOpportunistic: pool.reuse_allow_opportunistic = as_int() != 0; break;
    case cudaMemPoolReuseAllowInternalDependencies: pool.reuse_allow_internal_dependencies = as_int() != 0; break;
    case cudaMemPoolAttrReleaseThreshold: pool.release_threshold = as_u64(); break;
    case cudaMemPoolAttrReservedMemHigh:  // only a reset (to the current value) is allowed
      if (as_u64() != 0) return Outcome::invalid_value;
      pool.reserved_high = pool.reserved;
      break;
    case cudaMemPoolAttrUsedMemHigh:
      if (as_u64() != 0) return Outcome::invalid_value;
      pool.used_high = pool.used;
      break;
    default: return Outcome::invalid_value;  // the *Current ones are read-only
  }
  return Outcome::ok;
}

Outcome Model::get_pool_attribute(Pool const& pool, int attr, void* value) {
  auto const as_int = [value] { return static_cast<int*>(value); };
  auto const as_u64 = [value] { return static_cast<std::uint64_t*>(value); };
  switch (static_cast<cudaMemPoolAttr>(attr)) {
    case cudaMemPoolReuseFollowEventDependencies: *as_int() = pool.reuse_follow_event_dependencies; break;
    case cudaMemPoolReuseAllowOpportunistic: *as_int() = pool.reuse_allow_opportunistic; break;
    case cudaMemPoolReuseAllowInternalDependencies: *as_int() = pool.reuse_allow_internal_dependencies; break;
    case cudaMemPoolAttrReleaseThreshold: *as_u64() = pool.release_threshold; break;
    case cudaMemPoolAttrReservedMemCurrent: *as_u64() = pool.reserved; break;
    case cudaMemPoolAttrReservedMemHigh: *as_u64() = pool.reserved_high; break;
    case cudaMemPoolAttrUsedMemCurrent: *as_u64() = pool.used; break;
    case cudaMemPoolAttrUsedMemHigh: *as_u64() = pool.used_high; break;
    default: return Outcome::invalid_value;
  }
  return Outcome::ok;
}

bool Model::is_special_stream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

bool Model::valid_stream(cudaStream_t s) const {
  return is_special_stream(s) || live_streams_.count(reinterpret_cast<Stream*>(s)) != 0;
}

int Model::stream_device(cudaStream_t s, int current_device) const {
  return is_special_stream(s) ? current_device : reinterpret_cast<Stream const*>(s)->device;
}

cudaStream_t Model::create_stream(int d, unsigned flags) {
  auto stream = std::make_unique<Stream>();
  stream->device = d;
  stream->flags = flags;
  Stream* raw = stream.get();
  all_streams_.push_back(std::move(stream));
  live_streams_.insert(raw);
  return reinterpret_cast<cudaStream_t>(raw);
}

bool Model::destroy_stream(cudaStream_t s) {
  return !is_special_stream(s) && live_streams_.erase(reinterpret_cast<Stream*>(s)) != 0;
}

}  // namespace cuda_double
