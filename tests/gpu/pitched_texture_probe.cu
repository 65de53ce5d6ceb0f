// Pitched blocks bound to 2D textures, the use the texture hardware's
// alignment rules are for: cudaMallocPitch rows of floats, filled with
// cudaMemcpy2D, read back through a pitch-2D texture object by a kernel. Run
// with and without the shim (compare_runs.cmake): a pool block must be as
// usable as a native one (its base aligned as a texture needs, its pitch the
// native one).
//   pitched_texture_probe
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

__global__ void read_texture(cudaTextureObject_t texture, float* out, int width, int height)
{
  int const x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  int const y = static_cast<int>(blockIdx.y);
  if (x < width && y < height) { out[y * width + x] = tex2D<float>(texture, x + 0.5f, y + 0.5f); }
}

bool check(cudaError_t e, char const* what)
{
  if (e == cudaSuccess) { return true; }
  std::printf("  %s: %s\n", what, cudaGetErrorName(e));
  return false;
}

// Returns whether the texture read back what was written.
bool one_shape(int width, int height)
{
  std::vector<float> host(static_cast<std::size_t>(width) * height);
  for (std::size_t i = 0; i < host.size(); ++i) {
    host[i] = static_cast<float>(i % 977) + 0.25f;
  }
  void* image = nullptr;
  std::size_t pitch = 0;
  std::printf("%d x %d floats:", width, height);
  if (!check(cudaMallocPitch(&image, &pitch, width * sizeof(float), height), "cudaMallocPitch")) { return false; }
  int alignment = 0;
  (void)cudaDeviceGetAttribute(&alignment, cudaDevAttrTextureAlignment, 0);
  bool const aligned = alignment > 0 && reinterpret_cast<std::uintptr_t>(image) % alignment == 0;
  std::printf(" pitch %zu base aligned %s", pitch, aligned ? "yes" : "NO");
  bool ok = check(cudaMemcpy2D(image, pitch, host.data(), width * sizeof(float), width * sizeof(float), height,
                               cudaMemcpyHostToDevice),
                  "cudaMemcpy2D");
  cudaResourceDesc resource{};
  resource.resType = cudaResourceTypePitch2D;
  resource.res.pitch2D.devPtr = image;
  resource.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  resource.res.pitch2D.width = width;
  resource.res.pitch2D.height = height;
  resource.res.pitch2D.pitchInBytes = pitch;
  cudaTextureDesc texture_desc{};
  texture_desc.filterMode = cudaFilterModePoint;
  texture_desc.readMode = cudaReadModeElementType;
  texture_desc.addressMode[0] = texture_desc.addressMode[1] = cudaAddressModeClamp;
  cudaTextureObject_t texture = 0;
  ok = ok && check(cudaCreateTextureObject(&texture, &resource, &texture_desc, nullptr), "cudaCreateTextureObject");
  float* out = nullptr;
  ok = ok && check(cudaMalloc(&out, host.size() * sizeof(float)), "cudaMalloc");
  if (ok) {
    read_texture<<<dim3((width + 127) / 128, height), 128>>>(texture, out, width, height);
    std::vector<float> back(host.size());
    ok = check(cudaMemcpy(back.data(), out, back.size() * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy") &&
         back == host;
    std::printf(" texture %s", ok ? "reads what was written" : "WRONG");
  }
  ok = ok && aligned;
  if (texture != 0) { (void)cudaDestroyTextureObject(texture); }
  if (out != nullptr) { (void)cudaFree(out); }
  std::printf(" free %s\n", cudaGetErrorName(cudaFree(image)));
  return ok;
}

}  // namespace

int main()
{
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  int failed = 0;
  // Small and odd shapes, then image sizes, each after a 256-byte block (a
  // pool packs small blocks side by side: the next may start 256 bytes on).
  std::vector<void*> neighbours;
  for (auto [w, h] : {std::pair{1, 1}, {3, 5}, {100, 3}, {129, 7}, {640, 480}, {1000, 33}, {1920, 1080}, {3840, 4}}) {
    void* neighbour = nullptr;
    if (cudaMalloc(&neighbour, 256) == cudaSuccess) { neighbours.push_back(neighbour); }
    failed += one_shape(w, h) ? 0 : 1;
  }
  for (void* p : neighbours) {
    (void)cudaFree(p);
  }
  std::printf("%s\n", failed == 0 ? "all textures read what was written" : "SOME TEXTURES WRONG");
  return failed == 0 ? 0 : 1;
}
