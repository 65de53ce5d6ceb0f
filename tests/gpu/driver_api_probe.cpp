// A program linked with -lcuda that allocates with cuMemAlloc and frees with
// cuMemFree, plus the cross-level cases: cudaMalloc'd memory freed with
// cuMemFree and the reverse. Run with and without the shim (its output must
// not change except for "pool" lines, which the test checks per mode).
//   driver_api_probe          prints SKIP: ... without a device
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

int failures = 0;

#define CHECK_CU(call)                                                                        \
  do {                                                                                        \
    CUresult const r_ = (call);                                                               \
    if (r_ != CUDA_SUCCESS) {                                                                 \
      std::printf("FAIL: %s returned %d (line %d)\n", #call, static_cast<int>(r_), __LINE__); \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

std::atomic<bool> host_function_done{false};

void CUDA_CB slow_host_function(void*)
{
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  host_function_done = true;
}

// CUDA 13's cuCtxSynchronize (what cuGetProcAddress returns from version
// 13000: cuCtxSynchronize_v2(ctx)) waits for the context it is given, also
// from a thread where no context is current.
void synchronize_a_named_context(CUcontext context)
{
  void* found = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (cuGetProcAddress("cuCtxSynchronize", &found, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &status) != CUDA_SUCCESS ||
      status != CU_GET_PROC_ADDRESS_SUCCESS || found == nullptr) {
    std::printf("cuCtxSynchronize of CUDA 13: not in this driver\n");
    return;
  }
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuLaunchHostFunc(stream, slow_host_function, nullptr));
  CUresult result = CUDA_ERROR_UNKNOWN;
  std::thread([&] { result = reinterpret_cast<CUresult (*)(CUcontext)>(found)(context); }).join();
  bool const waited = host_function_done.load();
  std::printf("cuCtxSynchronize of CUDA 13, another thread: %d, %s\n", static_cast<int>(result),
              waited ? "waited for the context's work" : "did NOT wait");
  if (result != CUDA_SUCCESS || !waited) { ++failures; }
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuStreamDestroy(stream));
}

bool in_pool(CUdeviceptr p)
{
  CUmemoryPool pool = nullptr;
  return cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p) == CUDA_SUCCESS && pool != nullptr;
}

}  // namespace

int main()
{
  if (cuInit(0) != CUDA_SUCCESS) {
    std::printf("SKIP: no CUDA device or driver on this machine (cuInit failed)\n");
    return 0;
  }
  bool const expect_pool = std::getenv("LD_PRELOAD") != nullptr && std::getenv("EXPECT_NATIVE") == nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));

  int pooled = 0;
  for (int i = 0; i < 50; ++i) {
    std::size_t const words = 1000 + 4096 * static_cast<std::size_t>(i);
    CUdeviceptr p = 0;
    CHECK_CU(cuMemAlloc(&p, words * sizeof(unsigned)));
    pooled += in_pool(p) ? 1 : 0;
    CHECK_CU(cuMemsetD32(p, 0xC0FFEE00u + static_cast<unsigned>(i), words));
    std::vector<unsigned> host(words);
    CHECK_CU(cuMemcpyDtoH(host.data(), p, words * sizeof(unsigned)));
    for (unsigned w : host) {
      if (w != 0xC0FFEE00u + static_cast<unsigned>(i)) {
        std::printf("FAIL: data of buffer %d\n", i);
        ++failures;
        break;
      }
    }
    CHECK_CU(cuMemFree(p));
  }
  std::printf("cuMemAlloc: 50 buffers, data ok\n");
  if (pooled != (expect_pool ? 50 : 0)) {
    std::printf("FAIL: %d of 50 buffers from a pool, expected %d\n", pooled, expect_pool ? 50 : 0);
    ++failures;
  }
  CHECK_CU(cuCtxSynchronize());

  // Cross-level: freed through the other API.
  void* runtime_ptr = nullptr;
  if (cudaMalloc(&runtime_ptr, 1 << 20) != cudaSuccess) { ++failures; }
  CHECK_CU(cuMemFree(reinterpret_cast<CUdeviceptr>(runtime_ptr)));
  CUdeviceptr driver_ptr = 0;
  CHECK_CU(cuMemAlloc(&driver_ptr, 1 << 20));
  if (cudaFree(reinterpret_cast<void*>(driver_ptr)) != cudaSuccess) {
    std::printf("FAIL: cudaFree of cuMemAlloc memory\n");
    ++failures;
  }
  std::printf("cross-level frees done\n");
  synchronize_a_named_context(context);
  // Null arguments pass through with the native answer.
  std::printf("cuMemAlloc(nullptr, 16) = %d\n", static_cast<int>(cuMemAlloc(nullptr, 16)));
  CUdeviceptr zero = 0;
  std::printf("cuMemAlloc(&p, 0) = %d\n", static_cast<int>(cuMemAlloc(&zero, 0)));
  std::printf("driver_api_probe: %s\n", failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
