// Does a program's cudaStreamWaitEvent still hold when another thread submits
// to the same stream between that wait and the program's next launch there?
// CUDA says the wait holds for "all future work submitted to the stream"; the
// shim's fences record events on the program's streams from whichever thread
// frees, so the answer decides whether those records are safe.
//
// Each producer thread, many times over: a kernel on its own non-blocking
// stream spins a few microseconds and then writes its iteration number; an
// event is recorded after it; the target stream waits on that event; a check
// kernel on the target stream reads the number. A number lower than the
// iteration means the check ran before the producer's kernel had finished:
// the wait did not hold. Noise threads meanwhile submit to the target stream
// (and the producers' streams) as the shim's fences do.
//
//   event_wait_race [--target legacy|shared|own] [--noise none|KINDS] [--rerecord]
//                   [--producers N] [--noise-threads N] [--iterations N] [--spin-ns N]
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
// Prints one line, e.g.
//   event_wait_race: target=legacy noise=record,wait,alloc rerecord=no producers=8 noise_threads=2 iterations=20000
//   checks=160000 early_checks=0 seconds=3.1
// and exits 1 if a check ran early, 0 if none did, 2 on a CUDA error or bad
// usage. "SKIP: no CUDA device" and exit 0 without a GPU.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#define CK(call)                                                                                      \
  do {                                                                                                \
    cudaError_t const ck_status = (call);                                                             \
    if (ck_status != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "event_wait_race: %s failed: %s\n", #call, cudaGetErrorString(ck_status)); \
      std::exit(2);                                                                                   \
    }                                                                                                 \
  } while (0)

namespace {

__device__ unsigned long long clock_ns()
{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void produce(unsigned long long* slot, unsigned long long iteration, unsigned spin_ns)
{
  unsigned long long const until = clock_ns() + spin_ns;
  while (clock_ns() < until) {}
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
  int producers = 8;
  int noise_threads = 2;
  int iterations = 20000;
  unsigned spin_ns = 4000;
};

int usage(char const* why)
{
  std::fprintf(stderr,
               "event_wait_race: %s\nusage: event_wait_race [--target legacy|shared|own] "
               "[--noise none|record,wait,alloc] [--rerecord] [--producers N] [--noise-threads N] [--iterations N] "
               "[--spin-ns N]\n",
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
  CK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
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
      if (kinds.allocations) {
        void* block = nullptr;
        CK(cudaMallocFromPoolAsync(&block, 4096, pool, s));
        CK(cudaFreeAsync(block, own));
      }
    }
  }
  CK(cudaStreamSynchronize(own));
  CK(cudaStreamDestroy(own));
  CK(cudaEventDestroy(mark));
  CK(cudaEventDestroy(on_own));
}

}  // namespace

int main(int argc, char** argv)
{
  options o;
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
    } else if (arg == "--producers" && (v = value())) {
      o.producers = std::atoi(v);
    } else if (arg == "--noise-threads" && (v = value())) {
      o.noise_threads = std::atoi(v);
    } else if (arg == "--iterations" && (v = value())) {
      o.iterations = std::atoi(v);
    } else if (arg == "--spin-ns" && (v = value())) {
      o.spin_ns = static_cast<unsigned>(std::atoi(v));
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
  if (o.producers < 1 || o.noise_threads < 0 || o.iterations < 1) { return usage("counts must be positive"); }

  int devices = 0;
  if (cudaError_t const counted = cudaGetDeviceCount(&devices); counted != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n", cudaGetErrorName(counted), devices);
    return 0;
  }
  unsigned long long* slots = nullptr;
  unsigned long long* early = nullptr;
  CK(cudaMalloc(&slots, sizeof(unsigned long long) * static_cast<std::size_t>(o.producers)));
  CK(cudaMalloc(&early, sizeof(unsigned long long)));
  CK(cudaMemset(slots, 0, sizeof(unsigned long long) * static_cast<std::size_t>(o.producers)));
  CK(cudaMemset(early, 0, sizeof(unsigned long long)));
  cudaStream_t shared = nullptr;
  CK(cudaStreamCreateWithFlags(&shared, cudaStreamNonBlocking));
  std::vector<cudaStream_t> own(static_cast<std::size_t>(o.producers));
  std::vector<cudaStream_t> targets(static_cast<std::size_t>(o.producers));
  std::vector<cudaStream_t> idle(static_cast<std::size_t>(o.producers));  // --rerecord's: never given work
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
      for (int i = 1; i <= o.iterations; ++i) {
        produce<<<1, 1, 0, own[p]>>>(slots + p, static_cast<unsigned long long>(i), o.spin_ns);
        CK(cudaGetLastError());
        CK(cudaEventRecord(produced, own[p]));
        CK(cudaStreamWaitEvent(targets[p], produced, 0));
        check<<<1, 1, 0, targets[p]>>>(slots + p, static_cast<unsigned long long>(i), early);
        CK(cudaGetLastError());
        if (o.rerecord) { CK(cudaEventRecord(produced, idle[p])); }
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
  unsigned long long early_checks = 0;
  CK(cudaMemcpy(&early_checks, early, sizeof early_checks, cudaMemcpyDeviceToHost));
  std::printf("event_wait_race: target=%s noise=%s rerecord=%s producers=%d noise_threads=%d iterations=%d "
              "checks=%llu early_checks=%llu seconds=%.1f\n",
              o.target.c_str(), o.noise.c_str(), o.rerecord ? "yes" : "no", o.producers, o.noise_threads, o.iterations,
              static_cast<unsigned long long>(o.producers) * static_cast<unsigned long long>(o.iterations),
              early_checks, seconds);
  return early_checks == 0 ? 0 : 1;
}
