// cpu_pairs: allocation and free pairs per second on the CUDA test doubles,
// where no GPU time is involved: what a pair costs is the host code of the
// allocator under test. scripts/cpu-bench.sh runs it twice in one go, for the
// doubles' own pool (--api pool) and for the shim (--api malloc, preloaded),
// and reports the shim's own cost per pair as the difference.
//
//   cpu_pairs --api malloc|pool [--threads 1,4,16] [--size BYTES] [--pairs N]
//
// --api malloc: cudaMalloc + cudaFree; --api pool: cudaMallocAsync +
// cudaFreeAsync on the legacy stream (the stream the shim uses by default).
// Every thread makes --pairs pairs after a warm-up; one line per thread count:
//   cpu_pairs: api=... threads=T pairs=N seconds=S ns_per_pair=X pairs_per_second=Y
// (ns_per_pair: the wall time of one thread's pair, all threads running).
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct options {
  bool pool = false;
  std::vector<int> threads{1, 4, 16};
  std::size_t size = 4096;
  unsigned long long pairs = 200000;
};

int usage(char const* why)
{
  std::fprintf(
    stderr, "cpu_pairs: %s\nusage: cpu_pairs --api malloc|pool [--threads 1,4,16] [--size BYTES] [--pairs N]\n", why);
  return 2;
}

bool parse_threads(char const* text, std::vector<int>& out)
{
  out.clear();
  std::string const s = text;
  std::size_t at = 0;
  while (at <= s.size()) {
    std::size_t const comma = s.find(',', at);
    std::string const item = s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    char* end = nullptr;
    long const n = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || n < 1 || n > 256) { return false; }
    out.push_back(static_cast<int>(n));
    if (comma == std::string::npos) { break; }
    at = comma + 1;
  }
  return !out.empty();
}

// One pair; false when a call fails (reported once).
bool pair(options const& o)
{
  void* p = nullptr;
  if (o.pool) {
    if (cudaMallocAsync(&p, o.size, cudaStreamLegacy) != cudaSuccess) { return false; }
    return cudaFreeAsync(p, cudaStreamLegacy) == cudaSuccess;
  }
  if (cudaMalloc(&p, o.size) != cudaSuccess) { return false; }
  return cudaFree(p) == cudaSuccess;
}

// Runs `threads` threads of o.pairs pairs each; the wall time of the timed part.
bool run(options const& o, int threads, double& seconds)
{
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      if (cudaSetDevice(0) != cudaSuccess) { failed = true; }
      for (int i = 0; i < 1000 && !failed; ++i) {  // warm-up: the pool holds a block, caches are filled
        if (!pair(o)) { failed = true; }
      }
      ready.fetch_add(1);
      while (!go.load()) {
        std::this_thread::yield();
      }
      for (unsigned long long i = 0; i < o.pairs && !failed.load(std::memory_order_relaxed); ++i) {
        if (!pair(o)) { failed = true; }
      }
    });
  }
  while (ready.load() != threads) {
    std::this_thread::yield();
  }
  auto const start = std::chrono::steady_clock::now();
  go = true;
  for (std::thread& w : workers) {
    w.join();
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return !failed;
}

}  // namespace

int main(int argc, char** argv)
{
  options o;
  bool have_api = false;
  for (int i = 1; i < argc; ++i) {
    std::string const a = argv[i];
    if (i + 1 >= argc) { return usage(("'" + a + "' needs a value").c_str()); }
    char const* v = argv[++i];
    if (a == "--api") {
      if (std::strcmp(v, "pool") != 0 && std::strcmp(v, "malloc") != 0) { return usage("--api takes malloc or pool"); }
      o.pool = std::strcmp(v, "pool") == 0;
      have_api = true;
    } else if (a == "--threads") {
      if (!parse_threads(v, o.threads)) { return usage("--threads takes thread counts 1..256, comma-separated"); }
    } else if (a == "--size" || a == "--pairs") {
      char* end = nullptr;
      unsigned long long const n = std::strtoull(v, &end, 10);
      if (*v == '\0' || *end != '\0' || n == 0) { return usage((a + " takes a positive number").c_str()); }
      if (a == "--size") {
        o.size = static_cast<std::size_t>(n);
      } else {
        o.pairs = n;
      }
    } else {
      return usage(("unknown option '" + a + "'").c_str());
    }
  }
  if (!have_api) { return usage("--api is required"); }
  for (int threads : o.threads) {
    double seconds = 0;
    if (!run(o, threads, seconds)) {
      std::fprintf(stderr, "cpu_pairs: a pair failed (%s)\n", cudaGetErrorName(cudaGetLastError()));
      return 1;
    }
    double const total = static_cast<double>(o.pairs) * threads;
    std::printf("cpu_pairs: api=%s threads=%d pairs=%llu seconds=%.4f ns_per_pair=%.1f pairs_per_second=%.0f\n",
                o.pool ? "pool" : "malloc", threads, o.pairs, seconds, seconds * 1e9 / static_cast<double>(o.pairs),
                total / seconds);
  }
  return 0;
}
