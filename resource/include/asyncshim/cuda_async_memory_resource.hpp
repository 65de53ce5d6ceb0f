// cuda_async_memory_resource: a device memory resource backed by its own CUDA
// memory pool (cudaMemPoolCreate), allocating with cudaMallocFromPoolAsync and
// freeing with cudaFreeAsync. The API and the constructor's defaults are those
// of RMM's resource of the same name:
//   - initial_pool_size absent: the pool is primed with half of the device's
//     free memory (allocated and freed at once); 0 means "do not prime";
//   - release_threshold absent: the device's total memory;
//   - export_handle_type absent: none (no inter-process sharing).
// The pool is created on the calling thread's current device.
//
// libasyncshim.so does not use the first default: a preloaded library lands in
// every CUDA process of a job, and half of the free memory in each of them
// starves their neighbours. The shim passes 0 unless ASYNCSHIM_INITIAL_POOL_SIZE
// asks for a size (half-free asks for this class's default), and gives unused
// memory back when the process goes idle or the device runs short (README,
// "Sharing a GPU"). A program that owns its GPU and uses this class directly
// keeps RMM's behaviour.
#pragma once

#include <asyncshim/device_memory_resource.hpp>

#include <cstdint>
#include <optional>

namespace asyncshim {

class ASYNCSHIM_PUBLIC cuda_async_memory_resource final : public device_memory_resource {
 public:
  // Values are exactly CUDA's cudaMemAllocationHandleType.
  enum class allocation_handle_type : std::int32_t {
    none = 0x0,                   // no export
    posix_file_descriptor = 0x1,  // a file descriptor (POSIX only)
    win32 = 0x2,                  // a Win32 NT handle
    win32_kmt = 0x4,              // a Win32 KMT handle
    fabric = 0x8,                 // a fabric handle (cudaMemFabricHandle_t)
  };

  // Throws logic_error when the device has no memory-pool support or does not
  // list `export_handle_type` in cudaDevAttrMemoryPoolSupportedHandleTypes,
  // out_of_memory when the initial pool cannot be reserved, cuda_error otherwise.
  explicit cuda_async_memory_resource(std::optional<std::size_t> initial_pool_size = {},
                                      std::optional<std::size_t> release_threshold = {},
                                      std::optional<allocation_handle_type> export_handle_type = {});

  // Destroys the pool, unless the process is already exiting (the driver may be
  // gone then); never throws, tolerates a runtime that is shutting down.
  ~cuda_async_memory_resource() override;

  cuda_async_memory_resource(cuda_async_memory_resource const&) = delete;
  cuda_async_memory_resource(cuda_async_memory_resource&&) = delete;
  cuda_async_memory_resource& operator=(cuda_async_memory_resource const&) = delete;
  cuda_async_memory_resource& operator=(cuda_async_memory_resource&&) = delete;

  [[nodiscard]] cudaMemPool_t pool_handle() const noexcept { return pool_; }
  // The device the pool lives on.
  [[nodiscard]] int device() const noexcept { return device_; }

  // Non-throwing primitives (an extension of RMM's API, used by the shim, which
  // reports CUDA error codes): they return what cudaMallocFromPoolAsync /
  // cudaFreeAsync returned and leave CUDA's last-error state as that call left it.
  [[nodiscard]] cudaError_t try_allocate_async(void** ptr, std::size_t bytes, cuda_stream_view stream) const noexcept;
  [[nodiscard]] cudaError_t try_deallocate_async(void* ptr, cuda_stream_view stream) const noexcept;

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  cudaMemPool_t pool_{};
  int device_{};
};

// A readable name for a handle type, e.g. "posix_file_descriptor".
[[nodiscard]] ASYNCSHIM_PUBLIC char const* to_string(cuda_async_memory_resource::allocation_handle_type type) noexcept;

}  // namespace asyncshim
