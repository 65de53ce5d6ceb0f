// workload: a seeded CUDA program for the virtual GPU of the CUDA test doubles
// (CUDA_DOUBLE_SIMULATE; see tests/cuda_double/virtual_gpu.hpp), run under
// the shim by scripts/simulate.sh.
//
//   workload --seed S [--operations N] [VAR=VALUE ...]
//
// Its seed S chooses the settings (swarm testing: each seed its own subset of
// the shim's options, devices and program features; VAR=VALUE given here
// wins), then the program runs again with them in its environment and does N
// operations on 1-4 threads: allocations, frees from any thread, kernels that
// touch what they own on the legacy, per-thread and created streams (blocking
// and non-blocking, created and destroyed mid-run), event records and waits
// across streams, host functions, graphs (captured, then launched as one
// task), work in a context of the program's own, synchronous copies and
// fills, synchronizations. The program
// is correct under native CUDA (cudaFree waits for the device), so every use
// after reissue the virtual GPU reports is the shim's. Threads take turns
// that S decides, so a run replays exactly.
//
// Prints one line "workload: seed=S operations=N ... uses_after_reissue=U"
// and exits 1 if U > 0, 2 on a CUDA call failing, 0 otherwise.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_double.hpp"

extern char** environ;

namespace {

class random_source {
 public:
  explicit random_source(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next()
  {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
  bool percent(unsigned p) { return below(100) < p; }

 private:
  std::uint64_t state_;
};

// ---- the settings a seed chooses

struct setting {
  char const* name;
  std::vector<char const*> values;  // the first is the most likely
};

// The shim's options the swarm draws from (ASYNCSHIM_ORDERING=stream breaks
// the promise by design: only when asked for).
std::vector<setting> const swarm = {
  {"ASYNCSHIM_ORDERING", {"device", "device", "device", "sync"}},
  {"ASYNCSHIM_STREAM", {"legacy", "per-thread"}},
  {"ASYNCSHIM_IN_ORDER_FREES", {"on", "off"}},
  {"ASYNCSHIM_REUSE_CACHE", {"0", "16MiB", "64KiB"}},
  {"ASYNCSHIM_FREE_BACKLOG", {"off", "4KiB", "1MiB"}},
  {"ASYNCSHIM_EXPORT_HANDLE_TYPE", {"auto", "none"}},
  {"CUDA_DOUBLE_DEVICES", {"1", "1", "2"}},
  {"WORKLOAD_THREADS", {"1", "2", "4", "3"}},
  {"WORKLOAD_NON_BLOCKING", {"on", "off"}},
  {"WORKLOAD_DESTROY_STREAMS", {"on", "off"}},
  {"WORKLOAD_EVENTS", {"on", "off"}},
  {"WORKLOAD_SYNCHRONIZE", {"rarely", "often", "never"}},
  // (New settings go last: each seed keeps the choices it had.)
  {"WORKLOAD_UNSEEN_STREAMS", {"off", "on"}},
  {"WORKLOAD_HOST_FUNCTIONS", {"off", "on"}},
  {"WORKLOAD_GRAPHS", {"off", "on"}},
  {"WORKLOAD_CONTEXTS", {"off", "on"}},
  {"WORKLOAD_ASYNC_COPIES", {"off", "on"}},
  {"WORKLOAD_IPC", {"off", "on"}},
  {"WORKLOAD_PITCHED", {"off", "on"}},
  // Above the blocks' own alignment: pitched blocks the pool gives unaligned go back, and the native call serves.
  {"CUDA_DOUBLE_TEXTURE_ALIGNMENT", {"512", "4096"}},
  {"WORKLOAD_PINNED", {"off", "on"}},
  {"ASYNCSHIM_HOST_POOL", {"on", "off"}},
};

// Fixed for every run: what would make a run depend on the clock.
std::vector<std::pair<char const*, char const*>> const fixed = {
  {"ASYNCSHIM_IDLE_RELEASE", "off"},
  {"ASYNCSHIM_INITIAL_POOL_SIZE", "0"},
};

std::string setting_value(char const* name)
{
  char const* v = std::getenv(name);
  return v != nullptr ? v : "";
}

bool flag(char const* name) { return setting_value(name) == "on"; }

// ---- the program

struct buffer {
  void* p = nullptr;
  std::size_t size = 0;
  int device = 0;
  bool pinned = false;  // pinned host memory, freed by cudaFreeHost
};

struct stream_slot {
  cudaStream_t stream = nullptr;
  int device = 0;
};

struct program {
  random_source rng;
  int devices = 1;
  bool non_blocking = true;
  bool destroy_streams = true;
  bool unseen_streams = false;  // streams made past the shim (as through a private driver table)
  bool host_functions = false;  // host functions among the work: tasks that touch no device memory
  bool graphs = false;          // work captured into graphs and launched as one task
  bool async_copies = false;    // copies and sets on streams (and in graphs) beside kernels
  bool ipc = false;             // legacy IPC handles of buffers: an exported block's free is never in order
  bool pitched = false;         // some buffers from cudaMallocPitch, cudaMalloc3D and cuMemAllocPitch
  bool pinned = false;          // some buffers in pinned host memory (cudaMallocHost and the like)
  // A context the program made on device 0 (WORKLOAD_CONTEXTS), with a
  // blocking stream of its own: work there reads device-0 buffers.
  CUcontext own_context = nullptr;
  CUstream own_blocking = nullptr;
  bool events = true;
  unsigned synchronize_percent = 2;
  std::vector<buffer> buffers;        // owned by the program, any thread may use or free them
  std::vector<stream_slot> streams;   // created streams
  std::vector<cudaEvent_t> recorded;  // events recorded at least once (each of one device)
  std::vector<int> recorded_device;
  unsigned long long operations = 0;
  unsigned long long failures = 0;
  unsigned long long launches = 0;
  unsigned long long frees = 0;
  explicit program(std::uint64_t seed) : rng(seed ^ 0x5eed) {}
};

constexpr std::size_t sizes[] = {256, 4096, 65536, 1 << 20};

bool check(program& p, cudaError_t e, char const* what)
{
  if (e == cudaSuccess) { return true; }
  std::fprintf(stderr, "workload: %s failed: %s\n", what, cudaGetErrorName(e));
  ++p.failures;
  return false;
}

bool check_cu(program& p, CUresult r, char const* what)
{
  if (r == CUDA_SUCCESS) { return true; }
  std::fprintf(stderr, "workload: %s failed: %d\n", what, static_cast<int>(r));
  ++p.failures;
  return false;
}

// A stream of the current device to put work on: the legacy one, the
// thread's per-thread one or a created one.
cudaStream_t pick_stream(program& p, int device)
{
  std::uint64_t const pick = p.rng.below(4);
  if (pick == 0) { return cudaStreamLegacy; }
  if (pick == 1) { return cudaStreamPerThread; }
  std::vector<cudaStream_t> mine;
  for (stream_slot const& s : p.streams) {
    if (s.device == device) { mine.push_back(s.stream); }
  }
  if (mine.empty()) { return nullptr; }  // the legacy stream too
  return mine[p.rng.below(mine.size())];
}

void launch_touching(program& p, cudaStream_t stream, std::vector<buffer const*> const& touched)
{
  unsigned long long n = touched.size();
  std::vector<CUdeviceptr> pointers(touched.size());
  std::vector<std::size_t> bytes(touched.size());
  std::vector<void*> params{&n};
  for (std::size_t i = 0; i < touched.size(); ++i) {
    // A part of the buffer, or all of it.
    std::size_t const offset = p.rng.percent(50) ? 0 : p.rng.below(touched[i]->size);
    pointers[i] = reinterpret_cast<CUdeviceptr>(touched[i]->p) + offset;
    bytes[i] = touched[i]->size - offset;
    params.push_back(&pointers[i]);
    params.push_back(&bytes[i]);
  }
  auto const f = static_cast<CUfunction>(cuda_double_touch_kernel());
  check_cu(p, cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, reinterpret_cast<CUstream>(stream), params.data(), nullptr),
           "cuLaunchKernel");
  ++p.launches;
}

// A copy between two buffers, or a set of one, on `stream`.
void copy_or_set(program& p, cudaStream_t stream, std::vector<buffer const*> const& touched)
{
  if (touched[0]->pinned) {  // memsets are for device memory; a kernel writes it
    launch_touching(p, stream, touched);
    return;
  }
  if (touched.size() >= 2) {
    std::size_t const bytes = std::min(touched[0]->size, touched[1]->size);
    check(p, cudaMemcpyAsync(touched[0]->p, touched[1]->p, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
  } else {
    check(p, cudaMemsetAsync(touched[0]->p, 0x3c, touched[0]->size, stream), "cudaMemsetAsync");
  }
  ++p.launches;
}

// A kernel, or (WORKLOAD_ASYNC_COPIES) as often a copy or a set.
void work_on(program& p, cudaStream_t stream, std::vector<buffer const*> const& touched)
{
  if (p.async_copies && p.rng.percent(50)) {
    copy_or_set(p, stream, touched);
  } else {
    launch_touching(p, stream, touched);
  }
}

void CUDART_CB do_nothing(void* /*user_data*/) {}

// A context of the program's own on device 0, with a blocking stream of its
// own; none current after.
void make_own_context(program& p)
{
  p.own_context = nullptr;
  p.own_blocking = nullptr;
  if (!check_cu(p, cuCtxCreate(&p.own_context, nullptr, 0, 0), "cuCtxCreate")) {
    p.own_context = nullptr;
    return;
  }
  check_cu(p, cuStreamCreate(&p.own_blocking, CU_STREAM_DEFAULT), "cuStreamCreate");
  CUcontext popped = nullptr;
  check_cu(p, cuCtxPopCurrent(&popped), "cuCtxPopCurrent");
}

// Work captured into a graph on a stream of its own (thread-local mode),
// launched once or twice on any stream as one task, then the graph and its
// executable destroyed: the buffers stay the program's while it may run.
void launch_graph(program& p, int device, std::vector<buffer const*> const& touched)
{
  cudaStream_t capturing = nullptr;
  if (!check(p, cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) { return; }
  cudaGraph_t graph = nullptr;
  if (check(p, cudaStreamBeginCapture(capturing, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture")) {
    work_on(p, capturing, touched);
    check(p, cudaStreamEndCapture(capturing, &graph), "cudaStreamEndCapture");
  }
  check(p, cudaStreamDestroy(capturing), "cudaStreamDestroy");
  if (graph == nullptr) { return; }
  cudaGraphExec_t exec = nullptr;
  if (check(p, cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate")) {
    for (std::uint64_t i = 0, n = 1 + p.rng.below(2); i < n; ++i) {
      check(p, cudaGraphLaunch(exec, pick_stream(p, device)), "cudaGraphLaunch");
    }
    check(p, cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  }
  check(p, cudaGraphDestroy(graph), "cudaGraphDestroy");
}

// A buffer of about b.size bytes from one of the pitched calls: rows of an
// odd width, padded to the pitch (b.size becomes pitch × rows).
bool allocate_pitched(program& p, buffer& b)
{
  std::size_t const width = b.size / 4 - 3;
  std::size_t pitch = 0;
  switch (p.rng.below(3)) {
    case 0:
      if (!check(p, cudaMallocPitch(&b.p, &pitch, width, 4), "cudaMallocPitch")) { return false; }
      break;
    case 1: {
      cudaPitchedPtr volume{};
      cudaExtent e{};
      e.width = width;
      e.height = 2;
      e.depth = 2;
      if (!check(p, cudaMalloc3D(&volume, e), "cudaMalloc3D")) { return false; }
      b.p = volume.ptr;
      pitch = volume.pitch;
      break;
    }
    default: {
      CUdeviceptr d = 0;
      if (!check_cu(p, cuMemAllocPitch(&d, &pitch, width, 4, 4), "cuMemAllocPitch")) { return false; }
      b.p = reinterpret_cast<void*>(d);
      break;
    }
  }
  b.size = pitch * 4;
  return true;
}

// A buffer of b.size bytes of pinned host memory, from any of the calls that
// allocate it (with the flags the host pool serves).
bool allocate_pinned(program& p, buffer& b)
{
  b.pinned = true;
  switch (p.rng.below(4)) {
    case 0: return check(p, cudaMallocHost(&b.p, b.size), "cudaMallocHost");
    case 1: return check(p, cudaHostAlloc(&b.p, b.size, static_cast<unsigned>(p.rng.below(4))), "cudaHostAlloc");
    case 2: return check_cu(p, cuMemAllocHost(&b.p, b.size), "cuMemAllocHost");
    default: return check_cu(p, cuMemHostAlloc(&b.p, b.size, CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
  }
}

void one_operation(program& p)
{
  ++p.operations;
  int const device = p.devices > 1 ? static_cast<int>(p.rng.below(static_cast<std::uint64_t>(p.devices))) : 0;
  if (!check(p, cudaSetDevice(device), "cudaSetDevice")) { return; }
  std::uint64_t const kind = p.rng.below(100);
  if (kind < 18 || p.buffers.empty()) {
    buffer b;
    b.size = sizes[p.rng.below(std::size(sizes))];
    b.device = device;
    if (p.pinned && p.rng.percent(25)) {
      if (!allocate_pinned(p, b)) { return; }
    } else if (p.pitched && p.rng.percent(30)) {
      if (!allocate_pitched(p, b)) { return; }
    } else if (!check(p, cudaMalloc(&b.p, b.size), "cudaMalloc")) {
      return;
    }
    cuda_double_sim_handout(b.p, b.size);
    p.buffers.push_back(b);
    // A new owner usually writes first: on the legacy stream or any other.
    if (p.rng.percent(70)) { launch_touching(p, pick_stream(p, device), {&p.buffers.back()}); }
  } else if (kind < 50 && p.host_functions && p.rng.percent(20)) {
    check(p, cudaLaunchHostFunc(pick_stream(p, device), do_nothing, nullptr), "cudaLaunchHostFunc");
  } else if (kind < 50 && p.own_context != nullptr && p.rng.percent(15)) {
    if (p.rng.percent(10)) {
      // Destroyed with its work pending, and a new one made.
      check_cu(p, cuCtxDestroy(p.own_context), "cuCtxDestroy");
      make_own_context(p);
      return;
    }
    buffer const* b = &p.buffers[p.rng.below(p.buffers.size())];
    if (b->device != 0) { return; }
    if (!check_cu(p, cuCtxPushCurrent(p.own_context), "cuCtxPushCurrent")) { return; }
    launch_touching(p, p.rng.percent(50) ? nullptr : reinterpret_cast<cudaStream_t>(p.own_blocking), {b});
    CUcontext popped = nullptr;
    check_cu(p, cuCtxPopCurrent(&popped), "cuCtxPopCurrent");
  } else if (kind < 50 && p.ipc && p.rng.percent(10)) {
    // Another process could open it (none does here); the handle may be
    // refused (a pool that cannot export): that changes nothing.
    cudaIpcMemHandle_t handle{};
    (void)cudaIpcGetMemHandle(&handle, p.buffers[p.rng.below(p.buffers.size())].p);
    (void)cudaGetLastError();
  } else if (kind < 50 && p.graphs && p.rng.percent(15)) {
    std::vector<buffer const*> touched{&p.buffers[p.rng.below(p.buffers.size())]};
    if (p.rng.percent(30)) { touched.push_back(&p.buffers[p.rng.below(p.buffers.size())]); }
    launch_graph(p, device, touched);
  } else if (kind < 50) {
    // Work on one or two buffers (a buffer of another device too, as over
    // peer access).
    std::vector<buffer const*> touched{&p.buffers[p.rng.below(p.buffers.size())]};
    if (p.rng.percent(30)) { touched.push_back(&p.buffers[p.rng.below(p.buffers.size())]); }
    work_on(p, pick_stream(p, device), touched);
  } else if (kind < 66) {
    std::size_t const i = p.rng.below(p.buffers.size());
    buffer const b = p.buffers[i];
    p.buffers.erase(p.buffers.begin() + static_cast<std::ptrdiff_t>(i));
    cuda_double_sim_freed(b.p);
    if (p.rng.percent(20)) { check(p, cudaSetDevice(b.device), "cudaSetDevice"); }
    if (b.pinned) {
      check(p, cudaFreeHost(b.p), "cudaFreeHost");
    } else {
      check(p, cudaFree(b.p), "cudaFree");
    }
    ++p.frees;
  } else if (kind < 72) {
    buffer const& b = p.buffers[p.rng.below(p.buffers.size())];
    if (b.pinned) { return; }  // the synchronous copies and sets are for device memory
    if (p.rng.percent(50)) {
      check(p, cudaMemset(b.p, 0x5a, b.size), "cudaMemset");
    } else {
      std::vector<unsigned char> host(b.size);
      check(p, cudaMemcpy(host.data(), b.p, b.size, cudaMemcpyDeviceToHost), "cudaMemcpy");
    }
  } else if (kind < 78) {
    if (p.streams.size() < 8) {
      stream_slot s;
      s.device = device;
      unsigned const flags = p.non_blocking && p.rng.percent(60) ? cudaStreamNonBlocking : cudaStreamDefault;
      if (p.unseen_streams && p.rng.percent(50)) {
        if (cuda_double_create_stream_unfollowed(&s.stream, flags) != 0) { p.streams.push_back(s); }
      } else if (check(p, cudaStreamCreateWithFlags(&s.stream, flags), "cudaStreamCreateWithFlags")) {
        p.streams.push_back(s);
      }
    } else if (p.destroy_streams) {
      std::size_t const i = p.rng.below(p.streams.size());
      stream_slot const s = p.streams[i];
      p.streams.erase(p.streams.begin() + static_cast<std::ptrdiff_t>(i));
      // Its work may still be pending: it goes on after the destroy.
      check(p, cudaStreamDestroy(s.stream), "cudaStreamDestroy");
    }
  } else if (kind < 90) {
    if (!p.events) { return; }
    if (p.recorded.empty() || p.rng.percent(40)) {
      cudaEvent_t e = nullptr;
      if (!check(p, cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate")) { return; }
      p.recorded.push_back(e);
      p.recorded_device.push_back(device);
    }
    std::size_t const i = p.rng.below(p.recorded.size());
    if (p.recorded_device[i] != device) { return; }
    if (p.rng.percent(50)) {
      check(p, cudaEventRecord(p.recorded[i], pick_stream(p, device)), "cudaEventRecord");
    } else {
      check(p, cudaStreamWaitEvent(pick_stream(p, device), p.recorded[i], 0), "cudaStreamWaitEvent");
    }
  } else if (p.rng.percent(p.synchronize_percent * 10)) {
    switch (p.rng.below(3)) {
      case 0: check(p, cudaDeviceSynchronize(), "cudaDeviceSynchronize"); break;
      case 1: check(p, cudaStreamSynchronize(pick_stream(p, device)), "cudaStreamSynchronize"); break;
      default:
        if (!p.recorded.empty()) {
          std::size_t const i = p.rng.below(p.recorded.size());
          (void)cudaEventQuery(p.recorded[i]);
        }
    }
  }
}

// Threads take turns: the one whose number `turn` holds does one operation.
struct turns {
  std::mutex mu;
  std::condition_variable cv;
  int turn = -1;
  bool over = false;
};

int run(std::uint64_t seed, unsigned long long operations)
{
  program p(seed);
  p.devices = std::atoi(setting_value("CUDA_DOUBLE_DEVICES").c_str());
  if (p.devices < 1) { p.devices = 1; }
  p.non_blocking = flag("WORKLOAD_NON_BLOCKING");
  p.destroy_streams = flag("WORKLOAD_DESTROY_STREAMS");
  p.unseen_streams = flag("WORKLOAD_UNSEEN_STREAMS");
  p.host_functions = flag("WORKLOAD_HOST_FUNCTIONS");
  p.graphs = flag("WORKLOAD_GRAPHS");
  p.async_copies = flag("WORKLOAD_ASYNC_COPIES");
  p.ipc = flag("WORKLOAD_IPC");
  p.pitched = flag("WORKLOAD_PITCHED");
  p.pinned = flag("WORKLOAD_PINNED");
  if (flag("WORKLOAD_CONTEXTS")) {
    check(p, cudaSetDevice(0), "cudaSetDevice");
    check(p, cudaFree(nullptr), "cudaFree");  // the primary context first, as the runtime makes it
    make_own_context(p);
  }
  p.events = flag("WORKLOAD_EVENTS");
  std::string const sync = setting_value("WORKLOAD_SYNCHRONIZE");
  p.synchronize_percent = sync == "often" ? 10 : sync == "never" ? 0 : 1;
  int const threads = std::max(1, std::atoi(setting_value("WORKLOAD_THREADS").c_str()));

  // Every device may touch every other's memory, as a multi-GPU program sets up.
  for (int d = 0; d < p.devices && p.devices > 1; ++d) {
    check(p, cudaSetDevice(d), "cudaSetDevice");
    for (int peer = 0; peer < p.devices; ++peer) {
      if (peer != d) { check(p, cudaDeviceEnablePeerAccess(peer, 0), "cudaDeviceEnablePeerAccess"); }
    }
  }
  turns t;
  std::vector<std::thread> workers;
  for (int me = 0; me < threads; ++me) {
    workers.emplace_back([&, me] {
      std::unique_lock lock(t.mu);
      for (;;) {
        t.cv.wait(lock, [&] { return t.turn == me || t.over; });
        if (t.over) { return; }
        one_operation(p);
        t.turn = -1;
        t.cv.notify_all();
      }
    });
  }
  random_source order(seed ^ 0x7417);
  for (unsigned long long i = 0; i < operations; ++i) {
    std::unique_lock lock(t.mu);
    t.turn = static_cast<int>(order.below(static_cast<std::uint64_t>(threads)));
    t.cv.notify_all();
    t.cv.wait(lock, [&] { return t.turn == -1; });
  }
  {
    std::lock_guard lock(t.mu);
    t.over = true;
    t.cv.notify_all();
  }
  for (std::thread& w : workers) {
    w.join();
  }
  // Whatever is left: freed, then the device finishes (every touch is checked).
  for (buffer const& b : p.buffers) {
    check(p, cudaSetDevice(b.device), "cudaSetDevice");
    cuda_double_sim_freed(b.p);
    check(p, b.pinned ? cudaFreeHost(b.p) : cudaFree(b.p), b.pinned ? "cudaFreeHost" : "cudaFree");
  }
  for (int d = 0; d < p.devices; ++d) {
    check(p, cudaSetDevice(d), "cudaSetDevice");
    check(p, cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  cuda_double_sim_summary const s = cuda_double_sim_get_summary();
  std::printf("workload: seed=%llu operations=%llu threads=%d launches=%llu frees=%llu tasks=%llu "
              "out_of_order=%llu pool_reuses=%llu across_streams=%llu touches_checked=%llu "
              "uses_after_reissue=%llu failed_calls=%llu simulated=%llu\n",
              static_cast<unsigned long long>(seed), p.operations, threads, p.launches, p.frees, s.tasks_run,
              s.out_of_order_runs, s.pool_reuses, s.reuses_across_streams, s.touches_checked, s.uses_after_reissue,
              p.failures, s.enabled);
  if (s.enabled == 0) {
    std::fprintf(stderr, "workload: the virtual GPU is off (CUDA_DOUBLE_SIMULATE unset): nothing was checked\n");
    return 2;
  }
  if (s.uses_after_reissue != 0) { return 1; }
  return p.failures != 0 ? 2 : 0;
}

int usage()
{
  std::fprintf(stderr, "usage: workload --seed S [--operations N] [VAR=VALUE ...]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv)
{
  std::uint64_t seed = 0;
  bool have_seed = false;
  unsigned long long operations = 2000;
  bool settled = false;  // the settings are in the environment already
  std::vector<std::string> overrides;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (a == "--seed" && i + 1 < argc) {
      seed = std::strtoull(argv[++i], nullptr, 0);
      have_seed = true;
    } else if (a == "--operations" && i + 1 < argc) {
      operations = std::strtoull(argv[++i], nullptr, 0);
    } else if (a == "--settled") {
      settled = true;
    } else if (a.find('=') != std::string::npos && a[0] != '-') {
      overrides.push_back(a);
    } else {
      return usage();
    }
  }
  if (!have_seed) { return usage(); }
  if (settled) { return run(seed, operations); }

  // Choose the settings, print them, and run again with them: the shim and
  // the doubles read their environment once, at their first use.
  random_source choose(seed ^ 0xc0ffee);
  std::vector<std::string> env;
  for (setting const& s : swarm) {
    env.push_back(std::string(s.name) + "=" + s.values[choose.below(s.values.size())]);
  }
  for (auto const& [name, value] : fixed) {
    env.push_back(std::string(name) + "=" + value);
  }
  env.push_back("CUDA_DOUBLE_SIMULATE=" + std::to_string(seed));
  for (std::string const& o : overrides) {
    std::string const name = o.substr(0, o.find('='));
    bool replaced = false;
    for (std::string& e : env) {
      if (e.compare(0, name.size() + 1, name + "=") == 0) {
        e = o;
        replaced = true;
      }
    }
    if (!replaced) { env.push_back(o); }
  }
  std::string line;
  for (std::string const& e : env) {
    line += " " + e;
    putenv(const_cast<char*>(e.c_str()));
  }
  std::printf("workload: settings%s\n", line.c_str());
  std::fflush(stdout);
  std::string const ops = std::to_string(operations);
  std::string const seed_text = std::to_string(seed);
  char* const args[] = {argv[0],
                        const_cast<char*>("--seed"),
                        const_cast<char*>(seed_text.c_str()),
                        const_cast<char*>("--operations"),
                        const_cast<char*>(ops.c_str()),
                        const_cast<char*>("--settled"),
                        nullptr};
  execve("/proc/self/exe", args, environ);
  std::perror("workload: execve");
  return 2;
}
