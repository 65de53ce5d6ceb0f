// operations.hpp: the CUDA operations of the doubles (allocation, pools,
// stream-ordered allocation, copies, streams, events, stream capture, graphs,
// synchronization, reset, peer and pool access, exports, imports and legacy
// IPC), each done once, on the model, with its checks in the order the real
// APIs make them.
//
// INTERNAL (exported by libcuda.so.1 for libcudart_double.so only; see
// model.hpp). An exported CUDA function of either double does what only its API
// does (its gate, its argument types, the runtime's implicit context) and
// then calls one of these and maps the operation_outcome to its own error code. So the
// two APIs cannot drift apart. The runtime double calls the memory and pool
// operations directly; the stream, event, capture, graph, synchronization,
// reset, peer access, pool access, export, import and IPC ones only the driver double
// calls, and the runtime reaches them through the driver functions it fetched
// with cuGetProcAddress_v2 (never through an exported symbol), as the real
// runtime does.
//
// Every operation takes the model's lock itself. Handles are the CUDA ones:
// cudaMemPool_t and CUmemoryPool, cudaStream_t and CUstream, cudaEvent_t and
// CUevent, cudaGraph_t and CUgraph, cudaGraphNode_t and CUgraphNode are the
// same types.
//
// Stream capture (the rules are in cuda_double.hpp): operations that enqueue
// work (stream-ordered allocation and free, event record, stream wait) put it
// into the stream's capture instead when the stream is capturing, and the
// "potentially unsafe" ones (plain allocation and free, synchronization,
// queries, stream-ordered calls on the legacy stream) first apply the calling
// thread's capture mode.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "model.hpp"
#include "outcome.hpp"

namespace cuda_double::operations {

// not_supported when memory pools are configured off. Every pool operation
// checks this first, before its arguments.
CUDA_DOUBLE_INTERNAL operation_outcome pools_supported();

// ---- devices

// attr: a cudaDeviceAttr (the CUdevice_attribute values are the same); the
// attributes the double does not model read as 0.
CUDA_DOUBLE_INTERNAL operation_outcome device_attribute(int device, int attr, int* value);

// ---- plain allocation (cudaMalloc / cuMemAlloc_v2, cudaFree / cuMemFree_v2)

// size > 0 and out non-null (the APIs handle the rest themselves). kind:
// runtime (cudaMalloc, counted in native_mallocs) or driver (cuMemAlloc_v2,
// driver_mallocs). Potentially unsafe.
CUDA_DOUBLE_INTERNAL operation_outcome allocate(int device, std::size_t size, allocation_kind kind, void** out);
// ---- pinned host memory (cudaMallocHost, cudaHostAlloc, cuMemAllocHost_v2,
// cuMemHostAlloc; cudaFreeHost, cuMemFreeHost)

// size > 0, out non-null, flags valid (the APIs check them): host memory no
// device is charged for, made in `device`'s context. Counted in host_mallocs.
CUDA_DOUBLE_INTERNAL operation_outcome allocate_host(int device, std::size_t size, unsigned flags, void** out);
// p non-null: waits until no device can still use it (as cudaFreeHost does);
// invalid_value for anything but the start of pinned host memory.
CUDA_DOUBLE_INTERNAL operation_outcome release_host(void* p);
// The device address of pinned host memory (any address in it): the same
// address (every device shares one address space).
CUDA_DOUBLE_INTERNAL operation_outcome host_device_pointer(void const* p, void** out);
// The cudaHostAlloc flags pinned host memory was made with (any address in it).
CUDA_DOUBLE_INTERNAL operation_outcome host_flags(void const* p, unsigned* out);

// cudaMallocPitch, cudaMalloc3D (rows: height × depth) and cuMemAllocPitch_v2
// (kind driver), width > 0 and rows > 0: rows of `width` bytes rounded up to
// the texture alignment (the double's native rule), counted in
// pitched_mallocs; invalid_value beyond the largest pitch (the real driver
// serves such a row; the double spares a row of over 2 GiB). *pitch is
// written also when out of memory, as the real driver does.
CUDA_DOUBLE_INTERNAL operation_outcome allocate_pitched(int device, std::size_t width, std::size_t rows,
                                                        allocation_kind kind, void** out, std::size_t* pitch);
// p non-null; any live allocation. caller: runtime (cudaFree, counted in
// native_frees) or driver (cuMemFree_v2, driver_frees). Potentially unsafe.
CUDA_DOUBLE_INTERNAL operation_outcome release(void* p, allocation_kind caller);

// ---- pools

// What cudaMemPoolProps / CUmemPoolProps ask for, in the model's terms.
struct pool_settings {
  bool pinned = false;     // allocType is the pinned type
  bool on_device = false;  // location.type is the device type
  bool on_host = false;    // location.type is the host type (id ignored)
  int device = 0;          // location.id
  unsigned handle_types = 0;
  std::uint64_t max_size = 0;
};

// Reads a cudaMemPoolProps or a CUmemPoolProps (the same fields under the
// same names, but distinct types); pinned and device are the caller's API's
// names for the pinned allocation type and the device location type.
template <class Props, class AllocationType, class LocationType>
pool_settings pool_properties(Props const& props, AllocationType pinned, LocationType device, LocationType host)
{
  pool_settings p;
  p.pinned = props.allocType == pinned;
  p.on_device = props.location.type == device;
  p.on_host = props.location.type == host;
  p.device = props.location.id;
  p.handle_types = static_cast<unsigned>(props.handleTypes);
  p.max_size = props.maxSize;
  return p;
}

// properties: nullptr when the caller passed no properties.
CUDA_DOUBLE_INTERNAL operation_outcome create_pool(pool_settings const* properties, cudaMemPool_t* out);
CUDA_DOUBLE_INTERNAL operation_outcome destroy_pool(cudaMemPool_t handle);
// attr: a cudaMemPoolAttr (the CUmemPool_attribute values are the same).
CUDA_DOUBLE_INTERNAL operation_outcome set_pool_attribute(cudaMemPool_t handle, int attr, void const* value);
CUDA_DOUBLE_INTERNAL operation_outcome get_pool_attribute(cudaMemPool_t handle, int attr, void* value);
// cuMemPoolTrimTo / cudaMemPoolTrimTo: reserved -> max(used, min(reserved, keep)).
CUDA_DOUBLE_INTERNAL operation_outcome trim_pool(cudaMemPool_t handle, std::size_t keep);

// ---- stream-ordered allocation
//
// out: nullptr when the caller passed no output (invalid_value). *out is
// written exactly when the outcome is ok (the allocation; nullptr for size 0)
// or out_of_memory (nullptr): the other outcomes refuse the call before
// anything is tried, and CUDA leaves the caller's output alone then. A special
// stream (0, legacy, per-thread) needs a current context (invalid_context).

// From the default pool of the stream's device.
CUDA_DOUBLE_INTERNAL operation_outcome allocate_async(std::size_t size, cudaStream_t stream, void** out);
CUDA_DOUBLE_INTERNAL operation_outcome allocate_from_pool_async(cudaMemPool_t handle, std::size_t size,
                                                                cudaStream_t stream, void** out);
// p must be the start of a live pool allocation (so not nullptr).
// from_driver: a cuMemFreeAsync(_ptsz) call (counted by kind of stream).
CUDA_DOUBLE_INTERNAL operation_outcome free_async(void* p, cudaStream_t stream, bool from_driver);

// ---- copies and fills
//
// A pointer inside a live allocation must have the whole range inside it;
// a count of 0 does nothing and always succeeds.

enum class copy_direction {
  unchecked,       // cudaMemcpy: either side may be host or device memory
  host_to_device,  // the destination must be device memory
  device_to_host,  // the source must be device memory
};
CUDA_DOUBLE_INTERNAL operation_outcome copy(void* dst, void const* src, std::size_t count, copy_direction direction);
// dst must be device memory.
CUDA_DOUBLE_INTERNAL operation_outcome fill(void* dst, unsigned char value, std::size_t count);

// ---- kernels

// cuLaunchKernel(_ptsz) on a stream (validated, as for stream_flags): runs
// nothing; under the virtual GPU, a task on the stream (none in a capture)
// that touches the ranges its parameters name when `touching` (the layout of
// cuda_double_touch_kernel).
CUDA_DOUBLE_INTERNAL operation_outcome launch(cudaStream_t stream, void** kernel_params, bool touching);
// cuMemcpyAsync / cuMemsetD8Async: work on the stream touching the device
// memory among its ranges (the bytes move at once; in a capture, not at all).
CUDA_DOUBLE_INTERNAL operation_outcome copy_async(cudaStream_t stream, void* dst, void const* src, std::size_t count);
CUDA_DOUBLE_INTERNAL operation_outcome fill_async(cudaStream_t stream, void* dst, unsigned char value,
                                                  std::size_t count);

// ---- streams

// flags: 0 or the non-blocking flag (cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING);
// priority is clamped to [greatest_stream_priority, least_stream_priority].
CUDA_DOUBLE_INTERNAL operation_outcome create_stream(int device, unsigned flags, int priority, cudaStream_t* out);
CUDA_DOUBLE_INTERNAL operation_outcome destroy_stream(cudaStream_t stream);
CUDA_DOUBLE_INTERNAL operation_outcome stream_flags(cudaStream_t stream, unsigned* out);
// The synchronization event of the stream's device (see model_state::trim_pools).
// Potentially unsafe; a capturing stream cannot be synchronized.
CUDA_DOUBLE_INTERNAL operation_outcome synchronize_stream(cudaStream_t stream);
// As synchronize_stream, without the trimming (everything is complete).
CUDA_DOUBLE_INTERNAL operation_outcome query_stream(cudaStream_t stream);
// cuCtxSynchronize: the synchronization event of the device. Potentially unsafe.
// The work of a context of `device`: `domain`, its context_state::domain.
CUDA_DOUBLE_INTERNAL operation_outcome synchronize_device(int device, int domain);
// cuCtxDestroy of a context made with cuCtxCreate: its work finishes first
// (as teardown waits for it), then the handle is no context any more.
CUDA_DOUBLE_INTERNAL operation_outcome destroy_context(context_state& context);

// ---- events

// flags: CU_EVENT_* / cudaEvent* (the same values).
CUDA_DOUBLE_INTERNAL operation_outcome create_event(int device, unsigned flags, cudaEvent_t* out);
CUDA_DOUBLE_INTERNAL operation_outcome destroy_event(cudaEvent_t event);
CUDA_DOUBLE_INTERNAL operation_outcome record_event(cudaEvent_t event, cudaStream_t stream);
// synchronize: cuEventSynchronize, else cuEventQuery. Potentially unsafe.
CUDA_DOUBLE_INTERNAL operation_outcome query_event(cudaEvent_t event, bool synchronize);
CUDA_DOUBLE_INTERNAL operation_outcome wait_event(cudaStream_t stream, cudaEvent_t event, unsigned flags);

// ---- stream capture and graphs (mode / status: the capture_mode_* and capture_status_* values)

CUDA_DOUBLE_INTERNAL operation_outcome begin_capture(cudaStream_t stream, int mode);
CUDA_DOUBLE_INTERNAL operation_outcome end_capture(cudaStream_t stream, cudaGraph_t* out);
CUDA_DOUBLE_INTERNAL operation_outcome capture_status(cudaStream_t stream, int* status);
CUDA_DOUBLE_INTERNAL operation_outcome exchange_capture_mode(int* mode);
CUDA_DOUBLE_INTERNAL operation_outcome destroy_graph(cudaGraph_t graph);
// Executable graphs: a launch is one task on the stream (captured: its
// touches join the capture).
CUDA_DOUBLE_INTERNAL operation_outcome instantiate_graph(cudaGraph_t graph, cudaGraphExec_t* out);
CUDA_DOUBLE_INTERNAL operation_outcome launch_graph(cudaGraphExec_t exec, cudaStream_t stream);
CUDA_DOUBLE_INTERNAL operation_outcome destroy_graph_exec(cudaGraphExec_t exec);
CUDA_DOUBLE_INTERNAL operation_outcome graph_nodes(cudaGraph_t graph, cudaGraphNode_t* nodes, std::size_t* count);

// ---- devices

// cuDevicePrimaryCtxReset_v2 (see model_state::reset_device).
CUDA_DOUBLE_INTERNAL operation_outcome reset_device(int device);

// ---- peer access (only the driver double calls these; the runtime's
// cudaDevice*PeerAccess reach them through the driver functions)

// *out: 1 if contexts on `device` can be given access to `peer`'s memory, 0
// for device == peer and under CUDA_DOUBLE_NO_PEER.
CUDA_DOUBLE_INTERNAL operation_outcome can_access_peer(int device, int peer, int* out);
// from: the calling thread's current context; peer: the handle the caller gave.
CUDA_DOUBLE_INTERNAL operation_outcome enable_peer_access(context_state& from, void const* peer, unsigned flags);
CUDA_DOUBLE_INTERNAL operation_outcome disable_peer_access(context_state& from, void const* peer);

// ---- pool access (cuMemPoolSetAccess / cuMemPoolGetAccess)

// A CUmemAccessDesc / cudaMemAccessDesc (or, for get_pool_access, a
// CUmemLocation / cudaMemLocation: flags unused), in the model's terms.
struct access_descriptor {
  bool on_device = false;  // location.type is the device type
  int device = 0;          // location.id
  unsigned flags = 0;      // CU_MEM_ACCESS_FLAGS_PROT_* == cudaMemAccessFlagsProt*
};
// entries: nullptr only with count 0. Every entry is checked before any is applied.
CUDA_DOUBLE_INTERNAL operation_outcome set_pool_access(cudaMemPool_t handle, access_descriptor const* entries,
                                                       std::size_t count);
CUDA_DOUBLE_INTERNAL operation_outcome get_pool_access(cudaMemPool_t handle, access_descriptor const& location,
                                                       unsigned* flags);

// ---- sharing between processes

// The size of CUmemPoolPtrExportData, cudaMemPoolPtrExportData,
// CUmemFabricHandle, CUipcMemHandle and cudaIpcMemHandle_t.
inline constexpr std::size_t share_data_size = 64;
// handle_type: one CU_MEM_HANDLE_TYPE_* / cudaMemHandleType* value; the
// handle is written to handle_out (an int for a POSIX file descriptor,
// share_data_size bytes for a fabric handle).
CUDA_DOUBLE_INTERNAL operation_outcome export_pool(cudaMemPool_t handle, unsigned handle_type, unsigned long long flags,
                                                   void* handle_out);
// out: share_data_size bytes, or nullptr (invalid_value).
CUDA_DOUBLE_INTERNAL operation_outcome export_pool_pointer(void const* p, void* out);
CUDA_DOUBLE_INTERNAL operation_outcome ipc_mem_handle(void const* p, void* out);
// handle: a POSIX file descriptor cast to a pointer; the pool is imported on
// the exporting pool's device, where the memory is, whichever device the
// importing context's is.
CUDA_DOUBLE_INTERNAL operation_outcome import_pool(void* handle, unsigned handle_type, unsigned long long flags,
                                                   cudaMemPool_t* out);
// data: share_data_size bytes of export_pool_pointer, or nullptr (invalid_value).
CUDA_DOUBLE_INTERNAL operation_outcome import_pool_pointer(cudaMemPool_t handle, void const* data, void** out);
// Legacy IPC: handle is share_data_size bytes; flags the CU_IPC_MEM_* flags.
CUDA_DOUBLE_INTERNAL operation_outcome open_ipc_mem_handle(void const* handle, unsigned flags, void** out);
CUDA_DOUBLE_INTERNAL operation_outcome close_ipc_mem_handle(void const* p);

// ---- pointer queries

// cuMemGetAddressRange: the live allocation containing p (any kind); base and
// size may be nullptr. not_found when p is in none.
CUDA_DOUBLE_INTERNAL operation_outcome address_range(void const* p, void** base, std::size_t* size);

}  // namespace cuda_double::operations
