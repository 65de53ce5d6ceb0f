// ipc_costs: what legacy IPC and exportable pools cost on this GPU, for
// docs/design.md ("Several GPUs and several processes") and
// tests/bench/RESULTS.md. Run it natively and under the shim.
//   release   (run natively) whether a pool with a POSIX-descriptor handle type gives
//             memory back (release threshold 0, cudaMemPoolTrimTo, destroy) when
//             nothing, its descriptor, or a block of it has been exported, and
//             what a 1 MiB allocation pair costs with and without the handle type
//   latency   cudaIpcGetMemHandle of 16 fresh 2 MiB cudaMalloc blocks in this
//             process, and cudaIpcOpenMemHandle / cudaIpcCloseMemHandle of
//             them in a child (fork + exec): median microseconds per call
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

double now_us()
{
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double free_gib()
{
  size_t f = 0;
  size_t t = 0;
  cudaMemGetInfo(&f, &t);
  return static_cast<double>(f) / (1 << 30);
}

double median(std::vector<double> v)
{
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

cudaMemPool_t make_pool(bool exportable)
{
  cudaMemPoolProps p{};
  p.allocType = cudaMemAllocationTypePinned;
  p.location.type = cudaMemLocationTypeDevice;
  p.location.id = 0;
  p.handleTypes = exportable ? cudaMemHandleTypePosixFileDescriptor : cudaMemHandleTypeNone;
  cudaMemPool_t pool = nullptr;
  if (cudaMemPoolCreate(&pool, &p) != cudaSuccess) { std::printf("cudaMemPoolCreate failed\n"); }
  std::uint64_t zero = 0;
  cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &zero);
  return pool;
}

int release()
{
  char const* names[] = {"no handle type", "never exported", "descriptor exported", "a block exported (of one)",
                         "one block of two exported"};
  std::printf("%-28s %8s %8s %8s %8s %8s  (GiB free)\n", "4 GiB pool blocks", "start", "alloc", "freed", "trimmed",
              "destroyed");
  for (int scenario = 0; scenario < 5; ++scenario) {
    cudaMemPool_t pool = make_pool(scenario > 0);
    int fd = -1;
    if (scenario >= 2) { cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0); }
    double const start = free_gib();
    void* a = nullptr;
    void* b = nullptr;
    std::size_t const each = scenario == 4 ? 2ULL << 30 : 4ULL << 30;
    cudaMallocFromPoolAsync(&a, each, pool, 0);
    if (scenario == 4) { cudaMallocFromPoolAsync(&b, each, pool, 0); }
    cudaStreamSynchronize(0);
    if (scenario >= 3) {
      cudaMemPoolPtrExportData data;
      cudaMemPoolExportPointer(&data, a);
    }
    double const allocated = free_gib();
    cudaFreeAsync(a, 0);
    if (b != nullptr) { cudaFreeAsync(b, 0); }
    cudaStreamSynchronize(0);
    double const freed = free_gib();
    cudaMemPoolTrimTo(pool, 0);
    cudaDeviceSynchronize();
    double const trimmed = free_gib();
    if (fd >= 0) { close(fd); }
    cudaMemPoolDestroy(pool);
    cudaDeviceSynchronize();
    std::printf("%-28s %8.2f %8.2f %8.2f %8.2f %8.2f\n", names[scenario], start, allocated, freed, trimmed, free_gib());
  }
  for (bool exportable : {false, true}) {
    cudaMemPool_t pool = make_pool(exportable);
    std::uint64_t keep = ~0ULL;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    void* p = nullptr;
    std::vector<double> runs;
    for (int run = 0; run < 5; ++run) {
      double const t = now_us();
      for (int i = 0; i < 20000; ++i) {
        cudaMallocFromPoolAsync(&p, 1 << 20, pool, 0);
        cudaFreeAsync(p, 0);
      }
      cudaStreamSynchronize(0);
      runs.push_back((now_us() - t) / 20000);
    }
    std::printf("1 MiB pair, %-17s %.3f us (median of 5 x 20000)\n",
                exportable ? "POSIX-fd pool:" : "plain pool:", median(runs));
    cudaMemPoolDestroy(pool);
  }
  return 0;
}

constexpr int blocks = 16;

int latency(char const* self)
{
  std::vector<void*> memory(blocks);
  std::vector<cudaIpcMemHandle_t> handles(blocks);
  std::vector<double> get;
  for (int i = 0; i < blocks; ++i) {
    if (cudaMalloc(&memory[i], 2 << 20) != cudaSuccess) { return 1; }
    double const t = now_us();
    if (cudaIpcGetMemHandle(&handles[i], memory[i]) != cudaSuccess) {
      std::printf("cudaIpcGetMemHandle failed: %s\n", cudaGetErrorName(cudaGetLastError()));
      return 1;
    }
    get.push_back(now_us() - t);
  }
  int fds[2];
  if (pipe(fds) != 0) { return 1; }
  pid_t const pid = fork();
  if (pid == 0) {
    dup2(fds[0], 0);
    execl(self, self, "open", static_cast<char*>(nullptr));
    _exit(4);
  }
  close(fds[0]);
  if (write(fds[1], handles.data(), sizeof(cudaIpcMemHandle_t) * blocks) < 0) { return 1; }
  close(fds[1]);
  int status = 0;
  waitpid(pid, &status, 0);
  std::printf("cudaIpcGetMemHandle: %.1f us (first %.1f)\n", median(get), get[0]);
  for (void* p : memory) {
    cudaFree(p);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int open_in_child()
{
  std::vector<cudaIpcMemHandle_t> handles(blocks);
  if (read(0, handles.data(), sizeof(cudaIpcMemHandle_t) * blocks) != sizeof(cudaIpcMemHandle_t) * blocks) { return 1; }
  cudaFree(nullptr);
  std::vector<double> open;
  std::vector<double> close;
  std::vector<void*> opened(blocks);
  for (int i = 0; i < blocks; ++i) {
    double const t = now_us();
    if (cudaIpcOpenMemHandle(&opened[i], handles[i], cudaIpcMemLazyEnablePeerAccess) != cudaSuccess) {
      std::printf("cudaIpcOpenMemHandle failed: %s\n", cudaGetErrorName(cudaGetLastError()));
      return 1;
    }
    open.push_back(now_us() - t);
  }
  for (int i = 0; i < blocks; ++i) {
    double const t = now_us();
    cudaIpcCloseMemHandle(opened[i]);
    close.push_back(now_us() - t);
  }
  std::printf("cudaIpcOpenMemHandle: %.1f us (first %.1f); cudaIpcCloseMemHandle: %.1f us\n", median(open), open[0],
              median(close));
  return 0;
}

}  // namespace

int main(int argc, char** argv)
{
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  std::string const what = argc > 1 ? argv[1] : "";
  if (what == "release") { return release(); }
  if (what == "latency") { return latency(argv[0]); }
  if (what == "open") { return open_in_child(); }
  std::fprintf(stderr, "usage: ipc_costs release | latency\n");
  return 2;
}
