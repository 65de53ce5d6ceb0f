// The interface every device memory resource offers (RMM's device_memory_resource):
// public non-virtual entry points forwarding to three private virtuals.
#pragma once

#include <asyncshim/cuda_stream_view.hpp>
#include <asyncshim/errors.hpp>

#include <cstddef>

namespace asyncshim {

// Allocations are at least this aligned (what cudaMalloc guarantees).
inline constexpr std::size_t cuda_allocation_alignment = 256;

class ASYNCSHIM_PUBLIC device_memory_resource {
 public:
  device_memory_resource() = default;
  virtual ~device_memory_resource() = default;
  device_memory_resource(device_memory_resource const&) = default;
  device_memory_resource(device_memory_resource&&) noexcept = default;
  device_memory_resource& operator=(device_memory_resource const&) = default;
  device_memory_resource& operator=(device_memory_resource&&) noexcept = default;

  /**
   * @brief Allocates at least `bytes` bytes, ordered on `stream`, aligned to 256 bytes.
   * @param bytes Size in bytes.
   * @param stream Stream the allocation is ordered on (default: the legacy default stream).
   * @return the allocation.
   * @throws asyncshim::out_of_memory when the memory is not there.
   * @throws asyncshim::cuda_error on other failures.
   */
  void* allocate(std::size_t bytes, cuda_stream_view stream = cuda_stream_view{}) { return do_allocate(bytes, stream); }

  /**
   * @brief Frees memory from allocate() with the same `bytes`, ordered on `stream`.
   * @param ptr The allocation.
   * @param bytes The size it was allocated with.
   * @param stream Stream the free is ordered on.
   * Never throws: a failure is left in CUDA's last-error state.
   */
  void deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream = cuda_stream_view{}) noexcept
  {
    do_deallocate(ptr, bytes, stream);
  }

  /**
   * @brief Alignment overloads, on the default stream (and `allocate_async` /
   * `deallocate_async` below, on a stream given).
   * @param bytes Size in bytes, rounded up to a multiple of `alignment`.
   * @param alignment A power of two no larger than 256 (the pool's guarantee).
   * @return the allocation.
   * @throws asyncshim::logic_error for any other alignment.
   * @throws asyncshim::out_of_memory when the rounded size overflows or the
   *         memory is not there; asyncshim::cuda_error on other failures.
   */
  void* allocate(std::size_t bytes, std::size_t alignment)
  {
    return do_allocate(aligned_size(bytes, alignment), cuda_stream_view{});
  }
  void deallocate(void* ptr, std::size_t bytes, std::size_t alignment) noexcept
  {
    do_deallocate(ptr, bytes, cuda_stream_view{});
    (void)alignment;
  }

  void* allocate_async(std::size_t bytes, std::size_t alignment, cuda_stream_view stream)
  {
    return do_allocate(aligned_size(bytes, alignment), stream);
  }
  void* allocate_async(std::size_t bytes, cuda_stream_view stream) { return do_allocate(bytes, stream); }

  void deallocate_async(void* ptr, std::size_t bytes, std::size_t alignment, cuda_stream_view stream) noexcept
  {
    do_deallocate(ptr, bytes, stream);
    (void)alignment;
  }
  void deallocate_async(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept
  {
    do_deallocate(ptr, bytes, stream);
  }

  /**
   * @brief Whether memory from one resource may be freed by the other.
   * @param other Another resource.
   * @return true for the same object or, for `cuda_async_memory_resource`,
   *         the same pool.
   */
  [[nodiscard]] bool is_equal(device_memory_resource const& other) const noexcept
  {
    return this == &other || do_is_equal(other);
  }
  [[nodiscard]] bool operator==(device_memory_resource const& other) const noexcept { return is_equal(other); }
  [[nodiscard]] bool operator!=(device_memory_resource const& other) const noexcept { return !is_equal(other); }

 private:
  // Checks the alignment and rounds `bytes` up to a multiple of it.
  static std::size_t aligned_size(std::size_t bytes, std::size_t alignment);

  virtual void* do_allocate(std::size_t bytes, cuda_stream_view stream) = 0;
  virtual void do_deallocate(void* ptr, std::size_t bytes, cuda_stream_view stream) noexcept = 0;
  [[nodiscard]] virtual bool do_is_equal(device_memory_resource const& other) const noexcept = 0;
};

}  // namespace asyncshim
