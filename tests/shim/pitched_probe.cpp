// Prints what cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch_v2 return over
// a sweep of widths, heights and element sizes, and for the edge cases (null
// arguments, zero extents, a bad element size, a width beyond the largest
// pitch, a size no device has), one line each. Run with and without the shim
// (compare_runs.cmake), the two outputs must be equal: same pitch, same error
// codes, same last error, the memory usable and freed at either API level.
// Built against the CUDA test double for the CPU tier and against the real
// runtime for the GPU tier.
//   pitched_probe [--quick] [--same-level]   (--quick: every 37th width of the
//   sweep; --same-level: no block freed at the other API level)
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <driver_functions.h>  // make_cudaExtent

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

// The last row's first `width` bytes hold what cudaMemset wrote over the block.
bool usable(void* p, std::size_t pitch, std::size_t width, std::size_t rows)
{
  if (width == 0 || rows == 0) { return p == nullptr || rows == 0 || width == 0; }  // nothing to hold
  if (cudaMemset(p, 0x5a, pitch * rows) != cudaSuccess) { return false; }
  std::vector<unsigned char> row(width, 0);
  if (cudaMemcpy(row.data(), static_cast<char*>(p) + pitch * (rows - 1), width, cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    return false;
  }
  for (unsigned char c : row) {
    if (c != 0x5a) { return false; }
  }
  return true;
}

void runtime_pitched(std::size_t width, std::size_t height)
{
  void* p = nullptr;
  std::size_t pitch = 0;
  cudaError_t const r = cudaMallocPitch(&p, &pitch, width, height);
  std::printf("cudaMallocPitch width %zu height %zu: %s pitch %zu", width, height, cudaGetErrorName(r), pitch);
  if (r == cudaSuccess) {
    bool const ok = usable(p, pitch, width, height);
    failures += ok ? 0 : 1;
    std::printf(" data %s free %s", ok ? "ok" : "WRONG", cudaGetErrorName(cudaFree(p)));
  }
  std::printf("\n");
}

void runtime_3d(std::size_t width, std::size_t height, std::size_t depth)
{
  cudaPitchedPtr pp{};
  cudaError_t const r = cudaMalloc3D(&pp, make_cudaExtent(width, height, depth));
  std::printf("cudaMalloc3D %zu x %zu x %zu: %s pitch %zu xsize %zu ysize %zu", width, height, depth,
              cudaGetErrorName(r), pp.pitch, pp.xsize, pp.ysize);
  if (r == cudaSuccess) {
    bool const ok = usable(pp.ptr, pp.pitch, width, height * depth);
    failures += ok ? 0 : 1;
    std::printf(" data %s free %s", ok ? "ok" : "WRONG", cudaGetErrorName(cudaFree(pp.ptr)));
  }
  std::printf("\n");
}

void driver_pitched(std::size_t width, std::size_t height, unsigned element)
{
  CUdeviceptr p = 0;
  std::size_t pitch = 0;
  CUresult const r = cuMemAllocPitch(&p, &pitch, width, height, element);
  std::printf("cuMemAllocPitch width %zu height %zu element %u: %s pitch %zu", width, height, element, name_of(r),
              pitch);
  if (r == CUDA_SUCCESS) {
    bool const ok = usable(reinterpret_cast<void*>(p), pitch, width, height);
    failures += ok ? 0 : 1;
    std::printf(" data %s free %s", ok ? "ok" : "WRONG", name_of(cuMemFree(p)));
  }
  std::printf("\n");
}

void last_error() { std::printf("  then cudaGetLastError %s\n", cudaGetErrorName(cudaGetLastError())); }

}  // namespace

int main(int argc, char** argv)
{
  bool quick = false;
  bool same_level = false;
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    same_level = same_level || std::strcmp(argv[i], "--same-level") == 0;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  std::printf("cudaFree(nullptr): %s\n", cudaGetErrorName(cudaFree(nullptr)));  // the context, for the driver calls

  std::vector<std::size_t> widths;
  for (std::size_t w = 1; w <= 1100; w += quick ? 37 : 1) {
    widths.push_back(w);
  }
  for (std::size_t base : {std::size_t{2048}, std::size_t{4096}, std::size_t{65536}, std::size_t{1} << 20}) {
    for (std::size_t w : {base - 1, base, base + 1}) {
      widths.push_back(w);
    }
  }
  widths.push_back(3840 * 4);  // a 4K row of RGBA bytes
  widths.push_back(1920 * 3);  // a 1080p row of RGB bytes
  for (std::size_t w : widths) {
    runtime_pitched(w, w % 2 == 0 ? 1 : 3);
  }
  for (std::size_t i = 0; i < widths.size(); i += quick ? 3 : 7) {
    runtime_3d(widths[i], 3, 2);
    for (unsigned element : {4U, 8U, 16U}) {
      driver_pitched(widths[i], 2, element);
    }
  }

  // Edge cases, each with the error it leaves.
  void* p = reinterpret_cast<void*>(0x1);
  std::size_t pitch = 7;
  std::printf("cudaMallocPitch(nullptr, &pitch, 64, 2): %s\n",
              cudaGetErrorName(cudaMallocPitch(nullptr, &pitch, 64, 2)));
  last_error();
  std::printf("cudaMallocPitch(&p, nullptr, 64, 2): %s\n", cudaGetErrorName(cudaMallocPitch(&p, nullptr, 64, 2)));
  last_error();
  runtime_pitched(0, 2);
  last_error();
  runtime_pitched(64, 0);
  last_error();
  runtime_pitched(std::size_t{1} << 31, 1);  // beyond the largest pitch
  last_error();
  runtime_pitched(512, std::size_t{1} << 40);  // 512 TiB: no device has it
  last_error();
  std::printf("cudaMalloc3D(nullptr, ...): %s\n", cudaGetErrorName(cudaMalloc3D(nullptr, make_cudaExtent(64, 2, 2))));
  last_error();
  runtime_3d(0, 2, 2);
  last_error();
  runtime_3d(64, 0, 2);
  last_error();
  runtime_3d(64, 2, 0);
  last_error();
  runtime_3d(512, std::size_t{1} << 20, std::size_t{1} << 20);
  last_error();
  driver_pitched(64, 2, 3);  // not 4, 8 or 16
  last_error();
  driver_pitched(0, 2, 4);
  driver_pitched(64, 0, 4);
  driver_pitched(std::size_t{1} << 31, 1, 4);
  driver_pitched(512, std::size_t{1} << 40, 4);
  std::printf("cuMemAllocPitch(nullptr, ...): %s\n", name_of(cuMemAllocPitch(nullptr, &pitch, 64, 2, 4)));
  CUdeviceptr d = 0;
  std::printf("cuMemAllocPitch(&d, nullptr, ...): %s\n", name_of(cuMemAllocPitch(&d, nullptr, 64, 2, 4)));
  last_error();

  // Freed at the other API level.
  if (!same_level && cudaMallocPitch(&p, &pitch, 100, 4) == cudaSuccess) {
    std::printf("cudaMallocPitch then cuMemFree: %s\n", name_of(cuMemFree(reinterpret_cast<CUdeviceptr>(p))));
    std::printf("  and cudaFree again: %s\n", cudaGetErrorName(cudaFree(p)));
    last_error();
  }
  if (!same_level && cuMemAllocPitch(&d, &pitch, 100, 4, 8) == CUDA_SUCCESS) {
    std::printf("cuMemAllocPitch then cudaFree: %s\n", cudaGetErrorName(cudaFree(reinterpret_cast<void*>(d))));
    std::printf("  and cuMemFree again: %s\n", name_of(cuMemFree(d)));
  }
  last_error();
  std::printf("%s\n", failures == 0 ? "all data as written" : "DATA WRONG");
  return failures == 0 ? 0 : 1;
}
