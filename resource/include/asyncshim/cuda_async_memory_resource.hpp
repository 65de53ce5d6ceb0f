/**
 * @file
 * @brief `asyncshim::cuda_async_memory_resource`: a device memory resource
 * backed by a CUDA memory pool of its own.
 *
 * The pool is made with `cudaMemPoolCreate`; memory is allocated with
 * `cudaMallocFromPoolAsync` and freed with `cudaFreeAsync`, ordered on the
 * stream given. The API and the constructor's defaults are those of RMM's
 * `cuda_async_memory_resource`:
 *   - `initial_pool_size` absent: the pool is primed with half of the device's
 *     free memory (allocated and freed at once); 0 means "do not prime";
 *   - `release_threshold` absent: the device's total memory;
 *   - `export_handle_type` absent: none (no inter-process sharing).
 * The pool is created on the calling thread's current device.
 *
 * A program linking `asyncshim::resource` calls its own CUDA runtime (the
 * library brings `CUDA::cudart`). Linked into libasyncshim.so, the resource's
 * `cudaMallocFromPoolAsync`, `cudaFreeAsync` and other CUDA runtime calls
 * resolve instead to the shim's own hidden forwarders
 * (`shim/cuda/resource_backend.cpp`), which call the real runtime the program
 * uses, or the driver, not to the `cudaMalloc`/`cudaFree` the shim interposes
 * on the program: the resource never goes through the shim itself.
 *
 * libasyncshim.so does not use the first default: a preloaded library lands in
 * every CUDA process of a job, and half of the free memory in each of them
 * starves their neighbours. The shim passes 0 unless ASYNCSHIM_INITIAL_POOL_SIZE
 * asks for a size (half-free asks for this class's default), and gives unused
 * memory back when the process goes idle or the device runs short (README,
 * "Sharing a GPU"). A program that owns its GPU and uses this class directly
 * keeps RMM's behaviour.
 */
#pragma once

#include <asyncshim/device_memory_resource.hpp>

#include <cstdint>
#include <optional>

namespace asyncshim {

/**
 * @brief A `device_memory_resource` that allocates from a CUDA memory pool
 * (`cudaMemPool_t`) it creates and owns, on one device.
 *
 * Not copyable or movable: the pool belongs to the object. Allocation and
 * deallocation are stream-ordered and thread-safe (the pool's own guarantee);
 * memory from one resource may be freed through another that `is_equal` to it
 * (the same pool).
 */
class ASYNCSHIM_PUBLIC cuda_async_memory_resource final : public device_memory_resource {
 public:
  /** @brief How the pool may be shared with other processes; the values are
   *  exactly CUDA's `cudaMemAllocationHandleType`. */
  enum class allocation_handle_type : std::int32_t {
    none = 0x0,                   // no export
    posix_file_descriptor = 0x1,  // a file descriptor (POSIX only)
    win32 = 0x2,                  // a Win32 NT handle
    win32_kmt = 0x4,              // a Win32 KMT handle
    fabric = 0x8,                 // a fabric handle (cudaMemFabricHandle_t)
  };

  /**
   * @brief Creates a pool on the calling thread's current device and primes it.
   *
   * @param initial_pool_size Bytes to reserve at once (allocated and freed
   *        again, so the pool holds them); absent: half of the device's free
   *        memory, read before the pool is made (RMM's default); 0: start empty.
   * @param release_threshold Bytes of unused memory the pool keeps at each
   *        synchronization (`cudaMemPoolAttrReleaseThreshold`); absent: the
   *        device's total memory, so it keeps everything.
   * @param export_handle_type Handle type the pool can be exported with
   *        (`cudaMemPoolExportToShareableHandle`); absent: `none`.
   * @param maximum_pool_size The most the pool may reserve
   *        (`cudaMemPoolProps::maxSize`): an allocation that would need more
   *        fails with `cudaErrorMemoryAllocation`; absent: no bound but the
   *        device's memory.
   *
   * @throws asyncshim::logic_error if the driver is older than CUDA 11.2, the
   *         device has no memory-pool support (`cudaDevAttrMemoryPoolsSupported`),
   *         or it does not list `export_handle_type` in
   *         `cudaDevAttrMemoryPoolSupportedHandleTypes`.
   * @throws asyncshim::out_of_memory if the initial pool cannot be reserved.
   * @throws asyncshim::cuda_error if any other CUDA call fails; its message
   *         names the call and the CUDA error. On any failure a pool already
   *         made is destroyed again, and CUDA's last-error state is cleared.
   */
  explicit cuda_async_memory_resource(std::optional<std::size_t> initial_pool_size = {},
                                      std::optional<std::size_t> release_threshold = {},
                                      std::optional<allocation_handle_type> export_handle_type = {},
                                      std::optional<std::size_t> maximum_pool_size = {});

  /**
   * @brief Destroys the pool (`cudaMemPoolDestroy`), unless the process is
   * already exiting (the driver may be gone then). Never throws; tolerates a
   * runtime that is shutting down.
   */
  ~cuda_async_memory_resource() override;

  cuda_async_memory_resource(cuda_async_memory_resource const&) = delete;
  cuda_async_memory_resource(cuda_async_memory_resource&&) = delete;
  cuda_async_memory_resource& operator=(cuda_async_memory_resource const&) = delete;
  cuda_async_memory_resource& operator=(cuda_async_memory_resource&&) = delete;

  /**
   * @brief The pool's handle, e.g. for `cudaMemPoolGetAttribute` or
   * `cudaMemPoolExportToShareableHandle`. Owned by the resource: do not
   * destroy it.
   * @return the `cudaMemPool_t` made by the constructor.
   */
  [[nodiscard]] cudaMemPool_t pool_handle() const noexcept { return pool_; }

  /**
   * @brief The device the pool lives on.
   * @return the CUDA device number that was current at construction.
   */
  [[nodiscard]] int device() const noexcept { return device_; }

  /**
   * @brief Allocates `bytes` from the pool, ordered on `stream`, without
   * throwing (an extension of RMM's API; the shim uses it, as it reports CUDA
   * error codes).
   *
   * Calls `cudaMallocFromPoolAsync(ptr, bytes, pool_handle(), stream)`; inside
   * libasyncshim.so that is the shim's forwarder to the real runtime (see the
   * file comment).
   *
   * @param ptr Receives the allocation (256-byte aligned); as CUDA leaves it
   *        on failure.
   * @param bytes Size in bytes.
   * @param stream Stream the allocation is ordered on.
   * @return what `cudaMallocFromPoolAsync` returned (`cudaSuccess`,
   *         `cudaErrorMemoryAllocation` when the pool cannot grow, ...); CUDA's
   *         last-error state is left as that call left it.
   */
  [[nodiscard]] cudaError_t try_allocate_async(void** ptr, std::size_t bytes, cuda_stream_view stream) const noexcept;

  /**
   * @brief Frees memory from this pool, ordered on `stream`, without throwing.
   *
   * Calls `cudaFreeAsync(ptr, stream)`; inside libasyncshim.so that is the
   * shim's forwarder to the real runtime, never the shim's interposed
   * `cudaFree`.
   *
   * @param ptr Memory allocated from this pool (or one `is_equal` to it).
   * @param stream Stream the free is ordered on: the block can be reused by
   *        work ordered after it on that stream.
   * @return what `cudaFreeAsync` returned; CUDA's last-error state is left as
   *         that call left it.
   */
  [[nodiscard]] cudaError_t try_deallocate_async(void* ptr, cuda_stream_view stream) const noexcept;

 private:
  void* do_allocate(std::size_t bytes, cuda_stream_view stream) override;
  void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept override;
  [[nodiscard]] bool do_is_equal(device_memory_resource const& other) const noexcept override;

  cudaMemPool_t pool_{};
  int device_{};
};

/**
 * @brief A readable name for a handle type.
 * @param type The handle type.
 * @return `"none"`, `"posix_file_descriptor"`, `"win32"`, `"win32_kmt"` or
 *         `"fabric"`; `"unknown"` for a value outside the enumeration.
 */
[[nodiscard]] ASYNCSHIM_PUBLIC char const* to_string(cuda_async_memory_resource::allocation_handle_type type) noexcept;

}  // namespace asyncshim
