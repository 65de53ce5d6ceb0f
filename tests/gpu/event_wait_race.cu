// Does a program's cudaStreamWaitEvent still hold when another thread submits
// to the same stream between that wait and the program's next launch there?
// CUDA says the wait holds for "all future work submitted to the stream"; the
// shim's fences record events on the program's streams from whichever thread
// frees, so the answer decides whether those records are safe.
//
// Each producer thread, many times over: a kernel on its own non-blocking
// stream waits for a gate the thread opens in host memory, then writes its
// iteration number; an event is recorded after it; the target stream waits
// on that event; a check kernel on the target stream reads the number. The
// thread opens the gate only once the check has been submitted, and a while
// after (--gate-delay-us): a check that does not wait for the producer's
// kernel runs while that kernel is still held at its gate, and reads a lower
// number. So a lower number means the wait did not hold; --no-wait leaves the
// wait out, and must then find early checks (the probe can see one). Noise
// threads meanwhile submit to the target stream (and the producers' streams)
// as the shim does.
//
//   event_wait_race [--target legacy|shared|own] [--noise none|KINDS] [--rerecord] [--no-wait]
//                   [--expect-early-checks] [--producers N] [--noise-threads N] [--iterations N]
//                   [--gate-delay-us N] [--max-gate-timeouts-percent N]
// --target: where the checks run: the legacy stream, one non-blocking stream
// all producers share, or a non-blocking stream of each producer's own.
// --noise: what the noise threads submit to every stream in a tight loop,
// comma-separated (default record,wait,alloc): `record`, event records there
// (as a fence's); `wait`, waits there on an event of their own stream (as an
// in-order free's); `alloc`, a pool allocation there that is freed on their
// own stream (as the shim's cudaMalloc on the legacy stream and its fenced
// free on a stream of its own).
// --rerecord: right after the check's launch the producer records its event
// again, on an idle stream (as a program that recycles its events does; CUDA
// says a later record does not change a wait already made).
// --gate-delay-us (default 20): how long after submitting the check the
// gate opens. A gate not opened within 10 ms lets the kernel go on anyway
// (counted as gate_timeouts: those iterations could not show a lost wait).
// More than --max-gate-timeouts-percent (default 1) of them fail the run: it
// could not have seen a lost wait.
// --expect-early-checks (the control, with --no-wait): early checks are
// what the run must find.
// Prints one line, e.g.
//   event_wait_race: target=legacy noise=record,wait,alloc rerecord=no wait=yes producers=8 noise_threads=2
//   iterations=20000 checks=160000 early_checks=0 gate_timeouts=0 seconds=3.1
// and exits 1 if a check ran early (with --expect-early-checks: if none did)
// or too many gates timed out, 0 otherwise, 2 on a CUDA error or bad usage.
// "SKIP: no CUDA device" and exit 0 without a GPU.
#include "probe_common.cuh"

#include <cuda_runtime.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

// Any thread may fail: _Exit, not exit (other threads are inside CUDA calls).
#define CK(call)                                                                                      \
  do {                                                                                                \
    cudaError_t const ck_status = (call);                                                             \
    if (ck_status != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "event_wait_race: %s failed: %s\n", #call, cudaGetErrorString(ck_status)); \
      std::fflush(nullptr);                                                                           \
      std::_Exit(2);                                                                                  \
    }                                                                                                 \
  } while (0)

namespace {

constexpr unsigned long long gate_timeout_ns = 10'000'000;

// Waits until the host opens `gate` for this iteration (or 10 ms), then writes it.
__global__ void produce(unsigned long long* slot, unsigned long long const* gate, unsigned long long iteration,
                        unsigned long long* gate_timeouts)
{
  unsigned long long const give_up = device_clock_ns() + gate_timeout_ns;
  while (*reinterpret_cast<unsigned long long const volatile*>(gate) < iteration) {
    if (device_clock_ns() > give_up) {
      atomicAdd(gate_timeouts, 1ull);
      break;
    }
  }
  *reinterpret_cast<unsigned long long volatile*>(slot) = iteration;
  __threadfence();
}

__global__ void check(unsigned long long const* slot, unsigned long long iteration, unsigned long long* early)
{
  unsigned long long const seen = *reinterpret_cast<unsigned long long const volatile*>(slot);
  if (seen < iteration) { atomicAdd(early, 1ull); }
}

struct options {
  std::string target = "legacy";
  std::string noise = "record,wait,alloc";
  bool rerecord = false;
  bool wait = true;
  bool expect_early_checks = false;
  int producers = 8;
  int noise_threads = 2;
  int iterations = 20000;
  int gate_delay_us = 20;
  int max_gate_timeouts_percent = 1;
};

// A whole number from `low` to `high`, or nothing.
std::optional<int> number(char const* text, int low, int high)
{
  char* end = nullptr;
  errno = 0;
  long const n = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || n < low || n > high) { return std::nullopt; }
  return static_cast<int>(n);
}

int usage(char const* why)
{
  std::fprintf(stderr,
               "event_wait_race: %s\nusage: event_wait_race [--target legacy|shared|own] "
               "[--noise none|record,wait,alloc] [--rerecord] [--no-wait] [--expect-early-checks] [--producers N] "
               "[--noise-threads N] [--iterations N] [--gate-delay-us N] [--max-gate-timeouts-percent N]\n",
               why);
  return 2;
}

struct noise_kinds {
  bool records = false;
  bool waits = false;
  bool allocations = false;
};

// Submits to each of `streams` until `done` what `kinds` names (--noise).
void make_noise(std::vector<cudaStream_t> const& streams, noise_kinds kinds, cudaMemPool_t pool,
                std::atomic<bool> const& done)
{
  cudaStream_t own = nullptr;
  cudaEvent_t mark = nullptr;
  cudaEvent_t on_own = nullptr;
  cudaEvent_t allocated = nullptr;
  CK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&allocated, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&mark, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&on_own, cudaEventDisableTiming));
  while (!done.load(std::memory_order_relaxed)) {
    if (kinds.waits) { CK(cudaEventRecord(on_own, own)); }
    for (cudaStream_t s : streams) {
      if (kinds.records) {
        CK(cudaEventRecord(mark, s));
        CK(cudaStreamWaitEvent(own, mark, 0));
      }
      if (kinds.waits) { CK(cudaStreamWaitEvent(s, on_own, 0)); }
      if (kinds.allocations) {  // the free on its own stream is ordered after the allocation
        void* block = nullptr;
        CK(cudaMallocFromPoolAsync(&block, 4096, pool, s));
        CK(cudaEventRecord(allocated, s));
        CK(cudaStreamWaitEvent(own, allocated, 0));
        CK(cudaFreeAsync(block, own));
      }
    }
  }
  CK(cudaStreamSynchronize(own));
  CK(cudaStreamDestroy(own));
  CK(cudaEventDestroy(mark));
  CK(cudaEventDestroy(on_own));
  CK(cudaEventDestroy(allocated));
}

}  // namespace

int main(int argc, char** argv)
{
  options o;
  struct whole_number {
    int* field;
    int low;
    int high;
  };
  std::map<std::string, whole_number> const numbers{
    {"--producers", {&o.producers, 1, 256}},
    {"--noise-threads", {&o.noise_threads, 0, 256}},
    {"--iterations", {&o.iterations, 1, 10'000'000}},
    {"--gate-delay-us", {&o.gate_delay_us, 0, 100'000}},
    {"--max-gate-timeouts-percent", {&o.max_gate_timeouts_percent, 0, 100}},
  };
  for (int i = 1; i < argc; ++i) {
    std::string const arg = argv[i];
    auto value = [&]() -> char const* { return i + 1 < argc ? argv[++i] : nullptr; };
    char const* v = nullptr;
    if (arg == "--target" && (v = value())) {
      o.target = v;
    } else if (arg == "--noise" && (v = value())) {
      o.noise = v;
    } else if (arg == "--rerecord") {
      o.rerecord = true;
    } else if (arg == "--no-wait") {
      o.wait = false;
    } else if (arg == "--expect-early-checks") {
      o.expect_early_checks = true;
    } else if (numbers.count(arg) != 0) {
      whole_number const& n = numbers.at(arg);
      v = value();
      std::optional<int> const parsed = v != nullptr ? number(v, n.low, n.high) : std::nullopt;
      if (!parsed) {
        std::string const range = "a whole number from " + std::to_string(n.low) + " to " + std::to_string(n.high);
        return usage((v != nullptr ? arg + ": '" + v + "' is not " + range : arg + " needs " + range).c_str());
      }
      *n.field = *parsed;
    } else {
      return usage(("unknown or incomplete option " + arg).c_str());
    }
  }
  if (o.target != "legacy" && o.target != "shared" && o.target != "own") {
    return usage("--target: legacy, shared or own");
  }
  noise_kinds kinds;
  if (o.noise != "none") {
    std::size_t from = 0;
    for (;;) {
      std::size_t const comma = o.noise.find(',', from);
      std::string const kind = o.noise.substr(from, comma == std::string::npos ? std::string::npos : comma - from);
      if (kind == "record") {
        kinds.records = true;
      } else if (kind == "wait") {
        kinds.waits = true;
      } else if (kind == "alloc") {
        kinds.allocations = true;
      } else {
        return usage(
          ("--noise: unknown kind '" + kind + "' (none, or record, wait and alloc, comma-separated)").c_str());
      }
      if (comma == std::string::npos) { break; }
      from = comma + 1;
    }
  }

  int devices = 0;
  if (cudaError_t const counted = cudaGetDeviceCount(&devices); counted != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n", cudaGetErrorName(counted), devices);
    return 0;
  }
  auto const count = static_cast<std::size_t>(o.producers);
  unsigned long long* slots = nullptr;
  unsigned long long* counters = nullptr;  // early checks, gate timeouts
  unsigned long long* gates = nullptr;     // host memory the kernels read; one per producer
  CK(cudaMalloc(&slots, sizeof(unsigned long long) * count));
  CK(cudaMalloc(&counters, 2 * sizeof(unsigned long long)));
  CK(cudaMemset(slots, 0, sizeof(unsigned long long) * count));
  CK(cudaMemset(counters, 0, 2 * sizeof(unsigned long long)));
  CK(cudaHostAlloc(&gates, sizeof(unsigned long long) * count, cudaHostAllocMapped | cudaHostAllocPortable));
  for (std::size_t p = 0; p < count; ++p) {
    gates[p] = 0;
  }
  unsigned long long* device_gates = nullptr;
  CK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_gates), gates, 0));
  unsigned long long* const early = counters;
  unsigned long long* const gate_timeouts = counters + 1;
  cudaStream_t shared = nullptr;
  CK(cudaStreamCreateWithFlags(&shared, cudaStreamNonBlocking));
  std::vector<cudaStream_t> own(count);
  std::vector<cudaStream_t> targets(count);
  std::vector<cudaStream_t> idle(count);  // --rerecord's: never given work
  for (int p = 0; p < o.producers; ++p) {
    CK(cudaStreamCreateWithFlags(&own[p], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&idle[p], cudaStreamNonBlocking));
    if (o.target == "own") {
      CK(cudaStreamCreateWithFlags(&targets[p], cudaStreamNonBlocking));
    } else {
      targets[p] = o.target == "legacy" ? cudaStreamLegacy : shared;
    }
  }
  CK(cudaDeviceSynchronize());

  // The noise goes to every stream the producers use.
  std::vector<cudaStream_t> noisy = own;
  if (o.target == "own") {
    noisy.insert(noisy.end(), targets.begin(), targets.end());
  } else {
    noisy.push_back(targets[0]);
  }
  std::atomic<bool> done{false};
  // The pool set up as the shim's: a block comes back only once its free has
  // completed, never through a dependency added to the allocating stream.
  cudaMemPool_t pool = nullptr;
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  CK(cudaMemPoolCreate(&pool, &props));
  int off = 0;
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseFollowEventDependencies, &off));
  CK(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &off));
  std::vector<std::thread> noise;
  if (o.noise != "none") {
    for (int n = 0; n < o.noise_threads; ++n) {
      noise.emplace_back([&] { make_noise(noisy, kinds, pool, done); });
    }
  }
  auto const start = std::chrono::steady_clock::now();
  std::vector<std::thread> producers;
  for (int p = 0; p < o.producers; ++p) {
    producers.emplace_back([&, p] {
      cudaEvent_t produced = nullptr;
      CK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
      auto const delay = std::chrono::microseconds(o.gate_delay_us);
      for (int i = 1; i <= o.iterations; ++i) {
        auto const iteration = static_cast<unsigned long long>(i);
        produce<<<1, 1, 0, own[p]>>>(slots + p, device_gates + p, iteration, gate_timeouts);
        CK(cudaGetLastError());
        CK(cudaEventRecord(produced, own[p]));
        if (o.wait) { CK(cudaStreamWaitEvent(targets[p], produced, 0)); }
        check<<<1, 1, 0, targets[p]>>>(slots + p, iteration, early);
        CK(cudaGetLastError());
        if (o.rerecord) { CK(cudaEventRecord(produced, idle[p])); }
        // The producer's kernel is held until now: a check not ordered after
        // it has had the delay to run first.
        auto const opened_at = std::chrono::steady_clock::now() + delay;
        while (std::chrono::steady_clock::now() < opened_at) {}
        __atomic_store_n(gates + p, iteration, __ATOMIC_RELEASE);
        if (i % 512 == 0) { CK(cudaStreamSynchronize(targets[p])); }  // keeps the queues short
      }
      CK(cudaStreamSynchronize(targets[p]));
      CK(cudaEventDestroy(produced));
    });
  }
  for (std::thread& t : producers) {
    t.join();
  }
  done = true;
  for (std::thread& t : noise) {
    t.join();
  }
  CK(cudaDeviceSynchronize());
  CK(cudaMemPoolDestroy(pool));
  double const seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  unsigned long long results[2] = {0, 0};
  CK(cudaMemcpy(results, counters, sizeof results, cudaMemcpyDeviceToHost));
  unsigned long long const early_checks = results[0];
  unsigned long long const timeouts = results[1];
  unsigned long long const checks =
    static_cast<unsigned long long>(o.producers) * static_cast<unsigned long long>(o.iterations);
  CK(cudaFreeHost(gates));
  std::printf("event_wait_race: target=%s noise=%s rerecord=%s wait=%s producers=%d noise_threads=%d iterations=%d "
              "checks=%llu early_checks=%llu gate_timeouts=%llu seconds=%.1f\n",
              o.target.c_str(), o.noise.c_str(), o.rerecord ? "yes" : "no", o.wait ? "yes" : "no", o.producers,
              o.noise_threads, o.iterations, checks, early_checks, timeouts, seconds);
  bool const gates_held = timeouts * 100 <= checks * static_cast<unsigned long long>(o.max_gate_timeouts_percent);
  if (!gates_held) {
    std::printf("event_wait_race: too many gate timeouts: %llu of %llu checks, over %d%%; those checks could not see "
                "a lost wait\n",
                timeouts, checks, o.max_gate_timeouts_percent);
  }
  if (o.expect_early_checks && early_checks == 0) {
    std::printf("event_wait_race: no early check without the wait: the probe cannot see a lost wait\n");
  }
  bool const as_expected = (early_checks != 0) == o.expect_early_checks;
  return as_expected && gates_held ? 0 : 1;
}
