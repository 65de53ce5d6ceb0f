// Makes a known set of CUDA calls (against the test double) and exits with
// live allocations, so that check_stats.py can compare the shim's statistics
// file with what happened. Prints "pid <n>" (and "child <n>" for `fork`).
//   stats_probe basic|wait|fork|two-devices|many|threads|handoff|reset|global-free|abort
//   stats_probe main-exits [ipc|late]
#include "cuda_double.hpp"

#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

int problems = 0;

// Frees, from its destructor (after main returns), the block the
// "global-free" mode gives it, as a program's global object might.
struct freed_at_exit {
  void* block = nullptr;
  ~freed_at_exit()
  {
    if (block != nullptr) { (void)cudaFree(block); }
  }
} global_holder;

// The block the "main-exits" mode frees from an exit handler.
void* exit_handler_frees = nullptr;

// The names of the process's threads that start with "asyncshim-", sorted,
// comma-separated.
std::string shim_threads()
{
  std::vector<std::string> names;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (dirent const* task = readdir(tasks)) {
      if (task->d_name[0] == '.') { continue; }
      std::string const path = std::string{"/proc/self/task/"} + task->d_name + "/comm";
      if (FILE* comm = std::fopen(path.c_str(), "r")) {
        char name[64] = {};
        if (std::fgets(name, sizeof name, comm) != nullptr) {
          std::string n{name};
          if (!n.empty() && n.back() == '\n') { n.pop_back(); }
          if (n.rfind("asyncshim-", 0) == 0) { names.push_back(n); }
        }
        std::fclose(comm);
      }
    }
    closedir(tasks);
  }
  std::sort(names.begin(), names.end());
  std::string joined;
  for (std::string const& n : names) {
    joined += (joined.empty() ? "" : ",") + n;
  }
  return joined;
}

void expect(bool ok, char const* what)
{
  if (!ok) {
    std::fprintf(stderr, "stats_probe: %s failed\n", what);
    ++problems;
  }
}

// 5 allocations of 1000..5000 bytes, 3 freed, 1 zero-size, 1 failing (1 PiB),
// cudaFree(nullptr), and one free of memory from the double's own cudaMalloc.
void basic()
{
  void* p[5] = {};
  for (int i = 0; i < 5; ++i) {
    expect(cudaMalloc(&p[i], 1000 * (i + 1)) == cudaSuccess, "cudaMalloc");
  }
  for (int i = 0; i < 3; ++i) {
    expect(cudaFree(p[i]) == cudaSuccess, "cudaFree");
  }
  void* zero = nullptr;
  expect(cudaMalloc(&zero, 0) == cudaSuccess, "cudaMalloc(0)");
  void* huge = nullptr;
  expect(cudaMalloc(&huge, std::size_t{1} << 50) == cudaErrorMemoryAllocation, "cudaMalloc(1 PiB)");
  expect(cudaFree(nullptr) == cudaSuccess, "cudaFree(nullptr)");
  auto native_malloc = reinterpret_cast<decltype(&cudaMalloc)>(
    dlsym(dlopen("libcudart_double.so", RTLD_LAZY | RTLD_NOLOAD), "cudaMalloc"));
  void* foreign = nullptr;
  expect(native_malloc(&foreign, 64) == cudaSuccess, "native cudaMalloc");
  expect(cudaFree(foreign) == cudaSuccess, "cudaFree(foreign)");
  // p[3] and p[4] stay allocated: the report is written with live allocations.
}

// Two pinned blocks of 3000 and 5000 bytes; the first freed.
void pinned()
{
  void* block[2] = {};
  expect(cudaMallocHost(&block[0], 3000) == cudaSuccess, "cudaMallocHost");
  expect(cudaHostAlloc(&block[1], 5000, cudaHostAllocPortable) == cudaSuccess, "cudaHostAlloc");
  expect(cudaFreeHost(block[0]) == cudaSuccess, "cudaFreeHost");
}

// Pinned blocks of 3000 and 5000 bytes freed during captures: the first
// during a relaxed one (the free returns at once), the second on a thread a
// global capture forbids it (the free fails; the block stays allocated).
void pinned_captures()
{
  void* relaxed = nullptr;
  void* forbidden = nullptr;
  expect(cudaMallocHost(&relaxed, 3000) == cudaSuccess, "cudaMallocHost");
  expect(cudaMallocHost(&forbidden, 5000) == cudaSuccess, "cudaMallocHost");
  cudaStream_t stream = nullptr;
  expect(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess, "cudaStreamCreateWithFlags");
  cudaGraph_t graph = nullptr;
  expect(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess, "relaxed capture");
  expect(cudaFreeHost(relaxed) == cudaSuccess, "cudaFreeHost during a relaxed capture");
  expect(cudaStreamEndCapture(stream, &graph) == cudaSuccess, "cudaStreamEndCapture");
  if (graph != nullptr) { (void)cudaGraphDestroy(graph); }
  expect(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess, "global capture");
  expect(cudaFreeHost(forbidden) == cudaErrorStreamCaptureUnsupported, "cudaFreeHost refused by a global capture");
  (void)cudaStreamEndCapture(stream, &graph);  // invalidated
  (void)cudaGetLastError();
  expect(cudaStreamDestroy(stream) == cudaSuccess, "cudaStreamDestroy");
}

}  // namespace

int main(int argc, char** argv)
{
  std::string const what = argc > 1 ? argv[1] : "basic";
  std::printf("pid %ld\n", static_cast<long>(getpid()));
  if (what == "basic") {
    basic();
  } else if (what == "pinned") {  // and a write-combined block, which the host pool leaves to the native call
    basic();
    pinned();
    void* write_combined = nullptr;
    expect(cudaHostAlloc(&write_combined, 700, cudaHostAllocWriteCombined) == cudaSuccess, "cudaHostAlloc(wc)");
  } else if (what == "pinned-captures") {
    pinned_captures();
  } else if (what == "wait") {  // pinned, "ready", exits at a line on standard input
    basic();
    pinned();
    std::printf("ready\n");
    std::fflush(stdout);
    char line[8];
    (void)std::fgets(line, sizeof line, stdin);
  } else if (what == "two-devices") {
    basic();
    expect(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice(1)");
    void* q = nullptr;
    expect(cudaMalloc(&q, 7000) == cudaSuccess, "cudaMalloc on device 1");
  } else if (what == "fork") {
    basic();
    std::fflush(stdout);
    pid_t const child = fork();
    if (child == 0) {  // the child's calls go to the native allocator
      void* c = nullptr;
      bool const ok =
        cudaMalloc(&c, 300) == cudaSuccess && cuda_double_pointer_kind(c) == 1 && cudaFree(c) == cudaSuccess;
      std::exit(ok ? 0 : 1);
    }
    std::printf("child %ld\n", static_cast<long>(child));
    int status = 0;
    waitpid(child, &status, 0);
    expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child");
  } else if (what == "many") {
    // 22 blocks of 256 B .. 5.5 KiB, then 3 of 100 B, a moment apart; none freed.
    // Prints each 100-byte block's address ("same <address>"), in allocation order.
    for (int i = 0; i < 22; ++i) {
      void* q = nullptr;
      expect(cudaMalloc(&q, 256 * (i + 1)) == cudaSuccess, "cudaMalloc");
    }
    for (int i = 0; i < 3; ++i) {
      void* q = nullptr;
      expect(cudaMalloc(&q, 100) == cudaSuccess, "cudaMalloc(100)");
      std::printf("same %p\n", q);
      usleep(2000);
    }
  } else if (what == "threads") {
    // 8 threads, each 2000 pairs of 256 * (its index + 1) bytes.
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([t] {
        for (int i = 0; i < 2000; ++i) {
          void* q = nullptr;
          if (cudaMalloc(&q, 256 * (t + 1)) != cudaSuccess || cudaFree(q) != cudaSuccess) { std::_Exit(3); }
        }
      });
    }
    for (auto& th : threads) {
      th.join();
    }
  } else if (what == "handoff") {
    // One thread allocates 2000 blocks, another frees each as soon as it gets
    // it. The freeing thread makes its first call (a pair of 64 bytes) first.
    std::mutex m;
    std::condition_variable ready;
    std::deque<void*> queue;
    bool done = false;
    bool consumer_started = false;
    std::thread consumer{[&] {
      void* first = nullptr;
      if (cudaMalloc(&first, 64) != cudaSuccess || cudaFree(first) != cudaSuccess) { std::_Exit(3); }
      {
        std::lock_guard lock{m};
        consumer_started = true;
      }
      ready.notify_all();
      for (;;) {
        std::unique_lock lock{m};
        ready.wait(lock, [&] { return done || !queue.empty(); });
        if (queue.empty()) { return; }
        void* q = queue.front();
        queue.pop_front();
        lock.unlock();
        if (cudaFree(q) != cudaSuccess) { std::_Exit(3); }
      }
    }};
    std::thread producer{[&] {
      {
        std::unique_lock lock{m};
        ready.wait(lock, [&] { return consumer_started; });
      }
      for (int i = 0; i < 2000; ++i) {
        void* q = nullptr;
        if (cudaMalloc(&q, 512) != cudaSuccess) { std::_Exit(3); }
        {
          std::lock_guard lock{m};
          queue.push_back(q);
        }
        ready.notify_all();
      }
      {
        std::lock_guard lock{m};
        done = true;
      }
      ready.notify_all();
    }};
    producer.join();
    consumer.join();
  } else if (what == "reset") {
    // Two blocks that a device reset frees, then one that stays.
    void* a = nullptr;
    void* b = nullptr;
    expect(cudaMalloc(&a, 1000) == cudaSuccess && cudaMalloc(&b, 2000) == cudaSuccess, "cudaMalloc");
    expect(cudaDeviceReset() == cudaSuccess, "cudaDeviceReset");
    void* c = nullptr;
    expect(cudaMalloc(&c, 3000) == cudaSuccess, "cudaMalloc after the reset");
  } else if (what == "global-free") {
    // 1234 bytes freed by a global object's destructor, 777 never freed.
    expect(cudaMalloc(&global_holder.block, 1234) == cudaSuccess, "cudaMalloc(1234)");
    void* leaked = nullptr;
    expect(cudaMalloc(&leaked, 777) == cudaSuccess, "cudaMalloc(777)");
  } else if (what == "abort") {
    // Three allocations, then the program dies of SIGABRT before any exit handler.
    for (int i = 0; i < 3; ++i) {
      void* q = nullptr;
      expect(cudaMalloc(&q, 1000 * (i + 1)) == cudaSuccess, "cudaMalloc");
    }
    std::fflush(stdout);
    std::abort();
  } else if (what == "main-exits") {
    // A block of 1000 bytes, then the main thread ends with pthread_exit: the
    // process ends when its last thread does, with status 0, and an exit
    // handler frees the block. Prints the shim's threads before ("threads
    // <name>,..."). "ipc": the block's legacy IPC handle is taken first (the
    // shim's channel thread starts). "late": a thread of the program's
    // allocates and frees 4242 bytes 2.5 s after the main thread has ended,
    // once it has seen that the shim's threads are all still there
    // (status 4 if not), and ends.
    std::string const extra = argc > 2 ? argv[2] : "";
    expect(cudaMalloc(&exit_handler_frees, 1000) == cudaSuccess, "cudaMalloc");
    expect(std::atexit([] { (void)cudaFree(exit_handler_frees); }) == 0, "atexit");
    if (extra == "ipc") {
      cudaIpcMemHandle_t handle{};
      expect(cudaIpcGetMemHandle(&handle, exit_handler_frees) == cudaSuccess, "cudaIpcGetMemHandle");
    }
    std::string const before = shim_threads();
    std::printf("threads %s\n", before.c_str());
    if (extra == "late") {
      std::thread{[before] {
        std::this_thread::sleep_for(std::chrono::milliseconds{2500});
        if (shim_threads() != before) { std::_Exit(4); }
        void* r = nullptr;
        if (cudaMalloc(&r, 4242) != cudaSuccess || cudaFree(r) != cudaSuccess) { std::_Exit(3); }
      }}.detach();
    }
    std::fflush(stdout);
    if (problems != 0) { return 1; }
    pthread_exit(nullptr);
  } else {
    std::fprintf(stderr,
                 "usage: stats_probe basic|fork|two-devices|many|threads|handoff|reset|global-free|abort|main-exits\n");
    return 2;
  }
  return problems == 0 ? 0 : 1;
}
