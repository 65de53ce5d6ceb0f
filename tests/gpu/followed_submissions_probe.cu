// Whether the shim sees each kind of work a program can submit to a
// non-blocking stream (docs/design.md#followed-submissions), under the shim with
// `device` ordering: a stream kept busy by work submitted before a block was
// allocated, then given work of one kind that uses the block, then the block
// freed. A free the shim knows may still be in use is fenced: the next
// allocation of the size gets another block. Without the work ("none"), the
// busy stream cannot be using the block: the free goes in order, and the
// next allocation gets the same block back at once. One line per kind; exit
// status 1 if any kind was not seen (or the control was fenced).
//   followed_submissions_probe   (built twice: also with --default-stream per-thread)
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "probe_common.cuh"

namespace {

__global__ void spin_for(unsigned long long ns)
{
  unsigned long long const start = device_clock_ns();
  while (device_clock_ns() - start < ns) {}
}

__global__ void touch(unsigned* data) { data[threadIdx.x] = threadIdx.x; }

void CUDART_CB host_function(void*) {}
void CUDART_CB stream_callback(cudaStream_t, cudaError_t, void*) {}

constexpr std::size_t block_bytes = 1 << 20;

bool ok(cudaError_t r, char const* what)
{
  if (r == cudaSuccess) { return true; }
  std::printf("FAIL: %s: %s\n", what, cudaGetErrorString(r));
  return false;
}

// Submits work of `kind` that uses `block` to `stream`.
bool submit(std::string const& kind, cudaStream_t stream, void* block, void* pinned)
{
  auto* const words = static_cast<unsigned*>(block);
  if (kind == "none") { return true; }
  if (kind == "kernel") {
    touch<<<1, 32, 0, stream>>>(words);
    return ok(cudaGetLastError(), "kernel launch");
  }
  if (kind == "kernel-ex") {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(1);
    config.blockDim = dim3(32);
    config.stream = stream;
    return ok(cudaLaunchKernelEx(&config, touch, words), "cudaLaunchKernelEx");
  }
  if (kind == "memset") { return ok(cudaMemsetAsync(block, 1, block_bytes, stream), "cudaMemsetAsync"); }
  if (kind == "memcpy-d2d") {
    return ok(cudaMemcpyAsync(block, static_cast<char*>(block) + block_bytes / 2, block_bytes / 2,
                              cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync");
  }
  if (kind == "memcpy-h2d") {
    return ok(cudaMemcpyAsync(block, pinned, 4096, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync");
  }
  if (kind == "memcpy-d2h") {
    return ok(cudaMemcpyAsync(pinned, block, 4096, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  }
  if (kind == "memcpy-2d") {
    return ok(cudaMemcpy2DAsync(block, 1024, pinned, 1024, 512, 4, cudaMemcpyHostToDevice, stream),
              "cudaMemcpy2DAsync");
  }
  if (kind == "host-func") { return ok(cudaLaunchHostFunc(stream, host_function, nullptr), "cudaLaunchHostFunc"); }
  if (kind == "callback") {
    return ok(cudaStreamAddCallback(stream, stream_callback, nullptr, 0), "cudaStreamAddCallback");
  }
  if (kind == "graph") {
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaMemsetParams set{};
    set.dst = block;
    set.value = 2;
    set.elementSize = 1;
    set.width = block_bytes;
    set.height = 1;
    cudaGraphNode_t node = nullptr;
    bool const made = ok(cudaGraphCreate(&graph, 0), "cudaGraphCreate") &&
                      ok(cudaGraphAddMemsetNode(&node, graph, nullptr, 0, &set), "cudaGraphAddMemsetNode") &&
                      ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    bool const launched = made && ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    if (exec != nullptr) { (void)cudaGraphExecDestroy(exec); }
    if (graph != nullptr) { (void)cudaGraphDestroy(graph); }
    return launched;
  }
  if (kind == "driver-memset") {  // the driver API, called directly (the shim's export)
    CUresult const r =
      cuMemsetD32Async(reinterpret_cast<CUdeviceptr>(block), 7, block_bytes / 4, reinterpret_cast<CUstream>(stream));
    if (r != CUDA_SUCCESS) { std::printf("FAIL: cuMemsetD32Async: %d\n", static_cast<int>(r)); }
    return r == CUDA_SUCCESS;
  }
  if (kind == "driver-launch") {  // cuLaunchKernel, called directly
    cudaFunction_t function = nullptr;
    if (!ok(cudaGetFuncBySymbol(&function, reinterpret_cast<void const*>(&touch)), "cudaGetFuncBySymbol")) {
      return false;
    }
    void* args[] = {&block};
    CUresult const r = cuLaunchKernel(reinterpret_cast<CUfunction>(function), 1, 1, 1, 32, 1, 1, 0,
                                      reinterpret_cast<CUstream>(stream), args, nullptr);
    if (r != CUDA_SUCCESS) { std::printf("FAIL: cuLaunchKernel: %d\n", static_cast<int>(r)); }
    return r == CUDA_SUCCESS;
  }
  std::printf("FAIL: unknown kind %s\n", kind.c_str());
  return false;
}

}  // namespace

int main()
{
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  cudaStream_t side = nullptr;
  void* pinned = nullptr;
  if (!ok(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreateWithFlags") ||
      !ok(cudaMallocHost(&pinned, 1 << 16), "cudaMallocHost")) {
    return 1;
  }
  std::memset(pinned, 0, 1 << 16);
  std::vector<std::string> const kinds = {"none",       "kernel",        "kernel-ex",    "memset",    "memcpy-d2d",
                                          "memcpy-h2d", "memcpy-d2h",    "memcpy-2d",    "host-func", "callback",
                                          "graph",      "driver-memset", "driver-launch"};
  int wrong = 0;
  for (std::string const& kind : kinds) {
    // Busy for 50 ms with work submitted before the block is allocated.
    spin_for<<<1, 1, 0, side>>>(50'000'000ULL);
    void* block = nullptr;
    void* next = nullptr;
    if (!ok(cudaGetLastError(), "spin launch") || !ok(cudaMalloc(&block, block_bytes), "cudaMalloc")) { return 1; }
    if (!submit(kind, side, block, pinned)) {  // said why; the next kind is tried all the same
      ++wrong;
      (void)cudaGetLastError();
    }
    if (!ok(cudaFree(block), "cudaFree") || !ok(cudaMalloc(&next, block_bytes), "cudaMalloc")) { return 1; }
    bool const fenced = next != block;
    bool const want_fenced = kind != "none";
    std::printf("%s %s: the free was %s (%s)\n", fenced == want_fenced ? "ok" : "WRONG", kind.c_str(),
                fenced ? "fenced behind the stream's work" : "made in order", want_fenced ? "seen" : "control");
    wrong += fenced == want_fenced ? 0 : 1;
    if (!ok(cudaFree(next), "cudaFree") || !ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) { return 1; }
  }
  (void)cudaFreeHost(pinned);
  (void)cudaStreamDestroy(side);
  std::printf("%s: %d of %zu kinds wrong\n", wrong == 0 ? "PASS" : "FAIL", wrong, kinds.size());
  return wrong == 0 ? 0 : 1;
}
