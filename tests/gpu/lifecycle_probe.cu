// Corners of a CUDA program's life in which cudaMalloc/cudaFree must behave
// exactly as natively: stream capture (each capture mode, the capturing thread
// or another one), cudaDeviceReset, running out of memory, CUDA's last-error
// state, fork, and process exit with live memory, from static destructors and
// from atexit handlers, and after a reset. One subcommand per corner; each
// prints deterministic lines only (CUDA error names, booleans, counts; never
// pointers or timings), so that tests/shim/compare_runs.cmake can compare its
// output, standard error and exit status without and with libasyncshim.so
// (tests/gpu/CMakeLists.txt: gpu.same_as_native.<subcommand>).
//
// Exit status 0 unless something impossible happens (bad usage: 2); "SKIP: no
// CUDA device" and exit 0 where there is no device. Every run has 120 s
// (alarm), a forked child 10 or 20 s, so a hang ends as SIGALRM instead.
#include "byte_literals.hpp"

#include <cuda_runtime_api.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

using byte_literals::GiB;
using byte_literals::MiB;

char const* name(cudaError_t e) { return cudaGetErrorName(e); }

void report(std::string const& what, cudaError_t e) { std::printf("%s: %s\n", what.c_str(), name(e)); }

void report_last_error(char const* indent = "  ")
{
  std::printf("%scudaGetLastError: %s\n", indent, name(cudaGetLastError()));
}

__global__ void noop_kernel() {}

__global__ void fill_kernel(unsigned* data, std::size_t n, unsigned seed)
{
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    data[i] = static_cast<unsigned>(i) * 2654435761u ^ seed;
  }
}

// A kernel writes the memory (legacy stream), a memcpy reads it back:
// "<label>: data ok", or what failed.
void check_data(std::string const& label, void* p, std::size_t bytes, unsigned seed = 12345)
{
  std::size_t const n = bytes / sizeof(unsigned);
  fill_kernel<<<64, 256>>>(static_cast<unsigned*>(p), n, seed);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::printf("%s: kernel launch: %s\n", label.c_str(), name(e));
    return;
  }
  std::vector<unsigned> host(n);
  e = cudaMemcpy(host.data(), p, n * sizeof(unsigned), cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    std::printf("%s: cudaMemcpy: %s\n", label.c_str(), name(e));
    return;
  }
  bool ok = true;
  for (std::size_t i = 0; i < n && ok; ++i) {
    ok = host[i] == (static_cast<unsigned>(i) * 2654435761u ^ seed);
  }
  std::printf("%s: %s\n", label.c_str(), ok ? "data ok" : "data WRONG");
}

void finish()
{
  report("cudaDeviceSynchronize", cudaDeviceSynchronize());
  report_last_error("");
}

// ---- stream capture -----------------------------------------------------------

enum class stream_kind { non_blocking, blocking, per_thread };

struct capture_case {
  stream_kind stream;
  cudaStreamCaptureMode capture_mode;
  bool other_thread;          // cudaMalloc/cudaFree from a second thread
  bool other_thread_relaxed;  // which switches itself to relaxed mode first
};

char const* mode_name(cudaStreamCaptureMode m)
{
  switch (m) {
    case cudaStreamCaptureModeGlobal: return "global";
    case cudaStreamCaptureModeThreadLocal: return "thread-local";
    case cudaStreamCaptureModeRelaxed: return "relaxed";
  }
  return "unknown";
}

void print_capture_status(char const* indent, cudaStream_t s)
{
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  cudaError_t const e = cudaStreamIsCapturing(s, &status);
  if (e != cudaSuccess) {
    std::printf("%scudaStreamIsCapturing: %s\n", indent, name(e));
    return;
  }
  char const* text = status == cudaStreamCaptureStatusNone          ? "none"
                     : status == cudaStreamCaptureStatusActive      ? "active"
                     : status == cudaStreamCaptureStatusInvalidated ? "invalidated"
                                                                    : "unknown";
  std::printf("%scapture status: %s\n", indent, text);
}

void print_graph(cudaGraph_t graph)
{
  std::size_t count = 0;
  cudaError_t e = cudaGraphGetNodes(graph, nullptr, &count);
  if (e != cudaSuccess) {
    report("cudaGraphGetNodes", e);
    return;
  }
  std::vector<cudaGraphNode_t> nodes(count);
  if (count != 0) {
    e = cudaGraphGetNodes(graph, nodes.data(), &count);
    if (e != cudaSuccess) {
      report("cudaGraphGetNodes", e);
      return;
    }
  }
  int kernels = 0;
  int allocs = 0;
  int frees = 0;
  int others = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type{};
    if (cudaGraphNodeGetType(node, &type) != cudaSuccess) {
      ++others;
      continue;
    }
    if (type == cudaGraphNodeTypeKernel) {
      ++kernels;
    } else if (type == cudaGraphNodeTypeMemAlloc) {
      ++allocs;
    } else if (type == cudaGraphNodeTypeMemFree) {
      ++frees;
    } else {
      ++others;
    }
  }
  std::printf("graph: %zu nodes (kernel %d, mem-alloc %d, mem-free %d, other %d)\n", count, kernels, allocs, frees,
              others);
}

void capture(capture_case const& c)
{
  char const* kind = c.stream == stream_kind::non_blocking ? "created, cudaStreamNonBlocking"
                     : c.stream == stream_kind::blocking   ? "created, blocking (flags 0)"
                                                           : "cudaStreamPerThread";
  std::printf("stream: %s; capture mode: %s; cudaMalloc/cudaFree from: %s\n", kind, mode_name(c.capture_mode),
              !c.other_thread          ? "the capturing thread"
              : c.other_thread_relaxed ? "a second thread, relaxed mode"
                                       : "a second thread, global mode (the default)");
  cudaStream_t s = cudaStreamPerThread;
  if (c.stream != stream_kind::per_thread) {
    unsigned const flags = c.stream == stream_kind::non_blocking ? cudaStreamNonBlocking : cudaStreamDefault;
    report("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&s, flags));
  }
  void* pre = nullptr;
  report("cudaMalloc(pre, 1 MiB) before the capture", cudaMalloc(&pre, MiB));
  check_data("pre before the capture", pre, MiB);  // also loads the kernels: no module loading during the capture
  noop_kernel<<<1, 1, 0, s>>>();
  report("kernel launch before the capture", cudaGetLastError());
  report("cudaDeviceSynchronize before the capture", cudaDeviceSynchronize());

  report(std::string{"cudaStreamBeginCapture("} + mode_name(c.capture_mode) + ")",
         cudaStreamBeginCapture(s, c.capture_mode));
  noop_kernel<<<1, 1, 0, s>>>();
  report("kernel launch into the capture", cudaGetLastError());
  print_capture_status("", s);

  void* m = nullptr;
  cudaError_t malloc_result = cudaErrorUnknown;
  cudaError_t free_pre_result = cudaErrorUnknown;
  auto calls = [&] {
    std::string const who = c.other_thread ? "thread 2: " : "";
    cudaStreamCaptureMode previous = cudaStreamCaptureModeRelaxed;
    if (c.other_thread_relaxed) {
      report(who + "cudaThreadExchangeStreamCaptureMode(relaxed)", cudaThreadExchangeStreamCaptureMode(&previous));
      std::printf("%sprevious mode: %s\n", who.c_str(), mode_name(previous));
    }
    malloc_result = cudaMalloc(&m, MiB);
    report(who + "cudaMalloc(m, 1 MiB) during the capture", malloc_result);
    report_last_error();
    print_capture_status("  ", s);
    free_pre_result = cudaFree(pre);
    report(who + "cudaFree(pre) during the capture", free_pre_result);
    report_last_error();
    print_capture_status("  ", s);
    report(who + "cudaFree(nullptr) during the capture", cudaFree(nullptr));
    report_last_error();
    print_capture_status("  ", s);
    if (c.other_thread_relaxed) { (void)cudaThreadExchangeStreamCaptureMode(&previous); }
  };
  if (c.other_thread) {
    std::thread second{calls};
    second.join();
  } else {
    calls();
  }

  cudaGraph_t graph = nullptr;
  report("cudaStreamEndCapture", cudaStreamEndCapture(s, &graph));
  report_last_error();
  if (graph != nullptr) {
    print_graph(graph);
    report("cudaGraphDestroy", cudaGraphDestroy(graph));
  } else {
    std::printf("graph: none\n");
  }
  print_capture_status("", s);

  if (malloc_result == cudaSuccess) {
    check_data("m after the capture", m, MiB);
    report("cudaFree(m) after the capture", cudaFree(m));
  } else {
    std::printf("m: not allocated\n");
  }
  if (free_pre_result != cudaSuccess) { report("cudaFree(pre) after the capture", cudaFree(pre)); }
  if (c.stream != stream_kind::per_thread) { report("cudaStreamDestroy", cudaStreamDestroy(s)); }
  finish();
}

// ---- cudaDeviceReset ----------------------------------------------------------

void reset()
{
  for (int cycle = 1; cycle <= 2; ++cycle) {
    std::string const prefix = "cycle " + std::to_string(cycle) + ": ";
    std::size_t const bytes = cycle == 1 ? MiB : 4 * MiB;
    void* a = nullptr;
    cudaError_t const made = cudaMalloc(&a, bytes);
    report(prefix + "cudaMalloc(a)", made);
    if (made == cudaSuccess) { check_data(prefix + "a before the reset", a, bytes); }
    report(prefix + "cudaDeviceReset", cudaDeviceReset());
    if (made == cudaSuccess) {
      report(prefix + "cudaFree(a) after the reset", cudaFree(a));
      report_last_error();
    }
    void* b = nullptr;
    cudaError_t const again = cudaMalloc(&b, bytes);
    report(prefix + "cudaMalloc(b) after the reset", again);
    report_last_error();
    if (again == cudaSuccess) {
      check_data(prefix + "b", b, bytes);
      report(prefix + "cudaFree(b)", cudaFree(b));
    }
  }
  void* c = nullptr;
  cudaError_t const made = cudaMalloc(&c, MiB);
  report("after both cycles: cudaMalloc(c)", made);
  if (made == cudaSuccess) {
    check_data("after both cycles: c", c, MiB);
    report("after both cycles: cudaFree(c)", cudaFree(c));
  }
  finish();
}

// ---- out of memory ------------------------------------------------------------

void oom()
{
  std::size_t free_bytes = 0;
  std::size_t total = 0;
  report("cudaMemGetInfo", cudaMemGetInfo(&free_bytes, &total));
  void* p = nullptr;
  report("cudaMalloc(total memory + 1 GiB)", cudaMalloc(&p, total + GiB));
  report_last_error();

  void* q = nullptr;
  cudaError_t e = cudaMalloc(&q, MiB);
  report("cudaMalloc(1 MiB) after the failure", e);
  if (e == cudaSuccess) {
    check_data("1 MiB", q, MiB);
    report("cudaFree(1 MiB)", cudaFree(q));
  }

  std::vector<void*> blocks;
  cudaError_t failure = cudaSuccess;
  std::size_t const limit = total / GiB + 16;
  while (blocks.size() < limit) {
    void* b = nullptr;
    e = cudaMalloc(&b, GiB);
    if (e != cudaSuccess) {
      failure = e;
      break;
    }
    blocks.push_back(b);
  }
  std::printf("exhausting memory with 1 GiB blocks: failure seen: %s\n", failure != cudaSuccess ? "yes" : "no");
  if (failure != cudaSuccess) { std::printf("  error: %s\n", name(failure)); }
  report_last_error();
  std::printf("  at least one block allocated: %s\n", blocks.empty() ? "no" : "yes");
  cudaError_t first_bad = cudaSuccess;
  for (void* b : blocks) {
    e = cudaFree(b);
    if (e != cudaSuccess && first_bad == cudaSuccess) { first_bad = e; }
  }
  report("cudaFree of every block (first error, if any)", first_bad);
  report_last_error();

  void* big = nullptr;
  e = cudaMalloc(&big, GiB);
  report("cudaMalloc(1 GiB) after freeing them", e);
  if (e == cudaSuccess) {
    report("cudaMemset(1 GiB)", cudaMemset(big, 0x5a, GiB));
    check_data("last MiB of the 1 GiB", static_cast<char*>(big) + GiB - MiB, MiB);
    report("cudaFree(1 GiB)", cudaFree(big));
  }
  finish();
}

// ---- the last-error state -------------------------------------------------------

void last_error()
{
  void* p = nullptr;
  report("cudaMalloc(p, 1 MiB)", cudaMalloc(&p, MiB));
  report_last_error();
  report("cudaFree(p)", cudaFree(p));
  report_last_error();

  // A launch that fails at once; its error is deliberately not read here.
  noop_kernel<<<1, 4096>>>();
  std::printf("kernel launched with 4096 threads per block (error not read)\n");
  void* q = nullptr;
  report("cudaMalloc(q, 1 MiB)", cudaMalloc(&q, MiB));
  report("cudaFree(q)", cudaFree(q));
  report("cudaFree(nullptr)", cudaFree(nullptr));
  report("cudaPeekAtLastError", cudaPeekAtLastError());
  report("cudaGetLastError", cudaGetLastError());
  report("cudaGetLastError again", cudaGetLastError());

  // A failed allocation stays the last error across successful calls.
  void* huge = nullptr;
  report("cudaMalloc(1 PiB)", cudaMalloc(&huge, std::size_t{1} << 50));
  report("cudaMalloc(q, 1 MiB)", cudaMalloc(&q, MiB));
  report("cudaFree(q)", cudaFree(q));
  report("cudaGetLastError", cudaGetLastError());

  int on_stack = 0;
  report("cudaFree(host stack pointer)", cudaFree(&on_stack));
  report_last_error();
  report("cudaFree(0x1000)", cudaFree(reinterpret_cast<void*>(std::uintptr_t{0x1000})));
  report_last_error();

  void* r = nullptr;
  report("cudaMalloc(r, 1 MiB)", cudaMalloc(&r, MiB));
  report("cudaFree(r + 256) (inside an allocation)", cudaFree(static_cast<char*>(r) + 256));
  report_last_error();
  check_data("r after the interior free", r, MiB);
  report("cudaFree(r)", cudaFree(r));
  report("cudaFree(r) again", cudaFree(r));
  report_last_error();

  // The most recent error wins: a failed launch, then a failed cudaFree.
  noop_kernel<<<1, 4096>>>();
  report("cudaFree(host stack pointer) after a failed launch", cudaFree(&on_stack));
  report_last_error();
  // And a failed launch after a failed cudaFree.
  report("cudaFree(host stack pointer)", cudaFree(&on_stack));
  noop_kernel<<<1, 4096>>>();
  std::printf("kernel launched with 4096 threads per block (error not read)\n");
  report("cudaMalloc(q, 1 MiB)", cudaMalloc(&q, MiB));
  report("cudaFree(q)", cudaFree(q));
  report_last_error();
  finish();
}

// ---- fork ---------------------------------------------------------------------

std::string wait_status(pid_t pid)
{
  int status = 0;
  pid_t const r = waitpid(pid, &status, 0);
  if (r != pid) { return "waitpid failed"; }
  if (WIFEXITED(status)) { return "exit " + std::to_string(WEXITSTATUS(status)); }
  if (WIFSIGNALED(status)) { return "signal " + std::to_string(WTERMSIG(status)); }
  return "other";
}

pid_t fork_flushed()
{
  std::fflush(stdout);
  std::fflush(stderr);
  return fork();
}

void fork_children()
{
  void* p = nullptr;
  report("parent: cudaMalloc(p, 1 MiB)", cudaMalloc(&p, MiB));
  check_data("parent: p before the forks", p, MiB, 777);

  pid_t pid = fork_flushed();
  if (pid == 0) {
    execl("/bin/true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::printf("child 1 (execs /bin/true): %s\n", wait_status(pid).c_str());

  pid = fork_flushed();
  if (pid == 0) { std::exit(0); }  // never touches CUDA, exits normally (exit handlers run)
  std::printf("child 2 (no CUDA, exit(0)): %s\n", wait_status(pid).c_str());

  pid = fork_flushed();
  if (pid == 0) {
    alarm(20);
    void* q = nullptr;
    cudaError_t const e = cudaMalloc(&q, MiB);
    std::printf("child 3: cudaMalloc: %s\n", name(e));
    if (e == cudaSuccess) { std::printf("child 3: cudaFree: %s\n", name(cudaFree(q))); }
    std::fflush(stdout);
    std::exit(0);
  }
  std::printf("child 3 (cudaMalloc, exit(0)): %s\n", wait_status(pid).c_str());

  // The parent carries on as if nothing happened.
  unsigned first = 0;
  report("parent: cudaMemcpy(p) after the forks", cudaMemcpy(&first, p, sizeof(first), cudaMemcpyDeviceToHost));
  std::printf("parent: p kept its data: %s\n", first == (0u ^ 777u) ? "yes" : "no");
  report("parent: cudaFree(p)", cudaFree(p));
  void* r = nullptr;
  cudaError_t const e = cudaMalloc(&r, MiB);
  report("parent: cudaMalloc(r, 1 MiB)", e);
  if (e == cudaSuccess) {
    check_data("parent: r", r, MiB);
    report("parent: cudaFree(r)", cudaFree(r));
  }
  finish();
}

// Forks while another thread of the parent is inside cudaMalloc/cudaFree in a
// tight loop: nothing may wait on a lock that thread held at the fork. Even
// children call cudaMalloc (its result comes back through a pipe) and exit(0);
// odd ones only exit(0), which runs the exit handlers (the runtime's, the
// shim's). A child has 5 s (alarm); after two children were killed no more
// are made, so a deadlock costs at most 10 s.
void fork_under_load()
{
  constexpr int forks = 50;
  std::atomic<bool> stop{false};
  std::atomic<long> rounds{0};
  std::atomic<int> loop_errors{0};
  std::thread load{[&] {  // no stdio in here: a child would inherit its lock held
    std::size_t size = 256;
    while (!stop.load()) {
      void* x = nullptr;
      if (cudaMalloc(&x, size) != cudaSuccess) {
        ++loop_errors;
      } else if (cudaFree(x) != cudaSuccess) {
        ++loop_errors;
      }
      size = size >= MiB ? 256 : size * 4;
      ++rounds;
    }
  }};
  while (rounds.load() < 100) {
    std::this_thread::yield();
  }

  std::map<std::string, int> statuses[2];  // [calls cudaMalloc] exit status -> how many children
  std::map<std::string, int> results;      // cudaMalloc's result in the child -> how many children
  int made = 0;
  int killed = 0;
  for (int i = 0; i < forks && killed < 2; ++i) {
    bool const calls_cuda = i % 2 == 0;
    int fds[2];
    if (pipe(fds) != 0) {
      std::printf("pipe failed\n");
      break;
    }
    pid_t const pid = fork_flushed();
    if (pid == 0) {
      alarm(5);
      close(fds[0]);
      if (calls_cuda) {
        void* q = nullptr;
        int const result = static_cast<int>(cudaMalloc(&q, 4096));
        if (result == cudaSuccess) { (void)cudaFree(q); }
        if (write(fds[1], &result, sizeof(result)) != static_cast<ssize_t>(sizeof(result))) { std::exit(3); }
      }
      std::exit(0);
    }
    close(fds[1]);
    if (pid < 0) {
      close(fds[0]);
      std::printf("fork failed\n");
      break;
    }
    ++made;
    int result = -1;
    ssize_t const got = read(fds[0], &result, sizeof(result));
    close(fds[0]);
    std::string const status = wait_status(pid);
    killed += status.rfind("signal", 0) == 0 ? 1 : 0;
    ++statuses[calls_cuda ? 1 : 0][status];
    if (calls_cuda) {
      ++results[got == static_cast<ssize_t>(sizeof(result)) ? name(static_cast<cudaError_t>(result)) : "no result"];
    }
  }
  stop = true;
  load.join();
  std::printf("fork-under-load: forks made: %d of %d\n", made, forks);
  bool const all_ok = made == forks && statuses[0].size() == 1 && statuses[0].count("exit 0") == 1 &&
                      statuses[1].size() == 1 && statuses[1].count("exit 0") == 1;
  if (all_ok) {
    std::printf("fork-under-load: children ok\n");
  } else {
    for (int k = 0; k < 2; ++k) {
      for (auto const& [status, count] : statuses[k]) {
        std::printf("fork-under-load: %d children %s: %s\n", count, k == 1 ? "calling cudaMalloc" : "only exiting",
                    status.c_str());
      }
    }
  }
  for (auto const& [result, count] : results) {
    std::printf("fork-under-load: cudaMalloc in a child: %s (%d children)\n", result.c_str(), count);
  }
  std::printf("fork-under-load: errors in the parent's loop: %d\n", loop_errors.load());
  finish();
}

// ---- exit ---------------------------------------------------------------------

// Frees what main leaves in it from a static destructor (after main returned).
struct free_at_exit {
  void* ptr = nullptr;
  free_at_exit() = default;
  free_at_exit(free_at_exit const&) = delete;
  free_at_exit& operator=(free_at_exit const&) = delete;
  ~free_at_exit()
  {
    if (ptr == nullptr) { return; }
    (void)cudaFree(ptr);  // its result may differ by design between CUDA versions: not printed
    std::printf("destructor done\n");
    std::fflush(stdout);
  }
};
free_at_exit destructor_frees;

bool atexit_armed = false;
void* atexit_before_ptr = nullptr;
void* atexit_after_ptr = nullptr;

void atexit_calls(void* ptr)
{
  if (ptr != nullptr) { (void)cudaFree(ptr); }
  void* x = nullptr;
  if (cudaMalloc(&x, MiB) == cudaSuccess) { (void)cudaFree(x); }
}

void atexit_registered_before_cuda()
{
  if (!atexit_armed) { return; }
  atexit_calls(atexit_before_ptr);
  std::printf("atexit handler registered before the first CUDA call: done\n");
  std::fflush(stdout);
}

void atexit_registered_after_cuda()
{
  if (!atexit_armed) { return; }
  atexit_calls(atexit_after_ptr);
  std::printf("atexit handler registered after the first CUDA call: done\n");
  std::fflush(stdout);
}

void exit_live()
{
  std::size_t const sizes[] = {256, 4096, MiB, 16 * MiB, 64 * MiB};
  int made = 0;
  for (std::size_t bytes : sizes) {
    void* p = nullptr;
    cudaError_t const e = cudaMalloc(&p, bytes);
    report("cudaMalloc(" + std::to_string(bytes) + " bytes)", e);
    if (e == cudaSuccess) {
      ++made;
      cudaError_t const set = cudaMemset(p, 0x11, bytes);
      if (set != cudaSuccess) { report("  cudaMemset", set); }
    }
  }
  report("cudaDeviceSynchronize", cudaDeviceSynchronize());
  std::printf("returning from main with %d buffers not freed\n", made);
}

void exit_static_destructor()
{
  void* p = nullptr;
  cudaError_t const e = cudaMalloc(&p, MiB);
  report("cudaMalloc(p, 1 MiB)", e);
  if (e == cudaSuccess) {
    check_data("p", p, MiB);
    destructor_frees.ptr = p;
  }
  std::printf("returning from main; a static destructor frees p\n");
}

void exit_atexit()
{
  // atexit_registered_before_cuda was registered by main before any CUDA call.
  report("cudaMalloc(before-handler's buffer)", cudaMalloc(&atexit_before_ptr, MiB));
  report("cudaMalloc(after-handler's buffer)", cudaMalloc(&atexit_after_ptr, MiB));
  std::atexit(atexit_registered_after_cuda);
  atexit_armed = true;
  report("cudaDeviceSynchronize", cudaDeviceSynchronize());
  std::printf("returning from main; the atexit handlers free the buffers and allocate again\n");
}

void exit_after_reset(bool free_in_destructor)
{
  void* p = nullptr;
  cudaError_t const e = cudaMalloc(&p, MiB);
  report("cudaMalloc(p, 1 MiB)", e);
  if (e == cudaSuccess) { check_data("p", p, MiB); }
  report("cudaDeviceReset", cudaDeviceReset());
  if (free_in_destructor && e == cudaSuccess) {
    destructor_frees.ptr = p;
    std::printf("returning from main; a static destructor frees the pointer from before the reset\n");
  } else {
    std::printf("returning from main; the pointer from before the reset is never freed\n");
  }
}

char const* const subcommands[] = {"capture-global-same-thread",
                                   "capture-global-other-thread",
                                   "capture-thread-local-other-thread",
                                   "capture-relaxed-same-thread",
                                   "capture-legacy-blocking",
                                   "capture-per-thread-stream",
                                   "reset",
                                   "oom",
                                   "last-error",
                                   "fork",
                                   "fork-under-load",
                                   "exit-live",
                                   "exit-static-destructor",
                                   "exit-atexit",
                                   "exit-after-reset",
                                   "exit-after-reset-destructor"};

[[noreturn]] void usage()
{
  std::fprintf(stderr, "usage: lifecycle_probe SUBCOMMAND, one of:\n");
  for (char const* s : subcommands) {
    std::fprintf(stderr, "  %s\n", s);
  }
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc != 2) { usage(); }
  std::string const cmd = argv[1];
  bool known = false;
  for (char const* s : subcommands) {
    known = known || cmd == s;
  }
  if (!known) { usage(); }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a crash in the same order
  alarm(120);
  if (cmd == "exit-atexit") { std::atexit(atexit_registered_before_cuda); }  // before the first CUDA call

  int count = 0;
  cudaError_t const counted = cudaGetDeviceCount(&count);
  if (counted != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s)\n", name(counted));
    return 0;
  }

  using mode = cudaStreamCaptureMode;
  mode const global = cudaStreamCaptureModeGlobal;
  mode const thread_local_mode = cudaStreamCaptureModeThreadLocal;
  mode const relaxed = cudaStreamCaptureModeRelaxed;
  if (cmd == "capture-global-same-thread") {
    capture({stream_kind::non_blocking, global, false, false});
  } else if (cmd == "capture-global-other-thread") {
    capture({stream_kind::non_blocking, global, true, false});
  } else if (cmd == "capture-thread-local-other-thread") {
    capture({stream_kind::non_blocking, thread_local_mode, true, false});
  } else if (cmd == "capture-relaxed-same-thread") {
    capture({stream_kind::non_blocking, relaxed, false, false});
  } else if (cmd == "capture-legacy-blocking") {
    capture({stream_kind::blocking, global, true, true});
  } else if (cmd == "capture-per-thread-stream") {
    capture({stream_kind::per_thread, relaxed, false, false});
  } else if (cmd == "reset") {
    reset();
  } else if (cmd == "oom") {
    oom();
  } else if (cmd == "last-error") {
    last_error();
  } else if (cmd == "fork") {
    fork_children();
  } else if (cmd == "fork-under-load") {
    fork_under_load();
  } else if (cmd == "exit-live") {
    exit_live();
  } else if (cmd == "exit-static-destructor") {
    exit_static_destructor();
  } else if (cmd == "exit-atexit") {
    exit_atexit();
  } else if (cmd == "exit-after-reset") {
    exit_after_reset(false);
  } else if (cmd == "exit-after-reset-destructor") {
    exit_after_reset(true);
  }
  return 0;
}
