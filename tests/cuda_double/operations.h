// operations.h: the CUDA operations that the runtime double and the driver
// double both offer (pools, stream-ordered allocation, copies, streams), each
// done once, on the model, with the checks both APIs make in the same order.
//
// INTERNAL (exported by libcuda.so.1 for libcudart_double.so only; see
// model.h). An exported CUDA function of either double does what only its API
// does (its gate, its argument types, the runtime's implicit context) and
// then calls one of these and maps the Outcome to its own error code. So the
// two APIs cannot drift apart, and neither calls an exported function of the
// other (an interposer sees exactly the calls the program makes).
//
// Every operation takes the model's lock itself. Handles are the CUDA ones:
// cudaMemPool_t and CUmemoryPool, cudaStream_t and CUstream are the same types.
#ifndef ASYNCSHIM_TESTS_CUDA_DOUBLE_OPERATIONS_H
#define ASYNCSHIM_TESTS_CUDA_DOUBLE_OPERATIONS_H

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "model.h"
#include "outcome.h"

namespace cuda_double::operations {

// not_supported when memory pools are configured off. Every pool operation
// checks this first, before its arguments.
CUDA_DOUBLE_INTERNAL Outcome pools_supported();

// ---- devices

// attr: a cudaDeviceAttr (the CUdevice_attribute values are the same); the
// attributes the double does not model read as 0.
CUDA_DOUBLE_INTERNAL Outcome device_attribute(int device, int attr, int* value);

// ---- pools

// What cudaMemPoolProps / CUmemPoolProps ask for, in the model's terms.
struct PoolProperties {
  bool pinned = false;     // allocType is the pinned type
  bool on_device = false;  // location.type is the device type
  int device = 0;          // location.id
  unsigned handle_types = 0;
  std::uint64_t max_size = 0;
};

// Reads a cudaMemPoolProps or a CUmemPoolProps (the same fields under the
// same names, but distinct types); pinned and device are the caller's API's
// names for the pinned allocation type and the device location type.
template <class Props, class AllocationType, class LocationType>
PoolProperties pool_properties(Props const& props, AllocationType pinned, LocationType device) {
  PoolProperties p;
  p.pinned = props.allocType == pinned;
  p.on_device = props.location.type == device;
  p.device = props.location.id;
  p.handle_types = static_cast<unsigned>(props.handleTypes);
  p.max_size = props.maxSize;
  return p;
}

// properties: nullptr when the caller passed no properties.
CUDA_DOUBLE_INTERNAL Outcome create_pool(PoolProperties const* properties, cudaMemPool_t* out);
CUDA_DOUBLE_INTERNAL Outcome destroy_pool(cudaMemPool_t handle);
// attr: a cudaMemPoolAttr (the CUmemPool_attribute values are the same).
CUDA_DOUBLE_INTERNAL Outcome set_pool_attribute(cudaMemPool_t handle, int attr, void const* value);
CUDA_DOUBLE_INTERNAL Outcome get_pool_attribute(cudaMemPool_t handle, int attr, void* value);

// ---- stream-ordered allocation
//
// out: nullptr when the caller passed no output (invalid_value). *out is
// written exactly when the outcome is ok (the allocation; nullptr for size 0)
// or out_of_memory (nullptr): the other outcomes refuse the call before
// anything is tried, and CUDA leaves the caller's output alone then. A special
// stream (0, legacy, per-thread) needs a current context (invalid_context).

// From the default pool of the stream's device.
CUDA_DOUBLE_INTERNAL Outcome allocate_async(std::size_t size, cudaStream_t stream, void** out);
CUDA_DOUBLE_INTERNAL Outcome allocate_from_pool_async(cudaMemPool_t handle, std::size_t size, cudaStream_t stream,
                                                      void** out);
// p must be the start of a live pool allocation (so not nullptr).
CUDA_DOUBLE_INTERNAL Outcome free_async(void* p, cudaStream_t stream);

// ---- copies and fills
//
// A pointer inside a live allocation must have the whole range inside it;
// a count of 0 does nothing and always succeeds.

enum class CopyDirection {
  unchecked,       // cudaMemcpy: either side may be host or device memory
  host_to_device,  // the destination must be device memory
  device_to_host,  // the source must be device memory
};
CUDA_DOUBLE_INTERNAL Outcome copy(void* dst, void const* src, std::size_t count, CopyDirection direction);
// dst must be device memory.
CUDA_DOUBLE_INTERNAL Outcome fill(void* dst, unsigned char value, std::size_t count);

// ---- streams

// flags: 0 or the non-blocking flag (cudaStreamNonBlocking == CU_STREAM_NON_BLOCKING).
CUDA_DOUBLE_INTERNAL Outcome create_stream(int device, unsigned flags, cudaStream_t* out);
CUDA_DOUBLE_INTERNAL Outcome destroy_stream(cudaStream_t stream);
// The synchronization event of the stream's device (see Model::trim_pools).
CUDA_DOUBLE_INTERNAL Outcome synchronize_stream(cudaStream_t stream);

}  // namespace cuda_double::operations

#endif  // ASYNCSHIM_TESTS_CUDA_DOUBLE_OPERATIONS_H
