// Uses the installed resource. Without a GPU the constructor throws, and the
// message names the CUDA error: that also shows the exceptions link and work.
#include <asyncshim/cuda_async_memory_resource.hpp>

#include <cstdio>

int main()
{
  try {
    asyncshim::cuda_async_memory_resource mr{0, std::size_t{1} << 30};
    void* p = mr.allocate(1024);
    mr.deallocate(p, 1024);
    std::printf("consumer: allocated and freed 1 KiB from pool %p\n", static_cast<void*>(mr.pool_handle()));
  } catch (asyncshim::cuda_error const& e) {
    std::printf("consumer: no usable device here: %s\n", e.what());
  }
  return 0;
}
