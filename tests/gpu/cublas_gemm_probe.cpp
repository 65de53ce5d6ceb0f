// A cuBLAS SGEMM whose result (a checksum of C) must be the same with and
// without the shim. cuBLAS allocates its workspace through its own runtime.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

int main()
{
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device on this machine\n");
    return 0;
  }
  constexpr int n = 512;
  std::vector<float> a(n * n);
  std::vector<float> b(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>((i * 7) % 13) / 8.0f;
    b[i] = static_cast<float>((i * 5) % 11) / 8.0f;
  }
  float* da = nullptr;
  float* db = nullptr;
  float* dc = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&da), sizeof(float) * n * n) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&db), sizeof(float) * n * n) != cudaSuccess ||
      cudaMalloc(reinterpret_cast<void**>(&dc), sizeof(float) * n * n) != cudaSuccess) {
    std::printf("FAIL: cudaMalloc\n");
    return 1;
  }
  cudaMemcpy(da, a.data(), sizeof(float) * n * n, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), sizeof(float) * n * n, cudaMemcpyHostToDevice);
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    std::printf("FAIL: cublasCreate\n");
    return 1;
  }
  cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);  // no TF32: an exact, repeatable result
  float const alpha = 1.0f;
  float const beta = 0.0f;
  double checksum = 0;
  for (int round = 0; round < 3; ++round) {
    if (cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, da, n, db, n, &beta, dc, n) !=
        CUBLAS_STATUS_SUCCESS) {
      std::printf("FAIL: cublasSgemm\n");
      return 1;
    }
    std::vector<float> c(n * n);
    cudaMemcpy(c.data(), dc, sizeof(float) * n * n, cudaMemcpyDeviceToHost);
    for (float v : c) {
      checksum += v;
    }
  }
  cublasDestroy(handle);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  std::printf("sgemm %dx%d x3: checksum %.6f\n", n, n, checksum);
  return 0;
}
