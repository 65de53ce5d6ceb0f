// operations.cpp: the CUDA operations both doubles offer (see operations.h).
// Part of the driver double, libcuda.so.1; the runtime double reaches them
// through the internal API.
#include "operations.h"

#include <sys/eventfd.h>

#include <algorithm>
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

// The "potentially unsafe call" rule of stream capture, for the calling
// thread's capture mode: the ongoing captures that prohibit the call are
// invalidated and the call fails (capture_unsupported; capture_implicit when
// it works on the legacy stream of `device` and a prohibiting capture is of a
// blocking stream of that device). legacy: the call works on the legacy
// stream. m.mu must be held.
Outcome unsafe_call(Model& m, bool legacy, int device) {
  int const mode = capture_mode();
  if (mode == kCaptureModeRelaxed || m.captures().empty()) return Outcome::ok;
  std::uint64_t const me = thread_token();
  bool prohibited = false;
  bool implicit = false;
  for (auto& [id, c] : m.captures()) {
    bool const offends = c.thread == me ? c.mode != kCaptureModeRelaxed
                                        : mode == kCaptureModeGlobal && c.mode == kCaptureModeGlobal;
    if (!offends) continue;
    prohibited = true;
    if (legacy && c.blocking && c.device == device) implicit = true;
    m.invalidate(c);
  }
  if (!prohibited) return Outcome::ok;
  return implicit ? Outcome::capture_implicit : Outcome::capture_unsupported;
}

// Where work enqueued on a valid stream of `device` goes: into the stream's
// capture (*capture, nullptr when it is not capturing). An invalidated
// capture takes no more work; on the legacy stream, enqueueing is a
// potentially unsafe call (legacy_unsafe). m.mu must be held.
Outcome enqueue_target(Model& m, cudaStream_t stream, int device, bool legacy_unsafe, Capture*& capture) {
  if (legacy_unsafe && Model::is_legacy_stream(stream))
    if (Outcome o = unsafe_call(m, /*legacy=*/true, device); o != Outcome::ok) return o;
  capture = m.capture_of(stream, device);
  if (capture != nullptr && capture->invalidated) return Outcome::capture_invalidated;
  return Outcome::ok;
}

void add_node(Model& m, Capture& capture) {
  ++capture.nodes;
  m.counters.captured_operations.fetch_add(1, std::memory_order_relaxed);
}

// The allocating half of allocate_async / allocate_from_pool_async, once the
// arguments are valid. An out-of-memory exception of the registry counts as
// out_of_memory here, so that *out is written as operations.h promises. In a
// capture, the allocation is the graph's (tagged with the capture) and a node
// of it. m.mu must be held.
Outcome allocate_in(Model& m, Pool& pool, std::size_t size, cudaStream_t stream, Capture* capture, void** out) {
  *out = nullptr;
  if (size != 0) {
    try {
      if (Outcome o = m.allocate_from_pool(pool, size, out, capture != nullptr ? capture->id : 0); o != Outcome::ok)
        return o;
    } catch (std::bad_alloc const&) {
      return Outcome::out_of_memory;
    }
    if (capture == nullptr) m.counters.pool_allocs.fetch_add(1, std::memory_order_relaxed);
  }
  if (capture != nullptr) add_node(m, *capture);
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

Outcome trim_pool(cudaMemPool_t handle, std::size_t keep) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  Model& m = model();
  Lock lock(m.mu);
  Pool* pool = m.find_pool(handle);
  if (pool == nullptr) return Outcome::invalid_value;
  m.trim_pool(*pool, keep);
  return Outcome::ok;
}

Outcome allocate(int device, std::size_t size, AllocationKind kind, void** out) {
  Model& m = model();
  Lock lock(m.mu);
  if (Outcome o = unsafe_call(m, /*legacy=*/false, device); o != Outcome::ok) return o;
  if (Outcome o = m.allocate_native(device, size, kind, out); o != Outcome::ok) return o;
  (kind == AllocationKind::driver ? m.counters.driver_mallocs : m.counters.native_mallocs)
      .fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome release(void* p, AllocationKind caller) {
  Model& m = model();
  Lock lock(m.mu);
  if (Outcome o = unsafe_call(m, /*legacy=*/false, 0); o != Outcome::ok) return o;
  if (m.find_allocation(p) == nullptr) return Outcome::invalid_value;
  m.release(p);
  (caller == AllocationKind::driver ? m.counters.driver_frees : m.counters.native_frees)
      .fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome allocate_async(std::size_t size, cudaStream_t stream, void** out) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (out == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  Capture* capture = nullptr;
  if (Outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/true, capture); o != Outcome::ok) return o;
  return allocate_in(m, *m.device(device).default_pool, size, stream, capture, out);
}

Outcome allocate_from_pool_async(cudaMemPool_t handle, std::size_t size, cudaStream_t stream, void** out) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (out == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Pool* pool = m.find_pool(handle);
  if (pool == nullptr) return Outcome::invalid_value;
  int device = 0;  // the pool decides where the memory is
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  Capture* capture = nullptr;
  if (Outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/true, capture); o != Outcome::ok) return o;
  return allocate_in(m, *pool, size, stream, capture, out);
}

Outcome free_async(void* p, cudaStream_t stream, bool from_driver) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  Capture* capture = nullptr;
  if (Outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/true, capture); o != Outcome::ok) return o;
  // Unlike cudaFree / cuMemFree, a null pointer is an error.
  Allocation const* a = m.find_allocation(p);
  if (p == nullptr || a == nullptr || a->pool == nullptr) return Outcome::invalid_value;
  if (capture != nullptr) {
    // A node of the graph: nothing is freed now (at most once per capture).
    if (!capture->freed.insert(address_of(p)).second) return Outcome::invalid_value;
    add_node(m, *capture);
  } else {
    m.release(p);
    m.counters.pool_frees.fetch_add(1, std::memory_order_relaxed);
  }
  if (from_driver) {
    auto& c = m.counters;
    Stream const* s = m.find_stream(stream);
    auto& counter = Model::is_legacy_stream(stream)  ? c.free_async_legacy_stream
                    : stream == cudaStreamPerThread ? c.free_async_per_thread_stream
                    : (s->flags & cudaStreamNonBlocking) != 0 ? c.free_async_non_blocking_stream
                                                              : c.free_async_blocking_stream;
    counter.fetch_add(1, std::memory_order_relaxed);
  }
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

Outcome create_stream(int device, unsigned flags, int priority, cudaStream_t* out) {
  if (out == nullptr) return Outcome::invalid_value;
  if ((flags & ~static_cast<unsigned>(cudaStreamNonBlocking)) != 0) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  *out = m.create_stream(device, flags, priority);
  m.counters.streams_created.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome destroy_stream(cudaStream_t stream) {
  Model& m = model();
  Lock lock(m.mu);
  if (!m.destroy_stream(stream)) return Outcome::invalid_handle;
  m.counters.streams_destroyed.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome stream_flags(cudaStream_t stream, unsigned* out) {
  if (out == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  Stream const* s = m.find_stream(stream);
  *out = s != nullptr ? s->flags : 0u;  // the special streams are blocking
  return Outcome::ok;
}

namespace {

// synchronize_stream / query_stream.
Outcome finish_stream(cudaStream_t stream, bool synchronize) {
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  if (Outcome o = unsafe_call(m, Model::is_legacy_stream(stream), device); o != Outcome::ok) return o;
  if (Capture* capture = m.capture_of(stream, device)) {  // never allowed, whatever the mode
    m.invalidate(*capture);
    return Outcome::capture_unsupported;
  }
  if (synchronize) {
    m.trim_pools(device);
    m.counters.stream_synchronizes.fetch_add(1, std::memory_order_relaxed);
  }
  return Outcome::ok;
}

}  // namespace

Outcome synchronize_stream(cudaStream_t stream) { return finish_stream(stream, /*synchronize=*/true); }

Outcome query_stream(cudaStream_t stream) { return finish_stream(stream, /*synchronize=*/false); }

Outcome synchronize_device(int device) {
  Model& m = model();
  Lock lock(m.mu);
  if (Outcome o = unsafe_call(m, /*legacy=*/false, device); o != Outcome::ok) return o;
  m.trim_pools(device);
  m.counters.context_synchronizes.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome create_event(int device, unsigned flags, cudaEvent_t* out) {
  if (out == nullptr) return Outcome::invalid_value;
  constexpr unsigned kKnown = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~kKnown) != 0) return Outcome::invalid_value;
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  *out = static_cast<cudaEvent_t>(m.create_event(device, flags));
  return Outcome::ok;
}

Outcome destroy_event(cudaEvent_t event) {
  Model& m = model();
  Lock lock(m.mu);
  return m.destroy_event(event) ? Outcome::ok : Outcome::invalid_handle;
}

Outcome record_event(cudaEvent_t event, cudaStream_t stream) {
  Model& m = model();
  Lock lock(m.mu);
  Event* e = m.find_event(event);
  if (e == nullptr) return Outcome::invalid_handle;
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  if (e->device != device) return Outcome::invalid_handle;  // event and stream of one device
  Capture* capture = nullptr;
  if (Outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/true, capture); o != Outcome::ok) return o;
  if (capture != nullptr) {
    e->captured_in = capture->id;
    add_node(m, *capture);
  } else {
    e->captured_in = 0;  // complete at once
    m.counters.events_recorded.fetch_add(1, std::memory_order_relaxed);
  }
  return Outcome::ok;
}

Outcome query_event(cudaEvent_t event, bool /*synchronize: the same, everything is complete*/) {
  Model& m = model();
  Lock lock(m.mu);
  Event const* e = m.find_event(event);
  if (e == nullptr) return Outcome::invalid_handle;
  if (Outcome o = unsafe_call(m, /*legacy=*/false, e->device); o != Outcome::ok) return o;
  if (e->captured_in != 0) return Outcome::captured_event;
  return Outcome::ok;
}

Outcome wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  if ((flags & ~static_cast<unsigned>(cudaEventWaitExternal)) != 0) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Event const* e = m.find_event(event);
  if (e == nullptr) return Outcome::invalid_handle;
  int device = 0;  // the event may be of another device
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  Capture* capture = nullptr;
  if (Outcome o = enqueue_target(m, stream, device, /*legacy_unsafe=*/false, capture); o != Outcome::ok) return o;
  bool const event_capture_ongoing = e->captured_in != 0 && m.find_capture(e->captured_in) != nullptr;
  if (capture != nullptr) {
    if (event_capture_ongoing && e->captured_in != capture->id) return Outcome::capture_merge;
    add_node(m, *capture);
  } else {
    if ((flags & cudaEventWaitExternal) != 0) return Outcome::invalid_value;  // only valid in a capture
    // Joining a stream into a capture this way is not modelled.
    if (event_capture_ongoing) return Outcome::not_supported;
    if (e->captured_in != 0) return Outcome::captured_event;
    m.counters.stream_waits.fetch_add(1, std::memory_order_relaxed);
  }
  m.last_wait_stream = stream;
  return Outcome::ok;
}

Outcome begin_capture(cudaStream_t stream, int mode) {
  if (mode != kCaptureModeGlobal && mode != kCaptureModeThreadLocal && mode != kCaptureModeRelaxed)
    return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  if (Model::is_legacy_stream(stream)) return Outcome::capture_unsupported;
  if (m.capture_of(stream, device) != nullptr) return Outcome::illegal_state;
  m.begin_capture(stream, device, mode);
  m.counters.captures_begun.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome end_capture(cudaStream_t stream, cudaGraph_t* out) {
  if (out == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  Capture* capture = m.capture_of(stream, device);
  if (capture == nullptr) return Outcome::illegal_state;
  if (capture->mode != kCaptureModeRelaxed && capture->thread != thread_token())
    return Outcome::capture_wrong_thread;
  if (capture->invalidated) {
    *out = nullptr;
    m.end_capture(*capture, /*release_allocations=*/true);
    return Outcome::capture_invalidated;
  }
  *out = static_cast<cudaGraph_t>(m.create_graph(*capture));
  m.end_capture(*capture, /*release_allocations=*/false);  // now the graph's
  return Outcome::ok;
}

Outcome capture_status(cudaStream_t stream, int* status) {
  if (status == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  int device = 0;
  if (Outcome o = stream_device(m, stream, device); o != Outcome::ok) return o;
  if (Model::is_legacy_stream(stream)) {
    for (auto const& [id, c] : m.captures())
      if (c.blocking && c.device == device) return Outcome::capture_implicit;  // not invalidated
    *status = kCaptureStatusNone;
    return Outcome::ok;
  }
  Capture const* capture = m.capture_of(stream, device);
  *status = capture == nullptr     ? kCaptureStatusNone
            : capture->invalidated ? kCaptureStatusInvalidated
                                   : kCaptureStatusActive;
  return Outcome::ok;
}

Outcome exchange_capture_mode(int* mode) {
  if (mode == nullptr) return Outcome::invalid_value;
  if (*mode != kCaptureModeGlobal && *mode != kCaptureModeThreadLocal && *mode != kCaptureModeRelaxed)
    return Outcome::invalid_value;
  int const previous = capture_mode();
  set_capture_mode(*mode);
  *mode = previous;
  return Outcome::ok;
}

Outcome destroy_graph(cudaGraph_t graph) {
  Model& m = model();
  Lock lock(m.mu);
  Graph* g = m.find_graph(graph);
  if (g == nullptr) return Outcome::invalid_value;
  m.destroy_graph(*g);
  return Outcome::ok;
}

Outcome graph_nodes(cudaGraph_t graph, cudaGraphNode_t* nodes, std::size_t* count) {
  if (count == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Graph* g = m.find_graph(graph);
  if (g == nullptr) return Outcome::invalid_value;
  std::size_t const n = g->nodes.size();
  if (nodes == nullptr) {
    *count = n;
    return Outcome::ok;
  }
  // As cuda.h says: at most *count entries; the ones past the graph's nodes NULL.
  std::size_t const k = std::min(*count, n);
  for (std::size_t i = 0; i < *count; ++i)
    nodes[i] = i < k ? reinterpret_cast<cudaGraphNode_t>(&g->nodes[i]) : nullptr;
  *count = k;
  return Outcome::ok;
}

Outcome reset_device(int device) {
  Model& m = model();
  if (!m.valid_device(device)) return Outcome::invalid_device;
  Lock lock(m.mu);
  m.reset_device(device);
  m.counters.primary_context_resets.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

// ---- peer access

Outcome can_access_peer(int device, int peer, int* out) {
  if (out == nullptr) return Outcome::invalid_value;
  Model const& m = model();
  if (!m.valid_device(device) || !m.valid_device(peer)) return Outcome::invalid_device;
  *out = device != peer && !config().no_peer ? 1 : 0;
  return Outcome::ok;
}

Outcome enable_peer_access(Context& from, void const* peer, unsigned flags) {
  if (flags != 0) return Outcome::invalid_value;
  Model& m = model();
  Context* to = peer == nullptr ? nullptr : m.find_context(peer);
  if (to == nullptr) return Outcome::invalid_context;
  if (to == &from) return Outcome::invalid_device;  // its own context / device
  if (config().no_peer) return Outcome::peer_unsupported;
  Lock lock(m.mu);
  if (!from.peers.insert(to).second) return Outcome::peer_already_enabled;
  m.counters.peer_access_enables.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome disable_peer_access(Context& from, void const* peer) {
  Model& m = model();
  Context* to = peer == nullptr ? nullptr : m.find_context(peer);
  if (to == nullptr) return Outcome::invalid_context;
  Lock lock(m.mu);
  if (from.peers.erase(to) == 0) return Outcome::peer_not_enabled;
  m.counters.peer_access_disables.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

// ---- pool access

namespace {

// The access an entry asks for, if the double accepts it for some device.
bool known_access(unsigned flags, Access& out) {
  switch (flags) {
    case static_cast<unsigned>(Access::none): out = Access::none; return true;
    case static_cast<unsigned>(Access::read_write): out = Access::read_write; return true;
    default: return false;  // read (not for device memory) or not a flag value at all
  }
}

// Checks one entry of set_pool_access against `pool`. m.mu must be held.
Outcome check_access_entry(Model const& m, Pool const& pool, AccessEntry const& e) {
  if (!e.on_device || !m.valid_device(e.device)) return Outcome::invalid_value;
  Access access = Access::none;
  if (!known_access(e.flags, access)) return Outcome::invalid_value;
  // The pool's own device keeps read-write access: it can be restated, never changed.
  if (e.device == pool.device) return access == Access::read_write ? Outcome::ok : Outcome::invalid_device;
  if (access != Access::none && config().no_peer) return Outcome::invalid_device;  // not peer capable
  return Outcome::ok;
}

}  // namespace

Outcome set_pool_access(cudaMemPool_t handle, AccessEntry const* entries, std::size_t count) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (entries == nullptr && count != 0) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Pool* pool = m.find_pool(handle);
  if (pool == nullptr) return Outcome::invalid_value;
  for (std::size_t i = 0; i < count; ++i)
    if (entries[i].on_device && entries[i].device == pool->device)
      m.counters.pool_access_owner_entries.fetch_add(1, std::memory_order_relaxed);
  // All or nothing: every entry is checked before any is applied.
  for (std::size_t i = 0; i < count; ++i)
    if (Outcome o = check_access_entry(m, *pool, entries[i]); o != Outcome::ok) return o;
  for (std::size_t i = 0; i < count; ++i) {
    Access access = Access::none;
    known_access(entries[i].flags, access);
    if (entries[i].device != pool->device) m.set_pool_access(*pool, entries[i].device, access);
  }
  m.counters.pool_access_sets.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome get_pool_access(cudaMemPool_t handle, AccessEntry const& location, unsigned* flags) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (flags == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Pool const* pool = m.find_pool(handle);
  if (pool == nullptr) return Outcome::invalid_value;
  if (!location.on_device || !m.valid_device(location.device)) return Outcome::invalid_value;
  *flags = static_cast<unsigned>(Model::pool_access(*pool, location.device));
  return Outcome::ok;
}

// ---- sharing

namespace {

// What the double writes into an exported handle or export data: enough to
// tell the exported things apart (never read back: importing is not modelled).
struct ShareData {
  char magic[8];               // "cdpool", "cdfabric", "cdptr" or "cdipc"
  std::uint64_t pool = 0;      // Pool::id (0 for an IPC handle)
  std::uint64_t serial = 0;    // Allocation::serial (0 for a pool handle)
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::int32_t device = 0;
};
static_assert(sizeof(ShareData) <= kShareDataSize);

void write_share_data(void* out, char const* magic, std::uint64_t pool, Allocation const* a, void const* p) {
  ShareData d{};
  std::memcpy(d.magic, magic, std::min(std::strlen(magic), sizeof d.magic));
  d.pool = pool;
  if (a != nullptr) {
    d.serial = a->serial;
    d.address = reinterpret_cast<std::uintptr_t>(p);
    d.size = a->size;
    d.device = a->device;
  }
  unsigned char bytes[kShareDataSize] = {};
  std::memcpy(bytes, &d, sizeof d);
  std::memcpy(out, bytes, sizeof bytes);
}

bool single_handle_type(unsigned t) { return t != 0 && (t & (t - 1)) == 0; }

}  // namespace

Outcome export_pool(cudaMemPool_t handle, unsigned handle_type, unsigned long long flags, void* handle_out) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (handle_out == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Pool const* pool = m.find_pool(handle);
  if (pool == nullptr || flags != 0) return Outcome::invalid_value;
  // Exactly one handle type, one the pool was created with.
  if (!single_handle_type(handle_type) || (pool->handle_types & handle_type) == 0) return Outcome::invalid_value;
  switch (handle_type) {
    case cudaMemHandleTypePosixFileDescriptor: {
      int const fd = eventfd(0, EFD_CLOEXEC);  // a real descriptor, the caller's to close
      if (fd < 0) return Outcome::out_of_memory;
      *static_cast<int*>(handle_out) = fd;
      break;
    }
    case cudaMemHandleTypeFabric:
      if (!config().fabric_ok) return Outcome::not_permitted;  // no IMEX channel, as on a lone H200
      write_share_data(handle_out, "cdfabric", pool->id, nullptr, nullptr);
      break;
    default: return Outcome::not_supported;  // the Windows handle types
  }
  m.counters.pool_handle_exports.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome export_pool_pointer(void const* p, void* out) {
  if (Outcome o = pools_supported(); o != Outcome::ok) return o;
  if (out == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Allocation const* a = m.find_allocation(p);
  if (a == nullptr || a->pool == nullptr || a->pool->handle_types == 0) return Outcome::invalid_value;
  write_share_data(out, "cdptr", a->pool->id, a, p);
  m.counters.pool_pointer_exports.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

Outcome ipc_mem_handle(void const* p, void* out) {
  if (out == nullptr) return Outcome::invalid_value;
  Model& m = model();
  Lock lock(m.mu);
  Allocation const* a = m.find_allocation(p);
  // cudaMalloc / cuMemAlloc memory only: pool memory has no legacy IPC handle.
  if (a == nullptr || a->pool != nullptr) return Outcome::invalid_value;
  write_share_data(out, "cdipc", 0, a, p);
  m.counters.ipc_mem_handles.fetch_add(1, std::memory_order_relaxed);
  return Outcome::ok;
}

}  // namespace cuda_double::operations
