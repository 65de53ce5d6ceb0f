#include <asyncshim/device_memory_resource.hpp>

#include <cstdint>
#include <string>

namespace asyncshim {

std::size_t device_memory_resource::aligned_size(std::size_t bytes, std::size_t alignment)
{
  bool const power_of_two = alignment != 0 && (alignment & (alignment - 1)) == 0;
  if (!power_of_two || alignment > cuda_allocation_alignment) {
    throw logic_error{"alignment " + std::to_string(alignment) +
                      " is not supported: it must be a power of two no larger than " +
                      std::to_string(cuda_allocation_alignment)};
  }
  if (bytes > SIZE_MAX - (alignment - 1)) {
    throw out_of_memory{"cannot allocate " + std::to_string(bytes) + " bytes aligned to " + std::to_string(alignment),
                        cudaErrorMemoryAllocation};
  }
  return (bytes + alignment - 1) & ~(alignment - 1);
}

}  // namespace asyncshim
