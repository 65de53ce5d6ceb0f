// What a CUDA memory pool in host memory (CU_MEM_LOCATION_TYPE_HOST, CUDA
// 12.6 and later) gives a program that asked for pinned host memory, before
// the shim may serve cudaMallocHost and friends from one: for each size
// (64 KiB, 16 MiB, 256 MiB), a block from a host pool made accessible to
// every device is
//   - readable and writable by the CPU at the returned address;
//   - usable by a kernel on each device, and by copies both ways;
//   - reported by cudaPointerGetAttributes (type, devicePointer, hostPointer),
//     beside a cudaMallocHost block's;
//   - given by cudaHostGetDevicePointer as the program expects (the same
//     address, as for cudaMallocHost memory under unified addressing);
// and what a pair costs: the host pool's allocate + free against
// cudaMallocHost + cudaFreeHost. Run without the shim.
//   host_pool_probe   one line per check ("ok ...", "FAIL ..." or "DIFFERS
//                     ..." where it is not what cudaMallocHost gives), then
//                     "host pool probe: N checks, M failed, K differ".
// Exit status: 0 when every check was made (differences are findings), 1
// when one failed, 0 with "SKIP: ..." without a device or host pools.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

int checks = 0;
int failed = 0;
int differ = 0;

void check(bool good, char const* what, std::size_t bytes)
{
  ++checks;
  if (!good) { ++failed; }
  std::printf("%s %s (%zu bytes)\n", good ? "ok" : "FAIL", what, bytes);
}

__global__ void add_one(unsigned char* bytes, std::size_t n)
{
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    bytes[i] = static_cast<unsigned char>(bytes[i] + 1);
  }
}

bool all_equal(unsigned char const* p, std::size_t n, unsigned char v)
{
  for (std::size_t i = 0; i < n; ++i) {
    if (p[i] != v) { return false; }
  }
  return true;
}

void describe(char const* label, void* p)
{
  cudaPointerAttributes a{};
  cudaError_t const r = cudaPointerGetAttributes(&a, p);
  void* device_pointer = nullptr;
  cudaError_t const g = cudaHostGetDevicePointer(&device_pointer, p, 0);
  std::printf("  %s: cudaPointerGetAttributes %d (type %d, device %d, devicePointer %s, hostPointer %s); "
              "cudaHostGetDevicePointer %d (%s)\n",
              label, static_cast<int>(r), static_cast<int>(a.type), a.device,
              a.devicePointer == p ? "the same" : "other", a.hostPointer == p ? "the same" : "other",
              static_cast<int>(g), device_pointer == p ? "the same" : "other");
  (void)cudaGetLastError();
}

double pair_us(CUmemoryPool pool, CUstream stream, std::size_t bytes, int pairs)
{
  auto const start = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) {
    CUdeviceptr d = 0;
    if (cuMemAllocFromPoolAsync(&d, bytes, pool, stream) != CUDA_SUCCESS) { return -1; }
    (void)cuMemFreeAsync(d, stream);
  }
  (void)cuStreamSynchronize(stream);
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / pairs;
}

double pinned_pair_us(std::size_t bytes, int pairs)
{
  auto const start = std::chrono::steady_clock::now();
  for (int i = 0; i < pairs; ++i) {
    void* p = nullptr;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) { return -1; }
    (void)cudaFreeHost(p);
  }
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / pairs;
}

}  // namespace

int main()
{
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 || cudaFree(nullptr) != cudaSuccess) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  int supported = 0;
  (void)cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED, 0);
  if (supported == 0) {
    std::printf("SKIP: device 0 has no host memory pools (CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED is 0)\n");
    return 0;
  }
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  CUresult const made = cuMemPoolCreate(&pool, &props);
  check(made == CUDA_SUCCESS, "a pool in host memory is made", 0);
  if (made != CUDA_SUCCESS) { return 1; }
  for (int d = 0; d < devices; ++d) {
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = d;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(cuMemPoolSetAccess(pool, &access, 1) == CUDA_SUCCESS, "the pool is made accessible to a device",
          static_cast<std::size_t>(d));
  }
  cudaStream_t stream = nullptr;
  (void)cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  auto const cu_stream = reinterpret_cast<CUstream>(stream);

  for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{16} << 20, std::size_t{256} << 20}) {
    CUdeviceptr d = 0;
    bool const got = cuMemAllocFromPoolAsync(&d, bytes, pool, cu_stream) == CUDA_SUCCESS &&
                     cuStreamSynchronize(cu_stream) == CUDA_SUCCESS;
    check(got, "a block is allocated from the host pool", bytes);
    if (!got) { continue; }
    auto* p = reinterpret_cast<unsigned char*>(d);
    std::memset(p, 7, bytes);
    check(all_equal(p, bytes, 7), "the CPU writes and reads it at the returned address", bytes);
    for (int dev = 0; dev < devices; ++dev) {
      (void)cudaSetDevice(dev);
      add_one<<<256, 256>>>(p, bytes);
      bool const ran = cudaDeviceSynchronize() == cudaSuccess;
      check(ran && all_equal(p, bytes, static_cast<unsigned char>(8 + dev)),
            "a kernel on a device reads and writes it (the CPU sees the result)", bytes);
    }
    (void)cudaSetDevice(0);
    void* device_copy = nullptr;
    bool copied = cudaMalloc(&device_copy, bytes) == cudaSuccess &&
                  cudaMemcpyAsync(device_copy, p, bytes, cudaMemcpyDefault, stream) == cudaSuccess &&
                  cudaStreamSynchronize(stream) == cudaSuccess;
    std::memset(p, 1, bytes);
    copied = copied && cudaMemcpyAsync(p, device_copy, bytes, cudaMemcpyDefault, stream) == cudaSuccess &&
             cudaStreamSynchronize(stream) == cudaSuccess &&
             all_equal(p, bytes, static_cast<unsigned char>(7 + devices));
    check(copied, "copies to and from device memory", bytes);
    (void)cudaFree(device_copy);
    void* pinned = nullptr;
    if (cudaMallocHost(&pinned, bytes) == cudaSuccess) {
      std::printf("  attributes, %zu bytes:\n", bytes);
      describe("host pool  ", p);
      describe("cudaMallocHost", pinned);
      cudaPointerAttributes pool_a{};
      cudaPointerAttributes pinned_a{};
      (void)cudaPointerGetAttributes(&pool_a, p);
      (void)cudaPointerGetAttributes(&pinned_a, pinned);
      if (pool_a.type != pinned_a.type) {
        ++differ;
        std::printf("DIFFERS cudaPointerGetAttributes type: host pool %d, cudaMallocHost %d\n",
                    static_cast<int>(pool_a.type), static_cast<int>(pinned_a.type));
      }
      (void)cudaFreeHost(pinned);
    }
    (void)cudaGetLastError();
    (void)cuMemFreeAsync(d, cu_stream);
    (void)cuStreamSynchronize(cu_stream);
  }

  for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{16} << 20, std::size_t{256} << 20}) {
    int const pairs = bytes > (std::size_t{1} << 20) ? 20 : 200;
    double const from_pool = pair_us(pool, cu_stream, bytes, 1000);
    double const native = pinned_pair_us(bytes, pairs);
    std::printf("pair, %zu bytes: host pool %.2f us, cudaMallocHost + cudaFreeHost %.1f us\n", bytes, from_pool,
                native);
  }
  (void)cudaStreamDestroy(stream);
  (void)cuMemPoolDestroy(pool);
  std::printf("host pool probe: %d checks, %d failed, %d differ\n", checks, failed, differ);
  return failed == 0 ? 0 : 1;
}
