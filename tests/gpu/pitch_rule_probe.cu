// The pitch native cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch give,
// over a sweep of widths, heights and element sizes, against the rule the
// shim uses (shim/cuda/pitch_rule.cpp): the width rounded up to the device's
// texture alignment (cudaDevAttrTextureAlignment). Run without the shim: it
// measures the rule a pool-served pitched allocation must reproduce.
//   pitch_rule_probe        prints "MISS ..." for each case the rule gets
//                           wrong (the first 20); "steps ...": for each call
//                           (height 3), the widths that share a pitch, run
//                           by run, from which the rule can be read; what a
//                           width beyond the device's largest pitch gives;
//                           and a last line "pitch rule: N cases, M missed
//                           (alignment A)".
// Exit status: 0 when every case was measured, 1 when a call failed.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <vector>

namespace {

int failures = 0;
int misses = 0;
int cases = 0;

std::size_t rounded_up(std::size_t width, std::size_t alignment)
{
  return (width + alignment - 1) / alignment * alignment;
}

void compare(char const* api, std::size_t width, std::size_t height, unsigned element, std::size_t pitch,
             std::size_t expected)
{
  ++cases;
  if (pitch == expected) { return; }
  if (++misses <= 20) {
    std::printf("MISS %s width %zu height %zu element %u: pitch %zu, the rule says %zu\n", api, width, height, element,
                pitch, expected);
  }
}

std::vector<std::size_t> widths()
{
  std::vector<std::size_t> w;
  for (std::size_t i = 1; i <= 1100; ++i) {
    w.push_back(i);
  }
  for (std::size_t base : {std::size_t{2048}, std::size_t{4096}, std::size_t{65536}, std::size_t{1} << 20}) {
    for (std::size_t d : {base - 1, base, base + 1, base + 100}) {
      w.push_back(d);
    }
  }
  w.push_back(3840 * 4);  // a 4K image row of RGBA bytes
  w.push_back(1920 * 3);  // a 1080p row of RGB bytes
  return w;
}

// The runs of widths that get one pitch: "pitch P: widths A-B", the first 24.
class steps {
 public:
  explicit steps(char const* what) : what_{what} {}
  void add(std::size_t width, std::size_t pitch)
  {
    if (count_ > 0 && pitch == pitch_ && width == last_ + 1) {
      last_ = width;
      return;
    }
    flush();
    first_ = last_ = width;
    pitch_ = pitch;
    ++count_;
  }
  void flush()
  {
    if (count_ > 0 && count_ <= 24) {
      std::printf("steps %s: pitch %zu: widths %zu-%zu\n", what_, pitch_, first_, last_);
    }
  }

 private:
  char const* what_;
  std::size_t first_ = 0;
  std::size_t last_ = 0;
  std::size_t pitch_ = 0;
  int count_ = 0;
};

}  // namespace

int main()
{
  if (cudaFree(nullptr) != cudaSuccess) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  int alignment = 0;
  int max_pitch = 0;
  if (cudaDeviceGetAttribute(&alignment, cudaDevAttrTextureAlignment, 0) != cudaSuccess ||
      cudaDeviceGetAttribute(&max_pitch, cudaDevAttrMaxPitch, 0) != cudaSuccess || alignment <= 0) {
    std::printf("FAIL: the device's pitch attributes\n");
    return 1;
  }
  auto const a = static_cast<std::size_t>(alignment);
  steps runtime_steps{"cudaMallocPitch"};
  steps driver_steps[] = {steps{"cuMemAllocPitch element 4"}, steps{"cuMemAllocPitch element 8"},
                          steps{"cuMemAllocPitch element 16"}};
  for (std::size_t height : {std::size_t{1}, std::size_t{3}, std::size_t{1024}}) {
    for (std::size_t width : widths()) {
      void* p = nullptr;
      std::size_t pitch = 0;
      if (cudaMallocPitch(&p, &pitch, width, height) != cudaSuccess) {
        std::printf("FAIL: cudaMallocPitch width %zu height %zu\n", width, height);
        ++failures;
        continue;
      }
      compare("cudaMallocPitch", width, height, 0, pitch, rounded_up(width, a));
      if (height == 3) { runtime_steps.add(width, pitch); }
      (void)cudaFree(p);
      cudaPitchedPtr pitched{};
      if (cudaMalloc3D(&pitched, make_cudaExtent(width, height, 2)) != cudaSuccess) {
        std::printf("FAIL: cudaMalloc3D width %zu height %zu\n", width, height);
        ++failures;
        continue;
      }
      compare("cudaMalloc3D", width, height, 0, pitched.pitch, rounded_up(width, a));
      (void)cudaFree(pitched.ptr);
      for (int e = 0; e < 3; ++e) {
        unsigned const element = 4U << e;
        CUdeviceptr d = 0;
        std::size_t driver_pitch = 0;
        if (cuMemAllocPitch(&d, &driver_pitch, width, height, element) != CUDA_SUCCESS) {
          std::printf("FAIL: cuMemAllocPitch width %zu height %zu element %u\n", width, height, element);
          ++failures;
          continue;
        }
        compare("cuMemAllocPitch", width, height, element, driver_pitch, rounded_up(width, a));
        if (height == 3) { driver_steps[e].add(width, driver_pitch); }
        (void)cuMemFree(d);
      }
    }
  }
  runtime_steps.flush();
  for (steps& d : driver_steps) {
    d.flush();
  }
  // Beyond the largest pitch: the error each call gives (the shim must give the same).
  void* p = nullptr;
  std::size_t pitch = 0;
  cudaError_t const too_wide = cudaMallocPitch(&p, &pitch, static_cast<std::size_t>(max_pitch) + 1, 2);
  (void)cudaGetLastError();
  CUdeviceptr d = 0;
  CUresult const too_wide_driver = cuMemAllocPitch(&d, &pitch, static_cast<std::size_t>(max_pitch) + 1, 2, 4);
  if (too_wide == cudaSuccess) { (void)cudaFree(p); }
  if (too_wide_driver == CUDA_SUCCESS) { (void)cuMemFree(d); }
  CUresult const bad_element = cuMemAllocPitch(&d, &pitch, 256, 2, 3);
  if (bad_element == CUDA_SUCCESS) { (void)cuMemFree(d); }
  std::printf("beyond the largest pitch (%d): cudaMallocPitch %d, cuMemAllocPitch %d; element size 3: %d\n", max_pitch,
              static_cast<int>(too_wide), static_cast<int>(too_wide_driver), static_cast<int>(bad_element));
  std::printf("pitch rule: %d cases, %d missed (alignment %d)\n", cases, misses, alignment);
  return failures == 0 ? 0 : 1;
}
