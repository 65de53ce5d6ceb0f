#include <asyncshim/cuda_async_memory_resource.hpp>

#include "cuda_check.hpp"
#include "process_exit.hpp"

#include <string>

namespace asyncshim {
namespace {

constexpr int first_driver_with_memory_pools = 11020;  // CUDA 11.2

std::string handle_types_text(int mask)
{
  using type = cuda_async_memory_resource::allocation_handle_type;
  std::string out;
  for (type t : {type::posix_file_descriptor, type::win32, type::win32_kmt, type::fabric}) {
    if ((mask & static_cast<int>(t)) != 0) { out += (out.empty() ? "" : ", ") + std::string{to_string(t)}; }
  }
  return out.empty() ? "none" : out;
}

int device_attribute(cudaDeviceAttr attribute, int device)
{
  int value = 0;
  ASYNCSHIM_CUDA_TRY(cudaDeviceGetAttribute(&value, attribute, device));
  return value;
}

// RMM's logic error when cudaMallocAsync-style pools are not available.
void expect_memory_pool_support(int device)
{
  int driver = 0;
  ASYNCSHIM_CUDA_TRY(cudaDriverGetVersion(&driver));
  if (driver < first_driver_with_memory_pools) {
    throw logic_error{"cudaMallocAsync is not supported: the CUDA driver is version " + std::to_string(driver) +
                      ", memory pools need 11020 (CUDA 11.2) or newer"};
  }
  if (device_attribute(cudaDevAttrMemoryPoolsSupported, device) == 0) {
    throw logic_error{"cudaMallocAsync is not supported on device " + std::to_string(device) +
                      ": cudaDevAttrMemoryPoolsSupported is 0"};
  }
}

void expect_export_support(cuda_async_memory_resource::allocation_handle_type type, int device)
{
  if (type == cuda_async_memory_resource::allocation_handle_type::none) { return; }
  int const supported = device_attribute(cudaDevAttrMemoryPoolSupportedHandleTypes, device);
  if ((supported & static_cast<int>(type)) != static_cast<int>(type)) {
    throw logic_error{"export handle type " + std::string{to_string(type)} + " is not supported by device " +
                      std::to_string(device) + ", whose memory pools support: " + handle_types_text(supported) +
                      " (cudaDevAttrMemoryPoolSupportedHandleTypes = " + std::to_string(supported) + ")"};
  }
}

}  // namespace

char const* to_string(cuda_async_memory_resource::allocation_handle_type type) noexcept
{
  using t = cuda_async_memory_resource::allocation_handle_type;
  switch (type) {
    case t::none: return "none";
    case t::posix_file_descriptor: return "posix_file_descriptor";
    case t::win32: return "win32";
    case t::win32_kmt: return "win32_kmt";
    case t::fabric: return "fabric";
  }
  return "unknown";
}

cuda_async_memory_resource::cuda_async_memory_resource(std::optional<std::size_t> initial_pool_size,
                                                       std::optional<std::size_t> release_threshold,
                                                       std::optional<allocation_handle_type> export_handle_type,
                                                       std::optional<std::size_t> maximum_pool_size)
{
  detail::watch_process_exit();
  ASYNCSHIM_CUDA_TRY(cudaGetDevice(&device_));
  expect_memory_pool_support(device_);
  auto const handle_type = export_handle_type.value_or(allocation_handle_type::none);
  expect_export_support(handle_type, device_);

  // Free memory is read before the pool exists: RMM's default initial size
  // is half of what is free at construction.
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  ASYNCSHIM_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));

  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = static_cast<cudaMemAllocationHandleType>(handle_type);
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_;
  props.maxSize = maximum_pool_size.value_or(0);  // 0: the device's memory
  ASYNCSHIM_CUDA_TRY(cudaMemPoolCreate(&pool_, &props));

  try {
    std::uint64_t threshold = release_threshold.value_or(total_bytes);
    ASYNCSHIM_CUDA_TRY(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold));

    // Prime the pool: allocating and freeing reserves the memory, and the
    // release threshold decides how much of it the pool keeps.
    std::size_t const initial = initial_pool_size.value_or(free_bytes / 2);
    if (initial > 0) {
      void* ptr = do_allocate(initial, cuda_stream_default);
      ASYNCSHIM_CUDA_TRY(cudaFreeAsync(ptr, cuda_stream_default));
    }
  } catch (...) {
    (void)cudaMemPoolDestroy(pool_);
    throw;
  }
}

cuda_async_memory_resource::~cuda_async_memory_resource()
{
  if (detail::process_is_exiting()) { return; }
  // Errors are ignored on purpose: during runtime shutdown this returns
  // cudaErrorCudartUnloading, and there is nothing useful to do about it.
  if (cudaMemPoolDestroy(pool_) != cudaSuccess) { (void)cudaGetLastError(); }
}

cudaError_t cuda_async_memory_resource::try_allocate_async(void** ptr, std::size_t bytes,
                                                           cuda_stream_view stream) const noexcept
{
  return cudaMallocFromPoolAsync(ptr, bytes, pool_, stream.value());
}

cudaError_t cuda_async_memory_resource::try_deallocate_async(void* ptr, cuda_stream_view stream) const noexcept
{
  return cudaFreeAsync(ptr, stream.value());
}

void* cuda_async_memory_resource::do_allocate(std::size_t bytes, cuda_stream_view stream)
{
  void* ptr = nullptr;
  ASYNCSHIM_CUDA_TRY(try_allocate_async(&ptr, bytes, stream));
  return ptr;
}

void cuda_async_memory_resource::do_deallocate(void* ptr, std::size_t /*bytes*/, cuda_stream_view stream) noexcept
{
  // RMM asserts here; a noexcept deallocate can only report through CUDA's
  // last-error state, which the failed call has already set.
  (void)try_deallocate_async(ptr, stream);
}

bool cuda_async_memory_resource::do_is_equal(device_memory_resource const& other) const noexcept
{
  auto const* async = dynamic_cast<cuda_async_memory_resource const*>(&other);
  return async != nullptr && async->pool_handle() == pool_handle();
}

}  // namespace asyncshim
