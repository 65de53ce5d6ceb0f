// Prints what a series of edge-case CUDA calls return, one line each. Run with
// and without the shim (compare_runs.cmake), the two outputs must be equal.
// Built against the CUDA test double for the CPU tier and against the real
// runtime for the GPU tier.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

void report(char const* what, cudaError_t error) { std::printf("%-34s %s\n", what, cudaGetErrorName(error)); }

}  // namespace

int main()
{
  int count = -1;
  report("cudaGetDeviceCount", cudaGetDeviceCount(&count));
  std::printf("%-34s %d\n", "device count", count);

  void* p = reinterpret_cast<void*>(0x1);
  report("cudaMalloc(&p, 0)", cudaMalloc(&p, 0));
  std::printf("%-34s %s\n", "p after cudaMalloc(&p, 0)", p == nullptr ? "null" : "not null");
  report("cudaFree(nullptr)", cudaFree(nullptr));
  int on_stack = 0;
  report("cudaFree(host pointer)", cudaFree(&on_stack));
  report("  then cudaGetLastError", cudaGetLastError());
  report("cudaMalloc(nullptr, 16)", cudaMalloc(nullptr, 16));
  report("  then cudaGetLastError", cudaGetLastError());
  p = reinterpret_cast<void*>(0xdead00);
  report("cudaMalloc(&p, 1 PiB)", cudaMalloc(&p, std::size_t{1} << 50));
  std::printf("%-34s %s\n", "p after the failure", p == nullptr ? "null" : "unchanged or other");
  report("  then cudaGetLastError", cudaGetLastError());

  constexpr std::size_t bytes = 1 << 20;
  cudaError_t const made = cudaMalloc(&p, bytes);
  report("cudaMalloc(&p, 1 MiB)", made);
  if (made == cudaSuccess) {
    report("cudaMemset", cudaMemset(p, 0x5a, bytes));
    std::vector<unsigned char> host(bytes, 0);
    report("cudaMemcpy to host", cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost));
    bool all = true;
    for (unsigned char c : host) {
      all = all && c == 0x5a;
    }
    std::printf("%-34s %s\n", "data", all ? "as written" : "WRONG");
    report("cudaFree(p)", cudaFree(p));
    report("cudaFree(p) again", cudaFree(p));
    report("  then cudaGetLastError", cudaGetLastError());
  }
  report("final cudaGetLastError", cudaGetLastError());
  return 0;
}
