// Prints what the pinned host memory calls return (cudaMallocHost,
// cudaHostAlloc, cudaFreeHost, cudaHostGetDevicePointer, cudaHostGetFlags and
// the driver's cuMemAllocHost, cuMemHostAlloc, cuMemFreeHost,
// cuMemHostGetDevicePointer, cuMemHostGetFlags) over sizes, flags and the
// edge cases (null arguments, a size of 0, unknown flags, interior pointers,
// double frees, cudaFree on pinned memory, cudaFreeHost on device memory),
// one line each. Run with and without the shim (compare_runs.cmake), the two
// outputs must be equal. A copy queued from a block just before its free
// must read what was there, not what the block's next owner writes.
// Built against the CUDA test double for the CPU tier and against the real
// runtime for the GPU tier.
//   host_probe [--same-level]   (no block freed at the other API level)
//   host_probe --served-by-pool (prints nothing; fails unless the blocks of
//   every allocating call come from a memory pool)
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

int failures = 0;

char const* name_of(CUresult r)
{
  char const* name = nullptr;
  return cuGetErrorName(r, &name) == CUDA_SUCCESS && name != nullptr ? name : "unknown CUresult";
}

void last_error() { std::printf("  then cudaGetLastError %s\n", cudaGetErrorName(cudaGetLastError())); }

// Written by the CPU, copied to the device and back.
bool usable(void* p, std::size_t bytes)
{
  std::memset(p, 0x5a, bytes);
  void* d = nullptr;
  if (cudaMalloc(&d, bytes) != cudaSuccess) { return false; }
  bool ok = cudaMemcpy(d, p, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
  std::memset(p, 0, bytes);
  ok = ok && cudaMemcpy(p, d, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  (void)cudaFree(d);
  auto const* bytes_of = static_cast<unsigned char const*>(p);
  for (std::size_t i = 0; ok && i < bytes; ++i) {
    ok = bytes_of[i] == 0x5a;
  }
  return ok;
}

// What the queries say of a block and of an address inside it.
void describe(void* p, std::size_t bytes)
{
  void* device = nullptr;
  cudaError_t r = cudaHostGetDevicePointer(&device, p, 0);
  std::printf(" device pointer %s %s", cudaGetErrorName(r), r == cudaSuccess && device == p ? "same" : "other");
  char* inside = static_cast<char*>(p) + bytes / 2;
  r = cudaHostGetDevicePointer(&device, inside, 0);
  std::printf(" (inside %s %s)", cudaGetErrorName(r), r == cudaSuccess && device == inside ? "same" : "other");
  unsigned flags = 99;
  r = cudaHostGetFlags(&flags, p);
  std::printf(" flags %s %u", cudaGetErrorName(r), flags);
  flags = 99;
  r = cudaHostGetFlags(&flags, inside);
  std::printf(" (inside %s %u)", cudaGetErrorName(r), flags);
  CUdeviceptr dptr = 0;
  CUresult const cr = cuMemHostGetDevicePointer(&dptr, p, 0);
  std::printf(" cuMemHostGetDevicePointer %s %s", name_of(cr),
              cr == CUDA_SUCCESS && dptr == reinterpret_cast<CUdeviceptr>(p) ? "same" : "other");
  flags = 99;
  std::printf(" cuMemHostGetFlags %s", name_of(cuMemHostGetFlags(&flags, p)));
  std::printf(" %u", flags);
  cudaPointerAttributes attributes{};
  r = cudaPointerGetAttributes(&attributes, p);
  std::printf(" attributes %s type %d", cudaGetErrorName(r), static_cast<int>(attributes.type));
}

void runtime_host(std::size_t bytes, unsigned flags, bool malloc_host)
{
  void* p = nullptr;
  cudaError_t const r = malloc_host ? cudaMallocHost(&p, bytes) : cudaHostAlloc(&p, bytes, flags);
  if (malloc_host) {
    std::printf("cudaMallocHost %zu: %s", bytes, cudaGetErrorName(r));
  } else {
    std::printf("cudaHostAlloc %zu flags %u: %s", bytes, flags, cudaGetErrorName(r));
  }
  if (r == cudaSuccess && p != nullptr) {
    bool const ok = usable(p, bytes);
    failures += ok ? 0 : 1;
    std::printf(" data %s", ok ? "ok" : "WRONG");
    describe(p, bytes);
    if (bytes > 1) {
      std::printf(" free inside %s", cudaGetErrorName(cudaFreeHost(static_cast<char*>(p) + bytes / 2)));
      std::printf(" last error %s", cudaGetErrorName(cudaGetLastError()));
    }
    std::printf(" cudaFree %s", cudaGetErrorName(cudaFree(p)));
    std::printf(" last error %s", cudaGetErrorName(cudaGetLastError()));
    std::printf(" cuMemFree %s", name_of(cuMemFree(reinterpret_cast<CUdeviceptr>(p))));
    std::printf(" free %s", cudaGetErrorName(cudaFreeHost(p)));
    std::printf(" again %s", cudaGetErrorName(cudaFreeHost(p)));
  }
  std::printf("\n");
  last_error();
}

void driver_host(std::size_t bytes, unsigned flags, bool alloc_host)
{
  void* p = nullptr;
  CUresult const r = alloc_host ? cuMemAllocHost(&p, bytes) : cuMemHostAlloc(&p, bytes, flags);
  if (alloc_host) {
    std::printf("cuMemAllocHost %zu: %s", bytes, name_of(r));
  } else {
    std::printf("cuMemHostAlloc %zu flags %u: %s", bytes, flags, name_of(r));
  }
  if (r == CUDA_SUCCESS && p != nullptr) {
    bool const ok = usable(p, bytes);
    failures += ok ? 0 : 1;
    std::printf(" data %s", ok ? "ok" : "WRONG");
    describe(p, bytes);
    if (bytes > 1) { std::printf(" free inside %s", name_of(cuMemFreeHost(static_cast<char*>(p) + bytes / 2))); }
    std::printf(" cuMemFree %s", name_of(cuMemFree(reinterpret_cast<CUdeviceptr>(p))));
    std::printf(" free %s", name_of(cuMemFreeHost(p)));
    std::printf(" again %s", name_of(cuMemFreeHost(p)));
  }
  std::printf("\n");
}

// A copy queued from a pinned block, the block freed at once and a block of
// the same size allocated and overwritten: the copy reads the first contents.
void copy_then_free(std::size_t bytes)
{
  cudaStream_t stream = nullptr;
  void* device = nullptr;
  void* first = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(&device, bytes) != cudaSuccess || cudaMallocHost(&first, bytes) != cudaSuccess) {
    std::printf("copy then free %zu: could not set up\n", bytes);
    failures += 1;
    return;
  }
  std::memset(first, 0x11, bytes);
  cudaError_t const queued = cudaMemcpyAsync(device, first, bytes, cudaMemcpyHostToDevice, stream);
  cudaError_t const freed = cudaFreeHost(first);
  void* second = nullptr;
  cudaError_t const again = cudaMallocHost(&second, bytes);
  if (again == cudaSuccess) { std::memset(second, 0x22, bytes); }
  (void)cudaStreamSynchronize(stream);
  std::vector<unsigned char> back(bytes, 0);
  bool ok = cudaMemcpy(back.data(), device, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
  for (unsigned char c : back) {
    ok = ok && c == 0x11;
  }
  failures += ok ? 0 : 1;
  std::printf("copy then free %zu: queued %s freed %s allocated again %s, the copy read %s\n", bytes,
              cudaGetErrorName(queued), cudaGetErrorName(freed), cudaGetErrorName(again),
              ok ? "the first contents" : "OTHER CONTENTS");
  if (again == cudaSuccess) { (void)cudaFreeHost(second); }
  (void)cudaFree(device);
  (void)cudaStreamDestroy(stream);
}

// Whether `p` is a block of a memory pool.
bool from_pool(void* p)
{
  CUmemoryPool pool = nullptr;
  return cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, reinterpret_cast<CUdeviceptr>(p)) ==
           CUDA_SUCCESS &&
         pool != nullptr;
}

int served_by_pool()
{
  void* p[4] = {};
  bool const made = cudaMallocHost(&p[0], 4096) == cudaSuccess &&
                    cudaHostAlloc(&p[1], 4096, cudaHostAllocPortable | cudaHostAllocMapped) == cudaSuccess &&
                    cuMemAllocHost(&p[2], 4096) == CUDA_SUCCESS &&
                    cuMemHostAlloc(&p[3], 4096, CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS;
  int pooled = 0;
  for (void* block : p) {
    pooled += block != nullptr && from_pool(block) ? 1 : 0;
  }
  void* write_combined = nullptr;
  bool const native_wc =
    cudaHostAlloc(&write_combined, 4096, cudaHostAllocWriteCombined) == cudaSuccess && !from_pool(write_combined);
  for (void* block : p) {
    (void)cudaFreeHost(block);
  }
  (void)cudaFreeHost(write_combined);
  std::printf("%d of 4 pinned blocks from a pool; write-combined %s\n", pooled, native_wc ? "native" : "NOT NATIVE");
  return made && pooled == 4 && native_wc ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv)
{
  bool same_level = false;
  bool pool_check = false;
  for (int i = 1; i < argc; ++i) {
    same_level = same_level || std::strcmp(argv[i], "--same-level") == 0;
    pool_check = pool_check || std::strcmp(argv[i], "--served-by-pool") == 0;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  std::printf("cudaFree(nullptr): %s\n", cudaGetErrorName(cudaFree(nullptr)));  // the context, for the driver calls
  if (pool_check) { return served_by_pool(); }

  for (std::size_t bytes : {std::size_t{1}, std::size_t{4096}, std::size_t{100000}, std::size_t{1} << 22}) {
    runtime_host(bytes, 0, true);
    for (unsigned flags : {0U, 1U, 2U, 3U, 4U, 6U}) {
      runtime_host(bytes, flags, false);
    }
    driver_host(bytes, 0, true);
    for (unsigned flags : {0U, 1U, 2U, 3U, 4U, 7U}) {
      driver_host(bytes, flags, false);
    }
  }
  for (std::size_t bytes : {std::size_t{4096}, std::size_t{1} << 24}) {
    copy_then_free(bytes);
  }

  // Edge cases, each with the error it leaves.
  std::printf("cudaMallocHost(nullptr, 64): %s\n", cudaGetErrorName(cudaMallocHost(nullptr, 64)));
  last_error();
  runtime_host(0, 0, true);
  runtime_host(0, 0, false);
  runtime_host(64, 8, false);  // not a flag
  runtime_host(64, 0x100, false);
  std::printf("cudaHostAlloc(nullptr, 64, 0): %s\n", cudaGetErrorName(cudaHostAlloc(nullptr, 64, 0)));
  last_error();
  std::printf("cudaFreeHost(nullptr): %s\n", cudaGetErrorName(cudaFreeHost(nullptr)));
  last_error();
  void* device = nullptr;
  if (cudaMalloc(&device, 4096) == cudaSuccess) {
    std::printf("cudaFreeHost(device memory): %s\n", cudaGetErrorName(cudaFreeHost(device)));
    last_error();
    std::printf("  and cudaFree: %s\n", cudaGetErrorName(cudaFree(device)));
  }
  int on_stack = 0;
  void* out = nullptr;
  std::printf("cudaHostGetDevicePointer(pageable): %s\n",
              cudaGetErrorName(cudaHostGetDevicePointer(&out, &on_stack, 0)));
  last_error();
  unsigned flags = 0;
  std::printf("cudaHostGetFlags(pageable): %s\n", cudaGetErrorName(cudaHostGetFlags(&flags, &on_stack)));
  last_error();
  void* p = nullptr;
  if (cudaMallocHost(&p, 4096) == cudaSuccess) {
    std::printf("cudaHostGetDevicePointer flags 1: %s\n", cudaGetErrorName(cudaHostGetDevicePointer(&out, p, 1)));
    last_error();
    std::printf("cudaHostGetDevicePointer(nullptr, p, 0): %s\n",
                cudaGetErrorName(cudaHostGetDevicePointer(nullptr, p, 0)));
    last_error();
    std::printf("cudaHostGetFlags(nullptr, p): %s\n", cudaGetErrorName(cudaHostGetFlags(nullptr, p)));
    last_error();
    std::printf("cudaFreeHost: %s\n", cudaGetErrorName(cudaFreeHost(p)));
  }
  std::printf("cuMemAllocHost(nullptr, 64): %s\n", name_of(cuMemAllocHost(nullptr, 64)));
  driver_host(0, 0, true);
  driver_host(64, 8, false);
  std::printf("cuMemFreeHost(nullptr): %s\n", name_of(cuMemFreeHost(nullptr)));

  // Freed at the other API level.
  if (!same_level && cudaMallocHost(&p, 4096) == cudaSuccess) {
    std::printf("cudaMallocHost then cuMemFreeHost: %s\n", name_of(cuMemFreeHost(p)));
    std::printf("  and cudaFreeHost again: %s\n", cudaGetErrorName(cudaFreeHost(p)));
    last_error();
  }
  if (!same_level && cuMemHostAlloc(&p, 4096, CU_MEMHOSTALLOC_PORTABLE) == CUDA_SUCCESS) {
    std::printf("cuMemHostAlloc then cudaFreeHost: %s\n", cudaGetErrorName(cudaFreeHost(p)));
    std::printf("  and cuMemFreeHost again: %s\n", name_of(cuMemFreeHost(p)));
  }
  last_error();
  std::printf("%s\n", failures == 0 ? "all data as written" : "DATA WRONG");
  return failures == 0 ? 0 : 1;
}
