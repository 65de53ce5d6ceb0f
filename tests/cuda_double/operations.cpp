// operations.cpp: the CUDA operations both doubles offer (see operations.h).
// Part of the driver double, libcuda.so.1; the runtime double reaches them
// through the internal API.
#include "operations.h"

#include <cstring>
#include <mutex>
#include <new>

namespace cuda_double::operations {
namespace {

using Lock = std::lock_guard<std::mutex>;

// The device a valid stream works on. A special stream stands for the current
// context's device, so it needs one (the runtime double always has one by
// now: it makes one current before any work). m.mu must be held.
Outcome stream_device(Model const& m, cudaStream_t stream, int& device) {
  if (!m.valid_stream(stream)) return Outcome::invalid_handle;
  if (Model::is_special_stream(stream)) {
    Context const* c = current_context();
    if (c == nullptr) return Outcome::invalid_context;
    device = c->device;
  } else {
    device = m.stream_device(stream, 0);
  }
  return Outcome::ok;
}

// The allocating half of allocate_async / allocate_from_pool_async, once the
// arguments are valid. An out-of-memory exception of the registry counts as
// out_of_memory here, so that *out is written as operations.h promises.
// m.mu must be held.
Outcome allocate_in(Model& m, Pool& pool, std::size_t size, cudaStream_t stream, void** out) {
  *out = nullptr;
  if (size != 0) {
    try {
      if (Outcome o = m.allocate_from_pool(pool, size, out); o != Outcome::ok) return o;
    } catch (std::bad_alloc const&) {
      return Outcome::out_of_memory;
    }
    m.counters.pool_allocs.fetch_add(1, std::memory_order_relaxed);
  }
  m.last_alloc_stream = stream;
  return Outcome::ok;
}

// Whether [p, p + count) may be touched: inside one allocation if p is in one,
// and, if on_device, p must be in one.
bool range_usable(Model const& m, void const* p, std::size_t count, bool on_device) {
  if (on_device && m.allocation_containing(p).second == nullptr) return false;
  return m.range_ok(p, count);
}

}  // namespace

Outcome pools_supported() { return config().no_pools ? Outcome::not_supported : Outcome::ok; }

Outcome device_attribute(int device, int attr, int* value) {
  if (value == nullptr) return Outcome::invalid_value;
  if (!model().valid_device(device)) return Outcome::invalid_device;
  switch (static_cast<cudaDeviceAttr>(attr)) {
    case cudaDevAttrMemoryPoolsSupported: *value = config().no_pools ? 0 : 1; break;
    case cudaDevAttrMemoryPoolSupportedHandleTypes:
      *value = config().no_pools ? 0 : static_cast<int>(config().pool_handle_types);
      break;
    case cudaDevAttrComputeCapabilityMajor: *value = kComputeCapabilityMajor; break;
    case cudaDevAttrComputeCapabilityMinor: *value = kComputeCapabilityMinor; break;
    default: *value = 0; break;
  }
  return Outcome::ok;
}

Outcome create_pool(PoolProperties const* properties, cudaMemPool_t* out) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (out == nullptr || properties == nullptr) return Outcome::invalid_value;
  Model& m = model();
  if (!properties->pinned) return Outcome::invalid_value;
  if (!properties->on_device || !m.valid_device(properties->device)) return Outcome::invalid_value;
  if ((properties->handle_types & ~config().pool_handle_types) != 0) return Outcome::not_supported;
  Lock lock(m.mu);
  Pool& pool = m.create_pool(properties->device, properties->handle_types, properties->max_size, /*is_default=*/false);
  *out = reinterpret_cast<cudaMemPool_t>(&pool);
  m.counters.pools_created.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome destroy_pool(cudaMemPool_t handle) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  Model& m = model();
  Lock lock(m.mu);
  Pool* pool = m.find_pool(handle);
  if (pool == nullptr || pool->is_default) return Outcome::invalid_value;
  m.destroy_pool(*pool);
  m.counters.pools_destroyed.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome set_pool_attribute(cudaMemPool_t handle, int attr, void const* value) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (value == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Pool* pool = m.find_pool(handle);
  if (pool == nullptr) return Outcome::invalid_value;
  return Model::set_pool_attribute(*pool, attr, value);
}

Outcome get_pool_attribute(cudaMemPool_t handle, int attr, void* value) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (value == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Pool const* pool = m.find_pool(handle);
  if (pool == nullptr) return Outcome::invalid_value;
  return Model::get_pool_attribute(*pool, attr, value);
}

Outcome allocate_async(std::size_t size, cudaStream_t stream, void** out) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (out == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  return allocate_in(m, *m.device(device).default_pool, size, stream, out);
}

Outcome allocate_from_pool_async(cudaMemPool_t handle, std::size_t size, cudaStream_t stream, void** out) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (out == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Pool* pool = m.find_pool(handle);
  if (pool == nullptr) return Outcome::invalid_value;
  int device = 0;  // only checked: the pool decides where the memory is
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  return allocate_in(m, *pool, size, stream, out);
}

Outcome free_async(void* p, cudaStream_t stream) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;  // only checked
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  // Unlike cudaFree / cuMemFree, a null pointer is an error.
  Allocation const* a = m.find_allocation(p);
  if (p == nullptr || a == nullptr || a->pool == nullptr) return Outcome::invalid_value;
  m.release(p);
  m.counters.pool_frees.fetch_add(1, std::memory_order_relaxed);
  m.last_free_stream = stream;
  return Outcome::ok;
}

Outcome copy(void* dst, void const* src, std::size_t count, CopyDirection direction) {
  if (count == 0) return Outcome::ok;
  if (dst == nullptr || src == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  if (!range_usable(m, dst, count, direction == CopyDirection::host_to_device) ||
      !range_usable(m, src, count, direction == CopyDirection::device_to_host))
    return Outcome::invalid_value;
  std::memmove(dst, src, count);
  return Outcome::ok;
}

Outcome fill(void* dst, unsigned char value, std::size_t count) {
  if (count == 0) return Outcome::ok;
  if (dst == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  if (!range_usable(m, dst, count, /*on_device=*/true)) return Outcome::invalid_value;
  std::memset(dst, value, count);
  return Outcome::ok;
}

Outcome create_stream(int device, unsigned flags, cudaStream_t* out) {
  if (out == nullptr) return Outcome::invalid_value;
  if ((flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  *out = m.create_stream(device, flags);
  return Outcome::ok;
}

Outcome destroy_stream(cudaStream_t stream) {
  Model& m = model();
  Lock lock(m.mu);
  return m.destroy_stream(stream) ? Outcome::ok : Outcome::invalid_handle;
}

Outcome synchronize_stream(cudaStream_t stream) {
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  m.trim_pools(device);
  return Outcome::ok;
}

}  // namespace cuda_double::operations
