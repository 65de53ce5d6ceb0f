#include "allocator.hpp"

#include "allocation_registry.hpp"
#include "device_pools.hpp"
#include "log.hpp"
#include "process_settings.hpp"
#include "runtime_binding.hpp"

#include <new>

namespace asyncshim::shim {
namespace {

// Process-wide state, made on the first interposed call and never destroyed:
// calls may still arrive from atexit handlers and static destructors.
struct shim_state {
  explicit shim_state(config::settings const& s) : settings{s}, pools{s} {}
  config::settings const& settings;
  device_pools pools;
  allocation_registry registry;
};

shim_state& state()
{
  static auto* instance = new shim_state{process_settings()};
  return *instance;
}

cudaStream_t allocation_stream(config::settings const& settings) noexcept
{
  return settings.stream == config::stream_choice::per_thread ? cudaStreamPerThread : cudaStreamLegacy;
}

// Frees a pool pointer on the stream of the device that owns it, switching the
// thread's current device for the call when it differs.
cudaError_t free_to_pool(shim_state& s, void* ptr, allocation_record const& record) noexcept
{
  cuda_async_memory_resource* pool = s.pools.get(record.device);
  if (pool == nullptr) { return cudaErrorInvalidValue; }  // cannot happen: records exist only for pools
  auto const& rt = runtime();
  int current = record.device;
  if (rt.get_device(&current) != cudaSuccess) { current = record.device; }
  if (current != record.device) { (void)rt.set_device(record.device); }
  cudaError_t const result = pool->try_deallocate_async(ptr, allocation_stream(s.settings));
  if (current != record.device) { (void)rt.set_device(current); }
  return result;
}

}  // namespace

cudaError_t allocate(void** dev_ptr, std::size_t size, void const* caller) noexcept
{
  auto const& rt = runtime(caller);
  if (!rt.found()) { return runtime_missing_error; }
  // The native call keeps exactly its own results for what the pool does not
  // serve: a null result pointer, zero bytes, a disabled shim.
  if (dev_ptr == nullptr || size == 0 || process_settings().disabled) { return rt.malloc(dev_ptr, size); }

  shim_state& s = state();
  int device = 0;
  if (rt.get_device(&device) != cudaSuccess) { return rt.malloc(dev_ptr, size); }
  cuda_async_memory_resource* pool = s.pools.get(device);
  if (pool == nullptr) { return rt.malloc(dev_ptr, size); }

  void* ptr = nullptr;
  cudaError_t const result = pool->try_allocate_async(&ptr, size, allocation_stream(s.settings));
  if (result != cudaSuccess) {
    log::debug("cudaMalloc({}) on device {}: the pool returned {}", size, device, rt.get_error_name(result));
    return result;
  }
  try {
    s.registry.insert(ptr, allocation_record{size, device});
  } catch (std::bad_alloc const&) {
    (void)pool->try_deallocate_async(ptr, allocation_stream(s.settings));
    return cudaErrorMemoryAllocation;
  }
  *dev_ptr = ptr;
  log::trace("cudaMalloc({}) on device {} -> {}", size, device, ptr);
  return cudaSuccess;
}

cudaError_t deallocate(void* ptr, void const* caller) noexcept
{
  auto const& rt = runtime(caller);
  if (!rt.found()) { return runtime_missing_error; }
  if (ptr == nullptr || process_settings().disabled) { return rt.free(ptr); }

  shim_state& s = state();
  auto const record = s.registry.take(ptr);
  // Not ours (allocated before the shim was active, by another path, or not a
  // device pointer at all): the native cudaFree gives the native answer.
  if (!record) { return rt.free(ptr); }
  log::trace("cudaFree({}) on device {} ({} bytes)", ptr, record->device, record->bytes);
  return free_to_pool(s, ptr, *record);
}

}  // namespace asyncshim::shim
