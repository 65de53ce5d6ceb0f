// operations.cpp: the CUDA operations both doubles offer (see operations.hpp).
// Part of the driver double, libcuda.so.1; the runtime double reaches them
// through the internal API.
#include "operations.hpp"

#include <cuda.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <new>
#include <string>

namespace cuda_double::operations {
namespace {

using mutex_lock = std::lock_guard<std::mutex>;

// The device a valid stream works on. A special stream stands for the current
// context's device, so it needs one (the runtime double always has one by
// now: it makes one current before any work). m.mu must be held.
operation_outcome stream_device(model_state const& m, cudaStream_t stream, int& device)
{
  if (!m.valid_stream(stream)) { return operation_outcome::invalid_handle; }
  if (model_state::is_special_stream(stream)) {
    context_state const* c = current_context();
    if (c == nullptr) { return operation_outcome::invalid_context; }
    device = c->device;
  } else {
    device = m.stream_device(stream, 0);
  }
  return operation_outcome::ok;
}

// The virtual GPU's queue of a valid stream of `device`. m.mu must be held.
// The default streams are the current context's: a context made with
// cuCtxCreate has its own (context_state::domain).
int current_domain(int device)
{
  context_state const* c = current_context();
  return c != nullptr && c->device == device ? c->domain : device;
}

virtual_gpu::queue_key queue_of(model_state& m, cudaStream_t stream, int device)
{
  if (model_state::is_legacy_stream(stream)) { return m.gpu.legacy_queue(current_domain(device)); }
  if (stream == cudaStreamPerThread) { return m.gpu.per_thread_queue(thread_token(), current_domain(device)); }
  stream_state const* s = m.find_stream_ever(stream);
  char name[64];
  std::snprintf(name, sizeof name, "stream %p (%s)", static_cast<void*>(stream),
                (s->flags & cudaStreamNonBlocking) != 0 ? "non-blocking" : "blocking");
  return m.gpu.stream_queue(s, s->domain, (s->flags & cudaStreamNonBlocking) == 0, name);
}

// The "potentially unsafe call" rule of stream capture, for the calling
// thread's capture mode: the ongoing captures that prohibit the call are
// invalidated and the call fails (capture_unsupported; capture_implicit when
// it works on the legacy stream of `device` and a prohibiting capture is of a
// blocking stream of that device). legacy: the call works on the legacy
// stream. m.mu must be held.
operation_outcome unsafe_call(model_state& m, bool legacy, int device)
{
  int const mode = capture_mode();
  if (mode == capture_mode_relaxed || m.captures().empty()) { return operation_outcome::ok; }
  std::uint64_t const me = thread_token();
  bool prohibited = false;
  bool implicit = false;
  for (auto& [id, c] : m.captures()) {
    bool const offends =
      c.thread == me ? c.mode != capture_mode_relaxed : mode == capture_mode_global && c.mode == capture_mode_global;
    if (!offends) { continue; }
    prohibited = true;
    if (legacy && c.blocking && c.device == device) { implicit = true; }
    m.invalidate(c);
  }
  if (!prohibited) { return operation_outcome::ok; }
  return implicit ? operation_outcome::capture_implicit : operation_outcome::capture_unsupported;
}

// Where work enqueued on a valid stream of `device` goes: into the stream's
// capture (*capture, nullptr when it is not capturing). An invalidated
// capture takes no more work; on the legacy stream, enqueueing is a
// potentially unsafe call (legacy_unsafe). m.mu must be held.
operation_outcome enqueue_target(model_state& m, cudaStream_t stream, int device, bool legacy_unsafe,
                                 capture_state*& capture)
{
  if (legacy_unsafe && model_state::is_legacy_stream(stream)) {
    if (operation_outcome o = unsafe_call(m, /*legacy=*/true, device); o != operation_outcome::ok) { return o; }
  }
  capture = m.capture_of(stream, device);
  if (capture != nullptr && capture->invalidated) { return operation_outcome::capture_invalidated; }
  return operation_outcome::ok;
}

void add_node(model_state& m, capture_state& capture)
{
  ++capture.nodes;
  m.counters.captured_operations.fetch_add(1, std::memory_order_relaxed);
}

// The allocating half of allocate_async / allocate_from_pool_async, once the
// arguments are valid. An out-of-memory exception of the registry counts as
// out_of_memory here, so that *out is written as operations.hpp promises. In a
// capture, the allocation is the graph's (tagged with the capture) and a node
// of it. m.mu must be held.
operation_outcome allocate_in(model_state& m, pool_state& pool, std::size_t size, cudaStream_t stream,
                              int stream_device, capture_state* capture, void** out)
{
  *out = nullptr;
  if (size != 0) {
    bool const simulated = m.gpu.on() && capture == nullptr;
    virtual_gpu::queue_key const queue =
      simulated ? queue_of(m, stream, pool.on_host ? stream_device : pool.device) : 0;
    virtual_gpu::kept_block kept;
    std::uint64_t wait_for = 0;
    bool const reuse =
      simulated && m.gpu.take_kept(&pool, size, queue,
                                   {pool.reuse_follow_event_dependencies != 0, pool.reuse_allow_opportunistic != 0,
                                    pool.reuse_allow_internal_dependencies != 0},
                                   kept, wait_for);
    try {
      if (operation_outcome o = m.allocate_from_pool(pool, size, out, capture != nullptr ? capture->id : 0,
                                                     reuse ? reinterpret_cast<void*>(kept.address) : nullptr);
          o != operation_outcome::ok) {
        if (reuse) { m.gpu.keep(kept); }
        return o;
      }
    } catch (std::bad_alloc const&) {
      if (reuse) { m.gpu.keep(kept); }
      return operation_outcome::out_of_memory;
    }
    if (simulated) {
      std::uint64_t const task = m.gpu.submit(queue, "allocation", {}, wait_for);
      if (reuse) {
        m.gpu.note_at(*out, "the pool handed the block out again: allocation #" + std::to_string(task) + " on " +
                              m.gpu.queue_name(queue) +
                              (wait_for != 0 ? ", after free #" + std::to_string(wait_for) : ""));
      }
    }
    if (capture == nullptr) { m.counters.pool_allocs.fetch_add(1, std::memory_order_relaxed); }
  }
  if (capture != nullptr) { add_node(m, *capture); }
  m.last_alloc_stream = stream;
  return operation_outcome::ok;
}

// A synchronous copy or fill under the virtual GPU: work on the legacy
// stream of the device memory's device, touching the device ranges, waited
// for before the call returns. m.mu must be held.
void run_synchronously(model_state& m, char const* what,
                       std::initializer_list<std::pair<void const*, std::size_t>> ranges)
{
  if (!m.gpu.on()) { return; }
  m.gpu.progress();
  std::vector<virtual_gpu::touch> touches;
  int device = -1;
  for (auto const& [p, n] : ranges) {
    allocation_record const* a = m.allocation_containing(p).second;
    if (a == nullptr) { continue; }
    if (device < 0) { device = a->device; }
    m.gpu.add_touch(touches, p, n);
  }
  if (device < 0) { return; }
  m.gpu.wait_task(m.gpu.submit(m.gpu.legacy_queue(device), what, std::move(touches)));
}

// Whether [p, p + count) may be touched: inside one allocation if p is in one,
// and, if on_device, p must be in one.
bool range_usable(model_state const& m, void const* p, std::size_t count, bool on_device)
{
  if (on_device && m.allocation_containing(p).second == nullptr) { return false; }
  return m.range_ok(p, count);
}

}  // namespace

operation_outcome pools_supported()
{
  return config().no_pools ? operation_outcome::not_supported : operation_outcome::ok;
}

operation_outcome device_attribute(int device, int attr, int* value)
{
  if (value == nullptr) { return operation_outcome::invalid_value; }
  if (!model().valid_device(device)) { return operation_outcome::invalid_device; }
  switch (static_cast<cudaDeviceAttr>(attr)) {
    case cudaDevAttrMemoryPoolsSupported: *value = config().no_pools ? 0 : 1; break;
    case cudaDevAttrHostMemoryPoolsSupported: *value = config().no_pools || config().no_host_pools ? 0 : 1; break;
    case cudaDevAttrMemoryPoolSupportedHandleTypes:
      *value = config().no_pools ? 0 : static_cast<int>(config().pool_handle_types);
      break;
    case cudaDevAttrComputeCapabilityMajor: *value = compute_capability_major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = compute_capability_minor; break;
    case cudaDevAttrTextureAlignment: *value = static_cast<int>(config().texture_alignment); break;
    case cudaDevAttrTexturePitchAlignment: *value = 32; break;
    case cudaDevAttrMaxPitch: *value = static_cast<int>(config().max_pitch); break;
    default: *value = 0; break;
  }
  return operation_outcome::ok;
}

operation_outcome create_pool(pool_settings const* properties, cudaMemPool_t* out)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (out == nullptr || properties == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  if (!properties->pinned) { return operation_outcome::invalid_value; }
  if (properties->on_host) {
    // A pool in host memory (CUDA 12.6): no handle types, no maximum size.
    if (config().no_host_pools) { return operation_outcome::not_supported; }
    if (properties->handle_types != 0 || properties->max_size != 0) { return operation_outcome::invalid_value; }
    mutex_lock lock(m.mu);
    pool_state& pool = m.create_pool(host_device, 0, 0, /*is_default=*/false);
    pool.on_host = true;
    *out = reinterpret_cast<cudaMemPool_t>(&pool);
    m.counters.pools_created.fetch_add(1, std::memory_order_relaxed);
    return operation_outcome::ok;
  }
  if (!properties->on_device || !m.valid_device(properties->device)) { return operation_outcome::invalid_value; }
  if ((properties->handle_types & ~config().pool_handle_types) != 0) { return operation_outcome::not_supported; }
  if (properties->max_size != 0 && config().no_pool_max_size) { return operation_outcome::invalid_value; }
  mutex_lock lock(m.mu);
  pool_state& pool =
    m.create_pool(properties->device, properties->handle_types, properties->max_size, /*is_default=*/false);
  *out = reinterpret_cast<cudaMemPool_t>(&pool);
  m.counters.pools_created.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome destroy_pool(cudaMemPool_t handle)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  pool_state* pool = m.find_pool(handle);
  if (pool == nullptr || pool->is_default) { return operation_outcome::invalid_value; }
  m.destroy_pool(*pool);
  m.counters.pools_destroyed.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome set_pool_attribute(cudaMemPool_t handle, int attr, void const* value)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (value == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  pool_state* pool = m.find_pool(handle);
  if (pool == nullptr) { return operation_outcome::invalid_value; }
  return model_state::set_pool_attribute(*pool, attr, value);
}

operation_outcome get_pool_attribute(cudaMemPool_t handle, int attr, void* value)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (value == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  pool_state const* pool = m.find_pool(handle);
  // An imported pool has no attributes to read (as measured on an H200).
  if (pool == nullptr || pool->imported) { return operation_outcome::invalid_value; }
  return model_state::get_pool_attribute(*pool, attr, value);
}

operation_outcome trim_pool(cudaMemPool_t handle, std::size_t keep)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  pool_state* pool = m.find_pool(handle);
  if (pool == nullptr) { return operation_outcome::invalid_value; }
  m.trim_pool(*pool, keep);
  return operation_outcome::ok;
}

operation_outcome allocate(int device, std::size_t size, allocation_kind kind, void** out)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  m.gpu.progress();
  if (operation_outcome o = unsafe_call(m, /*legacy=*/false, device); o != operation_outcome::ok) { return o; }
  if (operation_outcome o = m.allocate_native(device, size, kind, out); o != operation_outcome::ok) { return o; }
  (kind == allocation_kind::driver ? m.counters.driver_mallocs : m.counters.native_mallocs)
    .fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome allocate_pitched(int device, std::size_t width, std::size_t rows, allocation_kind kind, void** out,
                                   std::size_t* pitch)
{
  std::size_t const alignment = config().texture_alignment;
  if (width > config().max_pitch) { return operation_outcome::invalid_value; }
  std::size_t const rounded = (width + alignment - 1) / alignment * alignment;
  *pitch = rounded;  // written also when there is no memory for it, as the GPUs' driver does
  if (rows > std::numeric_limits<std::size_t>::max() / rounded) { return operation_outcome::out_of_memory; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  m.gpu.progress();
  if (operation_outcome o = unsafe_call(m, /*legacy=*/false, device); o != operation_outcome::ok) { return o; }
  // Its base aligned as a texture bound to it needs.
  if (operation_outcome o =
        m.allocate_native(device, rounded * rows, kind, out, std::max(alignment, allocation_alignment));
      o != operation_outcome::ok) {
    return o;
  }
  *pitch = rounded;
  m.counters.pitched_mallocs.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome allocate_host(int device, std::size_t size, unsigned flags, void** out)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  if (operation_outcome o = unsafe_call(m, /*legacy=*/false, device); o != operation_outcome::ok) { return o; }
  if (operation_outcome o = m.allocate_host(device, size, flags, out); o != operation_outcome::ok) { return o; }
  m.counters.host_mallocs.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome release_host(void* p)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  if (operation_outcome o = unsafe_call(m, /*legacy=*/false, 0); o != operation_outcome::ok) { return o; }
  allocation_record const* a = m.find_allocation(p);
  if (a == nullptr || a->kind != allocation_kind::host) { return operation_outcome::invalid_value; }
  m.gpu.wait_all();  // cudaFreeHost waits until no device can still use the memory
  m.release(p);
  m.counters.host_frees.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome host_device_pointer(void const* p, void** out)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  auto const [base, a] = m.allocation_containing(p);
  if (a == nullptr || a->kind != allocation_kind::host) { return operation_outcome::invalid_value; }
  *out = const_cast<void*>(p);
  return operation_outcome::ok;
}

operation_outcome host_flags(void const* p, unsigned* out)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  auto const [base, a] = m.allocation_containing(p);
  if (a == nullptr || a->kind != allocation_kind::host) { return operation_outcome::invalid_value; }
  *out = a->host_flags | cudaHostAllocMapped;  // every pinned block is mapped (unified addressing), as an H100 reports
  return operation_outcome::ok;
}

operation_outcome release(void* p, allocation_kind caller)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  if (operation_outcome o = unsafe_call(m, /*legacy=*/false, 0); o != operation_outcome::ok) { return o; }
  allocation_record const* a = m.find_allocation(p);
  // Pinned host memory is freed by cudaFreeHost / cuMemFreeHost only.
  if (a == nullptr || a->kind == allocation_kind::host) { return operation_outcome::invalid_value; }
  m.gpu.wait_all();  // cudaFree and cuMemFree wait until no device can still use the memory
  m.release(p);
  (caller == allocation_kind::driver ? m.counters.driver_frees : m.counters.native_frees)
    .fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome allocate_async(std::size_t size, cudaStream_t stream, void** out)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (out == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  m.gpu.progress();
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  capture_state* capture = nullptr;
  if (operation_outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/true, capture);
      o != operation_outcome::ok) {
    return o;
  }
  return allocate_in(m, *m.device(device).default_pool, size, stream, device, capture, out);
}

operation_outcome allocate_from_pool_async(cudaMemPool_t handle, std::size_t size, cudaStream_t stream, void** out)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (out == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  m.gpu.progress();
  pool_state* pool = m.find_pool(handle);
  // Imported pools cannot allocate (cuda.h says so).
  if (pool == nullptr || pool->imported) { return operation_outcome::invalid_value; }
  int device = 0;  // the pool decides where the memory is
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  capture_state* capture = nullptr;
  if (operation_outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/true, capture);
      o != operation_outcome::ok) {
    return o;
  }
  return allocate_in(m, *pool, size, stream, device, capture, out);
}

operation_outcome free_async(void* p, cudaStream_t stream, bool from_driver)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  m.gpu.progress();
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  capture_state* capture = nullptr;
  if (operation_outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/true, capture);
      o != operation_outcome::ok) {
    return o;
  }
  // Unlike cudaFree / cuMemFree, a null pointer is an error.
  allocation_record const* a = m.find_allocation(p);
  if (p == nullptr || a == nullptr || a->pool == nullptr) { return operation_outcome::invalid_value; }
  if (capture != nullptr) {
    // A node of the graph: nothing is freed now (at most once per capture).
    if (!capture->freed.insert(address_of(p)).second) { return operation_outcome::invalid_value; }
    add_node(m, *capture);
  } else {
    if (m.gpu.on()) {
      m.freeing_on = queue_of(m, stream, device);
      m.freeing_task = m.gpu.submit(m.freeing_on, "free");
      m.gpu.note_at(
        p, "given back to the pool: free #" + std::to_string(m.freeing_task) + " on " + m.gpu.queue_name(m.freeing_on));
    }
    m.release(p);
    m.freeing_on = 0;
    m.freeing_task = 0;
    m.counters.pool_frees.fetch_add(1, std::memory_order_relaxed);
  }
  if (from_driver) {
    auto& c = m.counters;
    stream_state const* s = m.find_stream(stream);
    auto& counter = model_state::is_legacy_stream(stream)     ? c.free_async_legacy_stream
                    : stream == cudaStreamPerThread           ? c.free_async_per_thread_stream
                    : (s->flags & cudaStreamNonBlocking) != 0 ? c.free_async_non_blocking_stream
                                                              : c.free_async_blocking_stream;
    counter.fetch_add(1, std::memory_order_relaxed);
  }
  m.last_free_stream = stream;
  m.last_free_serial = ++m.serial;
  return operation_outcome::ok;
}

operation_outcome copy(void* dst, void const* src, std::size_t count, copy_direction direction)
{
  if (count == 0) { return operation_outcome::ok; }
  if (dst == nullptr || src == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  if (!range_usable(m, dst, count, direction == copy_direction::host_to_device) ||
      !range_usable(m, src, count, direction == copy_direction::device_to_host)) {
    return operation_outcome::invalid_value;
  }
  std::memmove(dst, src, count);
  run_synchronously(m, "copy", {{dst, count}, {src, count}});
  return operation_outcome::ok;
}

operation_outcome fill(void* dst, unsigned char value, std::size_t count)
{
  if (count == 0) { return operation_outcome::ok; }
  if (dst == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  if (!range_usable(m, dst, count, /*on_device=*/true)) { return operation_outcome::invalid_value; }
  std::memset(dst, value, count);
  run_synchronously(m, "fill", {{dst, count}});
  return operation_outcome::ok;
}

// Work touching `ranges` put on `stream`: a task of the virtual GPU, or,
// when the stream is capturing, what the capture's graph will touch.
operation_outcome run_on(model_state& m, cudaStream_t stream, int device, char const* what,
                         std::vector<std::pair<void const*, std::size_t>> const& ranges)
{
  if (capture_state* capture = m.capture_of(stream, device)) {
    capture->touched.insert(capture->touched.end(), ranges.begin(), ranges.end());
    return operation_outcome::ok;
  }
  if (!m.gpu.on()) { return operation_outcome::ok; }
  m.gpu.progress();
  std::vector<virtual_gpu::touch> touches;
  for (auto const& [p, bytes] : ranges) {
    m.gpu.add_touch(touches, p, bytes);
  }
  m.gpu.submit(queue_of(m, stream, device), what, std::move(touches));
  return operation_outcome::ok;
}

operation_outcome launch(cudaStream_t stream, void** kernel_params, bool touching)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  std::vector<std::pair<void const*, std::size_t>> ranges;
  if (touching && kernel_params != nullptr) {
    auto const n = *static_cast<unsigned long long const*>(kernel_params[0]);
    for (unsigned long long i = 0; i < n; ++i) {
      auto const p = *static_cast<CUdeviceptr const*>(kernel_params[1 + 2 * i]);
      auto const bytes = *static_cast<std::size_t const*>(kernel_params[2 + 2 * i]);
      ranges.emplace_back(reinterpret_cast<void const*>(p), bytes);
    }
  }
  return run_on(m, stream, device, "kernel", ranges);
}

namespace {
// The device memory among `ranges`: what a copy or set on a stream touches.
std::vector<std::pair<void const*, std::size_t>> device_ranges(
  model_state const& m, std::initializer_list<std::pair<void const*, std::size_t>> ranges)
{
  std::vector<std::pair<void const*, std::size_t>> out;
  for (auto const& r : ranges) {
    if (m.allocation_containing(r.first).second != nullptr) { out.push_back(r); }
  }
  return out;
}
}  // namespace

operation_outcome copy_async(cudaStream_t stream, void* dst, void const* src, std::size_t count)
{
  if (count == 0) { return operation_outcome::ok; }
  if (dst == nullptr || src == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  if (!range_usable(m, dst, count, false) || !range_usable(m, src, count, false)) {
    return operation_outcome::invalid_value;
  }
  if (m.capture_of(stream, device) == nullptr) { std::memmove(dst, src, count); }  // a capture copies at launch
  return run_on(m, stream, device, "copy", device_ranges(m, {{dst, count}, {src, count}}));
}

operation_outcome fill_async(cudaStream_t stream, void* dst, unsigned char value, std::size_t count)
{
  if (count == 0) { return operation_outcome::ok; }
  if (dst == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  if (!range_usable(m, dst, count, /*on_device=*/true)) { return operation_outcome::invalid_value; }
  if (m.capture_of(stream, device) == nullptr) { std::memset(dst, value, count); }
  return run_on(m, stream, device, "set", device_ranges(m, {{dst, count}}));
}

operation_outcome create_stream(int device, unsigned flags, int priority, cudaStream_t* out)
{
  if (out == nullptr) { return operation_outcome::invalid_value; }
  if ((flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  *out = m.create_stream(device, flags, priority);
  m.counters.streams_created.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome destroy_stream(cudaStream_t stream)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  if (!m.destroy_stream(stream)) { return operation_outcome::invalid_handle; }
  m.counters.streams_destroyed.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome stream_flags(cudaStream_t stream, unsigned* out)
{
  if (out == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  stream_state const* s = m.find_stream(stream);
  *out = s != nullptr ? s->flags : 0u;  // the special streams are blocking
  return operation_outcome::ok;
}

namespace {

// synchronize_stream / query_stream.
operation_outcome finish_stream(cudaStream_t stream, bool synchronize)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  m.gpu.progress();
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  if (operation_outcome o = unsafe_call(m, model_state::is_legacy_stream(stream), device); o != operation_outcome::ok) {
    return o;
  }
  if (capture_state* capture = m.capture_of(stream, device)) {  // never allowed, whatever the mode
    m.invalidate(*capture);
    return operation_outcome::capture_unsupported;
  }
  stream_state* const state = m.find_stream(stream);
  virtual_gpu::queue_key const queue = m.gpu.on() ? queue_of(m, stream, device) : 0;
  if (synchronize) {
    if (m.gpu.on()) { m.gpu.wait_queue(queue); }
    m.trim_pools(device);
    m.counters.stream_synchronizes.fetch_add(1, std::memory_order_relaxed);
    if (state != nullptr) { state->busy = false; }  // its work has finished
    return operation_outcome::ok;
  }
  if (m.gpu.on() && !m.gpu.queue_done(queue)) { return operation_outcome::not_ready; }
  return state != nullptr && state->busy ? operation_outcome::not_ready : operation_outcome::ok;
}

}  // namespace

operation_outcome synchronize_stream(cudaStream_t stream) { return finish_stream(stream, /*synchronize=*/true); }

operation_outcome query_stream(cudaStream_t stream) { return finish_stream(stream, /*synchronize=*/false); }

operation_outcome destroy_context(context_state& context)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  if (context.domain < max_devices) { return operation_outcome::invalid_context; }  // a primary context
  m.gpu.wait_device(context.domain);
  return m.destroy_context(&context) ? operation_outcome::ok : operation_outcome::invalid_context;
}

operation_outcome synchronize_device(int device, int domain)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  if (operation_outcome o = unsafe_call(m, /*legacy=*/false, device); o != operation_outcome::ok) { return o; }
  m.gpu.wait_device(domain);
  m.trim_pools(device);
  m.counters.context_synchronizes.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome create_event(int device, unsigned flags, cudaEvent_t* out)
{
  if (out == nullptr) { return operation_outcome::invalid_value; }
  constexpr unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~known) != 0) { return operation_outcome::invalid_value; }
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) {
    return operation_outcome::invalid_value;
  }
  model_state& m = model();
  mutex_lock lock(m.mu);
  *out = static_cast<cudaEvent_t>(m.create_event(device, flags));
  return operation_outcome::ok;
}

operation_outcome destroy_event(cudaEvent_t event)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  return m.destroy_event(event) ? operation_outcome::ok : operation_outcome::invalid_handle;
}

operation_outcome record_event(cudaEvent_t event, cudaStream_t stream)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  event_state* e = m.find_event(event);
  if (e == nullptr) { return operation_outcome::invalid_handle; }
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  if (e->device != device) {
    return operation_outcome::invalid_handle;  // event and stream of one device
  }
  capture_state* capture = nullptr;
  if (operation_outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/true, capture);
      o != operation_outcome::ok) {
    return o;
  }
  if (capture != nullptr) {
    e->captured_in = capture->id;
    e->sim_record = 0;
    add_node(m, *capture);
  } else {
    if (m.gpu.on()) {
      m.gpu.progress();
      e->sim_record = m.gpu.submit(queue_of(m, stream, device), "event record");
    }
    e->captured_in = 0;  // complete at once, unless its stream is marked busy
    stream_state const* const on = m.find_stream(stream);
    e->recorded_on_busy = on != nullptr && on->busy ? on : nullptr;
    e->busy_epoch = on != nullptr ? on->busy_epoch : 0;
    m.counters.events_recorded.fetch_add(1, std::memory_order_relaxed);
  }
  m.last_record_stream = stream;
  m.note_stream_op(CUDA_DOUBLE_EVENT_RECORD, event, stream);
  m.last_record_serial = ++m.serial;
  return operation_outcome::ok;
}

operation_outcome query_event(cudaEvent_t event, bool synchronize)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  event_state* e = m.find_event(event);
  if (e == nullptr) { return operation_outcome::invalid_handle; }
  if (operation_outcome o = unsafe_call(m, /*legacy=*/false, e->device); o != operation_outcome::ok) { return o; }
  if (e->captured_in != 0) { return operation_outcome::captured_event; }
  // A query of work on a stream marked busy (the same busy spell) is not
  // ready; a synchronization completes it.
  bool const pending =
    e->recorded_on_busy != nullptr && e->recorded_on_busy->busy && e->recorded_on_busy->busy_epoch == e->busy_epoch;
  if (synchronize) {
    m.gpu.wait_task(e->sim_record);
    e->recorded_on_busy = nullptr;
  } else {
    m.gpu.progress();
    if (pending || !m.gpu.done(e->sim_record)) { return operation_outcome::not_ready; }
  }
  return operation_outcome::ok;
}

operation_outcome wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags)
{
  if ((flags & ~static_cast<unsigned>(cudaEventWaitExternal)) != 0) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  event_state const* e = m.find_event(event);
  if (e == nullptr) { return operation_outcome::invalid_handle; }
  int device = 0;  // the event may be of another device
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  capture_state* capture = nullptr;
  if (operation_outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/false, capture);
      o != operation_outcome::ok) {
    return o;
  }
  bool const event_capture_ongoing = e->captured_in != 0 && m.find_capture(e->captured_in) != nullptr;
  if (capture != nullptr) {
    if (event_capture_ongoing && e->captured_in != capture->id) { return operation_outcome::capture_merge; }
    add_node(m, *capture);
  } else {
    if ((flags & cudaEventWaitExternal) != 0) {
      return operation_outcome::invalid_value;  // only valid in a capture
    }
    // Joining a stream into a capture this way is not modelled.
    if (event_capture_ongoing) { return operation_outcome::not_supported; }
    if (e->captured_in != 0) { return operation_outcome::captured_event; }
    if (m.gpu.on()) {
      m.gpu.progress();
      // The record that is the event's last now, not any later one.
      m.gpu.submit(queue_of(m, stream, device), "event wait", {}, e->sim_record);
    }
    m.counters.stream_waits.fetch_add(1, std::memory_order_relaxed);
  }
  m.last_wait_stream = stream;
  m.note_stream_op(CUDA_DOUBLE_STREAM_WAIT, event, stream);
  m.last_wait_serial = ++m.serial;
  return operation_outcome::ok;
}

operation_outcome begin_capture(cudaStream_t stream, int mode)
{
  if (mode != capture_mode_global && mode != capture_mode_thread_local && mode != capture_mode_relaxed) {
    return operation_outcome::invalid_value;
  }
  model_state& m = model();
  mutex_lock lock(m.mu);
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  if (model_state::is_legacy_stream(stream)) { return operation_outcome::capture_unsupported; }
  if (m.capture_of(stream, device) != nullptr) { return operation_outcome::illegal_state; }
  m.begin_capture(stream, device, mode);
  m.counters.captures_begun.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome end_capture(cudaStream_t stream, cudaGraph_t* out)
{
  if (out == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  capture_state* capture = m.capture_of(stream, device);
  if (capture == nullptr) { return operation_outcome::illegal_state; }
  if (capture->mode != capture_mode_relaxed && capture->thread != thread_token()) {
    return operation_outcome::capture_wrong_thread;
  }
  if (capture->invalidated) {
    *out = nullptr;
    m.end_capture(*capture, /*release_allocations=*/true);
    return operation_outcome::capture_invalidated;
  }
  *out = static_cast<cudaGraph_t>(m.create_graph(*capture));
  m.end_capture(*capture, /*release_allocations=*/false);  // now the graph's
  return operation_outcome::ok;
}

operation_outcome capture_status(cudaStream_t stream, int* status)
{
  if (status == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  if (model_state::is_legacy_stream(stream)) {
    for (auto const& [id, c] : m.captures()) {
      if (c.blocking && c.device == device) {
        return operation_outcome::capture_implicit;  // not invalidated
      }
    }
    *status = capture_status_none;
    return operation_outcome::ok;
  }
  capture_state const* capture = m.capture_of(stream, device);
  *status = capture == nullptr     ? capture_status_none
            : capture->invalidated ? capture_status_invalidated
                                   : capture_status_active;
  return operation_outcome::ok;
}

operation_outcome exchange_capture_mode(int* mode)
{
  if (mode == nullptr) { return operation_outcome::invalid_value; }
  if (*mode != capture_mode_global && *mode != capture_mode_thread_local && *mode != capture_mode_relaxed) {
    return operation_outcome::invalid_value;
  }
  int const previous = capture_mode();
  set_capture_mode(*mode);
  *mode = previous;
  return operation_outcome::ok;
}

operation_outcome instantiate_graph(cudaGraph_t graph, cudaGraphExec_t* out)
{
  if (out == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  graph_state* g = m.find_graph(graph);
  if (g == nullptr || g->executable) { return operation_outcome::invalid_value; }
  *out = static_cast<cudaGraphExec_t>(m.instantiate_graph(*g));
  return operation_outcome::ok;
}

operation_outcome launch_graph(cudaGraphExec_t exec, cudaStream_t stream)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  graph_state* g = m.find_graph(exec);
  if (g == nullptr || !g->executable) { return operation_outcome::invalid_value; }
  int device = 0;
  if (operation_outcome o = stream_device(m, stream, device); o != operation_outcome::ok) { return o; }
  return run_on(m, stream, device, "graph launch", g->touched);
}

operation_outcome destroy_graph_exec(cudaGraphExec_t exec)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  graph_state* g = m.find_graph(exec);
  if (g == nullptr || !g->executable) { return operation_outcome::invalid_value; }
  m.destroy_graph(*g);
  return operation_outcome::ok;
}

operation_outcome destroy_graph(cudaGraph_t graph)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  graph_state* g = m.find_graph(graph);
  if (g == nullptr || g->executable) { return operation_outcome::invalid_value; }
  m.destroy_graph(*g);
  return operation_outcome::ok;
}

operation_outcome graph_nodes(cudaGraph_t graph, cudaGraphNode_t* nodes, std::size_t* count)
{
  if (count == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  graph_state* g = m.find_graph(graph);
  if (g == nullptr) { return operation_outcome::invalid_value; }
  std::size_t const n = g->nodes.size();
  if (nodes == nullptr) {
    *count = n;
    return operation_outcome::ok;
  }
  // As cuda.h says: at most *count entries; the ones past the graph's nodes NULL.
  std::size_t const k = std::min(*count, n);
  for (std::size_t i = 0; i < *count; ++i) {
    nodes[i] = i < k ? reinterpret_cast<cudaGraphNode_t>(&g->nodes[i]) : nullptr;
  }
  *count = k;
  return operation_outcome::ok;
}

operation_outcome reset_device(int device)
{
  model_state& m = model();
  if (!m.valid_device(device)) { return operation_outcome::invalid_device; }
  mutex_lock lock(m.mu);
  m.reset_device(device);
  m.counters.primary_context_resets.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

// ---- peer access

operation_outcome can_access_peer(int device, int peer, int* out)
{
  if (out == nullptr) { return operation_outcome::invalid_value; }
  model_state const& m = model();
  if (!m.valid_device(device) || !m.valid_device(peer)) { return operation_outcome::invalid_device; }
  *out = device != peer && !config().no_peer ? 1 : 0;
  return operation_outcome::ok;
}

operation_outcome enable_peer_access(context_state& from, void const* peer, unsigned flags)
{
  if (flags != 0) { return operation_outcome::invalid_value; }
  model_state& m = model();
  context_state* to = peer == nullptr ? nullptr : m.find_context(peer);
  if (to == nullptr) { return operation_outcome::invalid_context; }
  if (to == &from) {
    return operation_outcome::invalid_device;  // its own context / device
  }
  if (config().no_peer) { return operation_outcome::peer_unsupported; }
  mutex_lock lock(m.mu);
  if (!from.peers.insert(to).second) { return operation_outcome::peer_already_enabled; }
  m.counters.peer_access_enables.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome disable_peer_access(context_state& from, void const* peer)
{
  model_state& m = model();
  context_state* to = peer == nullptr ? nullptr : m.find_context(peer);
  if (to == nullptr) { return operation_outcome::invalid_context; }
  mutex_lock lock(m.mu);
  if (from.peers.erase(to) == 0) { return operation_outcome::peer_not_enabled; }
  m.counters.peer_access_disables.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

// ---- pool access

namespace {

// The access an entry asks for, if the double accepts it for some device.
bool known_access(unsigned flags, access_level& out)
{
  switch (flags) {
    case static_cast<unsigned>(access_level::none): out = access_level::none; return true;
    case static_cast<unsigned>(access_level::read_write): out = access_level::read_write; return true;
    default: return false;  // read (not for device memory) or not a flag value at all
  }
}

// Checks one entry of set_pool_access against `pool`. m.mu must be held.
operation_outcome check_access_entry(model_state const& m, pool_state const& pool, access_descriptor const& e)
{
  if (!e.on_device || !m.valid_device(e.device)) { return operation_outcome::invalid_value; }
  access_level access = access_level::none;
  if (!known_access(e.flags, access)) { return operation_outcome::invalid_value; }
  // The pool's own device keeps read-write access: it can be restated, never changed.
  if (e.device == pool.device) {
    return access == access_level::read_write ? operation_outcome::ok : operation_outcome::invalid_device;
  }
  if (access != access_level::none && config().no_peer && !pool.on_host) {
    return operation_outcome::invalid_device;  // not peer capable
  }
  return operation_outcome::ok;
}

}  // namespace

operation_outcome set_pool_access(cudaMemPool_t handle, access_descriptor const* entries, std::size_t count)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (entries == nullptr && count != 0) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  pool_state* pool = m.find_pool(handle);
  if (pool == nullptr) { return operation_outcome::invalid_value; }
  for (std::size_t i = 0; i < count; ++i) {
    if (entries[i].on_device && entries[i].device == pool->device) {
      m.counters.pool_access_owner_entries.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // All or nothing: every entry is checked before any is applied.
  for (std::size_t i = 0; i < count; ++i) {
    if (operation_outcome o = check_access_entry(m, *pool, entries[i]); o != operation_outcome::ok) { return o; }
  }
  for (std::size_t i = 0; i < count; ++i) {
    access_level access = access_level::none;
    known_access(entries[i].flags, access);
    if (entries[i].device != pool->device) { m.set_pool_access(*pool, entries[i].device, access); }
  }
  m.counters.pool_access_sets.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome get_pool_access(cudaMemPool_t handle, access_descriptor const& location, unsigned* flags)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (flags == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  pool_state const* pool = m.find_pool(handle);
  if (pool == nullptr) { return operation_outcome::invalid_value; }
  if (!location.on_device || !m.valid_device(location.device)) { return operation_outcome::invalid_value; }
  *flags = static_cast<unsigned>(model_state::pool_access(*pool, location.device));
  return operation_outcome::ok;
}

// ---- sharing

namespace {

// What the double writes into a fabric handle or a legacy IPC handle.
struct share_data {
  char magic[8];             // "cdfabric" or "cdipc"
  std::uint64_t pool = 0;    // pool_state::id (0 for an IPC handle)
  std::uint64_t serial = 0;  // allocation_record::serial (0 for a pool handle)
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::int32_t device = 0;
  std::int32_t process = 0;  // the maker's pid (IPC handles): opening one in the same process is an error
};
static_assert(sizeof(share_data) <= share_data_size);

// What cuMemPoolExportPointer writes: enough for another process to find the
// bytes (the arena file, the offset in it) and to refuse what it cannot import.
struct pointer_export_data {
  char magic[8];                  // "cdptr"
  std::uint64_t pool = 0;         // the exporter's pool_state::id
  std::uint64_t serial = 0;       // allocation_record::serial
  std::uint64_t file_device = 0;  // the arena's st_dev and st_ino; 0 without an arena (fabric only)
  std::uint64_t file_inode = 0;
  std::uint64_t offset = 0;  // in the arena
  std::uint64_t size = 0;
  std::int32_t device = 0;
  std::uint32_t flags = 0;  // pointer_export_importable
};
static_assert(sizeof(pointer_export_data) == share_data_size);
// Set when the pool had been exported (cuMemPoolExportToShareableHandle, a
// POSIX file descriptor) before the data was made: data made before cannot be
// imported (as measured on an H200).
constexpr std::uint32_t pointer_export_importable = 1;

template <class Data>
void write_bytes(void* out, Data const& d)
{
  unsigned char bytes[share_data_size] = {};
  std::memcpy(bytes, &d, sizeof d);
  std::memcpy(out, bytes, sizeof bytes);
}

template <class Data>
Data read_bytes(void const* in)
{
  Data d{};
  std::memcpy(&d, in, sizeof d);
  return d;
}

bool has_magic(char const (&field)[8], char const* magic)
{
  char expected[8] = {};
  std::memcpy(expected, magic, std::min(std::strlen(magic), sizeof expected));
  return std::memcmp(field, expected, sizeof expected) == 0;
}

void write_share_data(void* out, char const* magic, std::uint64_t pool, allocation_record const* a, void const* p)
{
  share_data d{};
  std::memcpy(d.magic, magic, std::min(std::strlen(magic), sizeof d.magic));
  d.pool = pool;
  if (a != nullptr) {
    d.serial = a->serial;
    d.address = reinterpret_cast<std::uintptr_t>(p);
    d.size = a->size;
    d.device = a->device;
    d.process = static_cast<std::int32_t>(getpid());
  }
  write_bytes(out, d);
}

bool single_handle_type(unsigned t) { return t != 0 && (t & (t - 1)) == 0; }

// Whether fd is an arena of a driver double (model_state::create_arena): a
// memfd of that name, whichever process made it; `device` is the one its
// name gives.
bool is_arena(int fd, struct stat& st, int& device)
{
  if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) { return false; }
  std::string const link = "/proc/self/fd/" + std::to_string(fd);
  char target[256] = {};
  ssize_t const n = readlink(link.c_str(), target, sizeof target - 1);
  static constexpr char prefix[] = "/memfd:cuda_double_arena.";
  if (n <= 0 || std::strncmp(target, prefix, sizeof prefix - 1) != 0) { return false; }
  char const* digits = target + sizeof prefix - 1;
  char* end = nullptr;
  long const d = std::strtol(digits, &end, 10);
  if (end == digits || d < 0 || d >= max_devices) { return false; }
  device = static_cast<int>(d);
  return true;
}

}  // namespace

operation_outcome export_pool(cudaMemPool_t handle, unsigned handle_type, unsigned long long flags, void* handle_out)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (handle_out == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  pool_state* pool = m.find_pool(handle);
  // An imported pool is not exported again (not measured; the double refuses it).
  if (pool == nullptr || pool->imported || flags != 0) { return operation_outcome::invalid_value; }
  // Exactly one handle type, one the pool was created with.
  if (!single_handle_type(handle_type) || (pool->handle_types & handle_type) == 0) {
    return operation_outcome::invalid_value;
  }
  switch (handle_type) {
    case cudaMemHandleTypePosixFileDescriptor: {
      // A new descriptor of the pool's arena, the caller's to close: another
      // process that imports it maps the same bytes.
      int const fd = fcntl(pool->arena.fd, F_DUPFD_CLOEXEC, 0);
      if (fd < 0) { return operation_outcome::out_of_memory; }
      *static_cast<int*>(handle_out) = fd;
      pool->exported = true;
      break;
    }
    case cudaMemHandleTypeFabric:
      if (!config().fabric_ok) {
        return operation_outcome::not_permitted;  // no IMEX channel, as on a lone H200
      }
      write_share_data(handle_out, "cdfabric", pool->id, nullptr, nullptr);
      break;
    default: return operation_outcome::not_supported;  // the Windows handle types
  }
  m.counters.pool_handle_exports.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome export_pool_pointer(void const* p, void* out)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (out == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  // The start of a block (an interior pointer: invalid_value, as measured) of
  // a pool made with a handle type; imported memory is not exported again.
  allocation_record const* a = m.find_allocation(p);
  if (a == nullptr || a->kind != allocation_kind::pool || a->pool->handle_types == 0) {
    return operation_outcome::invalid_value;
  }
  pool_state const& pool = *a->pool;
  pointer_export_data d{};
  std::memcpy(d.magic, "cdptr", 5);
  d.pool = pool.id;
  d.serial = a->serial;
  d.size = a->size;
  d.device = a->device;
  if (pool.arena.base != nullptr) {
    d.file_device = pool.arena.file_device;
    d.file_inode = pool.arena.file_inode;
    d.offset = static_cast<std::uint64_t>(static_cast<char const*>(p) - pool.arena.base);
    if (pool.exported) { d.flags = pointer_export_importable; }
  }
  write_bytes(out, d);
  m.counters.pool_pointer_exports.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome ipc_mem_handle(void const* p, void* out)
{
  if (out == nullptr) { return operation_outcome::invalid_value; }
  model_state& m = model();
  mutex_lock lock(m.mu);
  allocation_record const* a = m.find_allocation(p);
  // cudaMalloc / cuMemAlloc memory only: pool memory (imported included) has
  // no legacy IPC handle.
  if (a == nullptr || a->pool != nullptr) { return operation_outcome::invalid_value; }
  write_share_data(out, "cdipc", 0, a, p);
  m.counters.ipc_mem_handles.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome import_pool(void* handle, unsigned handle_type, unsigned long long flags, cudaMemPool_t* out)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (out == nullptr || handle_type != cudaMemHandleTypePosixFileDescriptor || flags != 0) {
    return operation_outcome::invalid_value;
  }
  auto const fd = static_cast<int>(reinterpret_cast<std::intptr_t>(handle));
  struct stat st {};
  int device = 0;
  if (!is_arena(fd, st, device)) { return operation_outcome::invalid_value; }
  auto const file_device = static_cast<std::uint64_t>(st.st_dev);
  auto const file_inode = static_cast<std::uint64_t>(st.st_ino);
  model_state& m = model();
  // The memory lives on the exporter's device: a process that has no such
  // device cannot import it (not measured; the double refuses it).
  if (!m.valid_device(device)) { return operation_outcome::invalid_value; }
  mutex_lock lock(m.mu);
  // The same arena again: the same pool (as measured on an H200).
  pool_state* pool = m.find_imported_pool(file_device, file_inode);
  if (pool == nullptr) {
    if (operation_outcome o =
          m.import_pool(device, fd, file_device, file_inode, static_cast<std::uint64_t>(st.st_size), pool);
        o != operation_outcome::ok) {
      return o;
    }
  }
  *out = reinterpret_cast<cudaMemPool_t>(pool);
  m.counters.pool_handle_imports.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome import_pool_pointer(cudaMemPool_t handle, void const* data, void** out)
{
  if (operation_outcome o = pools_supported(); o != operation_outcome::ok) { return o; }
  if (out == nullptr || data == nullptr) { return operation_outcome::invalid_value; }
  auto const d = read_bytes<pointer_export_data>(data);
  model_state& m = model();
  mutex_lock lock(m.mu);
  pool_state* pool = m.find_pool(handle);
  if (pool == nullptr || !pool->imported) { return operation_outcome::invalid_value; }
  // Data of this pool's arena, made after the exporter exported the pool, for
  // a block inside the arena.
  if (!has_magic(d.magic, "cdptr") || (d.flags & pointer_export_importable) == 0 ||
      d.file_device != pool->arena.file_device || d.file_inode != pool->arena.file_inode || d.size == 0 ||
      d.offset > pool->arena.size || d.size > pool->arena.size - d.offset) {
    return operation_outcome::invalid_value;
  }
  *out = m.import_allocation(*pool, d.offset, d.size);
  m.counters.pool_pointer_imports.fetch_add(1, std::memory_order_relaxed);
  return operation_outcome::ok;
}

operation_outcome open_ipc_mem_handle(void const* handle, unsigned flags, void** out)
{
  if (out == nullptr || handle == nullptr) { return operation_outcome::invalid_value; }
  // Exactly CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (0 or 2: invalid, as measured).
  if (flags != cudaIpcMemLazyEnablePeerAccess) { return operation_outcome::invalid_value; }
  auto const d = read_bytes<share_data>(handle);
  if (!has_magic(d.magic, "cdipc")) {
    return operation_outcome::invalid_value;  // not made by the driver (zeros, random bytes: as measured)
  }
  if (d.process == static_cast<std::int32_t>(getpid())) {
    return operation_outcome::invalid_context;  // opened in the process that made it (as measured)
  }
  // The real driver maps another process's cudaMalloc memory here; the double
  // cannot (that memory is the other process's private heap), so the handle
  // is refused. Legacy IPC of pool memory, which the double can share, goes
  // through the pool imports instead.
  return operation_outcome::invalid_value;
}

operation_outcome close_ipc_mem_handle(void const* /*p*/)
{
  // Only what cuIpcOpenMemHandle mapped can be closed, and the double never
  // maps anything there (open_ipc_mem_handle): every pointer is one that was
  // never opened. ipc_mem_closes stays 0 with ipc_mem_opens.
  return operation_outcome::invalid_value;
}

// ---- pointer queries

operation_outcome address_range(void const* p, void** base, std::size_t* size)
{
  model_state& m = model();
  mutex_lock lock(m.mu);
  auto const [start, a] = m.allocation_containing(p);
  if (a == nullptr) { return operation_outcome::not_found; }
  if (base != nullptr) { *base = start; }
  if (size != nullptr) { *size = a->size; }
  return operation_outcome::ok;
}

}  // namespace cuda_double::operations
