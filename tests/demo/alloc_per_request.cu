// The bundled demo: a "service" that allocates its buffers per request, as
// many inference servers and libraries do, and frees them when the request is
// done. Each request: cudaMalloc an input, a scratch and an output buffer of
// request-dependent sizes, copy the input up, run two small kernels, copy the
// result back, cudaFree all three. Prints the time per request and a checksum
// (identical with and without the shim).
//
//   alloc_per_request [requests=2000]
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

__global__ void scale(float const* in, float* scratch, std::size_t n, float factor)
{
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    scratch[i] = in[i] * factor;
  }
}

__global__ void reduce(float const* scratch, std::size_t n, float* out)
{
  float local = 0.0f;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    local += scratch[i];
  }
  atomicAdd(out, local);
}

bool ok(cudaError_t e, char const* what)
{
  if (e != cudaSuccess) { std::fprintf(stderr, "alloc_per_request: %s: %s\n", what, cudaGetErrorName(e)); }
  return e == cudaSuccess;
}

}  // namespace

int main(int argc, char** argv)
{
  int const requests = argc > 1 ? std::atoi(argv[1]) : 2000;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: the demo needs a GPU\n");
    return 77;
  }
  std::vector<float> input(1 << 16);
  for (std::size_t i = 0; i < input.size(); ++i) {
    input[i] = static_cast<float>(i % 7);
  }
  double checksum = 0.0;
  auto const start = std::chrono::steady_clock::now();
  for (int r = 0; r < requests; ++r) {
    std::size_t const n = 1024 + static_cast<std::size_t>((r * 7919) % ((1 << 16) - 1024));
    float* in = nullptr;
    float* scratch = nullptr;
    float* out = nullptr;
    if (!ok(cudaMalloc(&in, n * sizeof(float)), "cudaMalloc") ||
        !ok(cudaMalloc(&scratch, n * sizeof(float)), "cudaMalloc") ||
        !ok(cudaMalloc(&out, sizeof(float)), "cudaMalloc")) {
      return 1;
    }
    float result = 0.0f;
    if (!ok(cudaMemcpy(in, input.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy") ||
        !ok(cudaMemset(out, 0, sizeof(float)), "cudaMemset")) {
      return 1;
    }
    scale<<<32, 256>>>(in, scratch, n, 0.5f);
    reduce<<<32, 256>>>(scratch, n, out);
    if (!ok(cudaMemcpy(&result, out, sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy")) { return 1; }
    checksum += result;
    if (!ok(cudaFree(in), "cudaFree") || !ok(cudaFree(scratch), "cudaFree") || !ok(cudaFree(out), "cudaFree")) {
      return 1;
    }
  }
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d requests in %.3f s: %.1f us per request (3 cudaMalloc + 3 cudaFree each), checksum %.1f\n", requests,
              seconds, 1e6 * seconds / requests, checksum);
  return 0;
}
