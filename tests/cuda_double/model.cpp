// model.cpp: the CUDA runtime TEST DOUBLE's state: devices, memory accounting,
// the allocation registry, pools and streams (see cuda_double.h for the model).
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

thread_local int t_current_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

}  // namespace

int& current_device() { return t_current_device; }
cudaError_t& last_error() { return t_last_error; }

cudaError_t availability() {
  Config const& c = config();
  if (c.no_driver) return cudaErrorInsufficientDriver;
  if (c.devices == 0) return cudaErrorNoDevice;
  return cudaSuccess;
}

cudaError_t record(cudaError_t result) {
  if (result != cudaSuccess) {
    t_last_error = result;
    // model() is built on first use; counting must not fail, so count only
    // once it exists (it always does after the first successful lookup).
    try {
      model().counters.failed_calls.fetch_add(1, std::memory_order_relaxed);
    } catch (...) {
    }
  }
  return result;
}

Model& model() {
  static Model* const m = new Model(config());
  return *m;
}

Model::Model(Config const& c) : devices_(static_cast<std::size_t>(c.devices)) {
  if (!c.no_pools && !c.no_driver)
    for (int d = 0; d < c.devices; ++d)
      device(d).default_pool = &create_pool(d, cudaMemHandleTypeNone, 0, /*is_default=*/true);
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

cudaError_t Model::allocate_native(int d, std::size_t size, void** out) {
  if (size > free_bytes(d)) return cudaErrorMemoryAllocation;
  void* p = host_allocate(size);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  insert_allocation(p, Allocation{size, d, nullptr});
  device(d).used += size;
  *out = p;
  return cudaSuccess;
}

cudaError_t Model::allocate_from_pool(Pool& pool, std::size_t size, void** out) {
  if (size > kMax64 - pool.used) return cudaErrorMemoryAllocation;
  std::uint64_t const needed = pool.used + size;
  std::uint64_t new_reserved = pool.reserved;
  if (needed > pool.reserved) {
    if (pool.max_size != 0 && needed > pool.max_size) return cudaErrorMemoryAllocation;
    if (!round_up(needed, kPoolGranularity, new_reserved)) return cudaErrorMemoryAllocation;
    if (pool.max_size != 0) new_reserved = std::min(new_reserved, pool.max_size);
    if (new_reserved - pool.reserved > free_bytes(pool.device)) return cudaErrorMemoryAllocation;
  }
  void* p = host_allocate(size);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  insert_allocation(p, Allocation{size, pool.device, &pool});
  set_reserved(pool, new_reserved);
  pool.used = needed;
  pool.used_high = std::max(pool.used_high, pool.used);
  *out = p;
  return cudaSuccess;
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

Pool* Model::find_pool(cudaMemPool_t handle) {
  auto* pool = reinterpret_cast<Pool*>(handle);
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

bool Model::is_special_stream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

bool Model::valid_stream(cudaStream_t s) const {
  return is_special_stream(s) || live_streams_.count(reinterpret_cast<Stream*>(s)) != 0;
}

int Model::stream_device(cudaStream_t s) const {
  return is_special_stream(s) ? current_device() : reinterpret_cast<Stream const*>(s)->device;
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
