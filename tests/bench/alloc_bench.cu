// alloc_bench: what one device allocation costs, side by side, for the
// allocators the shim is compared with. One executable, one subcommand per
// workload; scripts/benchmarks.sh runs the same binary natively and under the
// shim with different environments (the shim reads its settings once per
// process, so every configuration is its own process).
//
//   alloc_bench pairs   --api A --size 256,4K,64K,1M,16M,256M --iterations N [--batch 100]
//   alloc_bench churn   --api A --steps N --live N
//   alloc_bench threads --api A --threads 1,4,16 --seconds S [--size 4K]
//   alloc_bench growth  --api A --size 64M --total 8G [--pool-prime 0]
//   alloc_bench pool-facts
//   alloc_bench load-time --preload LIB [--runs N] [--set NAME=VALUE]... -- PROGRAM [ARGS...]
//   (every subcommand also takes --label TEXT, copied into its JSON)
//
// --api: runtime       cudaMalloc / cudaFree (natively: CUDA's allocator; under
//                      the shim: the runtime path, or with the static runtime
//                      of alloc_bench_static the driver path cuMemAlloc_v2)
//        driver        cuMemAlloc_v2 / cuMemFree_v2 called directly
//        pool-runtime  cudaMallocFromPoolAsync / cudaFreeAsync on a pool of its
//                      own (cudaMemPoolCreate, release threshold at the maximum,
//                      primed with --pool-prime bytes, default 1 GiB, like the
//                      shim's ASYNCSHIM_INITIAL_POOL_SIZE=1GiB in the script),
//                      freed on the allocation's stream, as RMM's cuda_async_memory_resource
//                      does: the raw pool, the baseline of the ratios
//        pool-driver   the same pool through cuMemAllocFromPoolAsync / cuMemFreeAsync
//        pitched       cudaMallocPitch of 4 rows of size/4 bytes / cudaFree
//                      (a size that is a multiple of 2 KiB is then pitch x 4
//                      bytes on GPUs whose pitch is a multiple of 512)
//        pinned        cudaMallocHost / cudaFreeHost (pinned host memory;
//                      under the shim with ASYNCSHIM_HOST_POOL=1 its host pool)
//        pool-host     cudaMallocFromPoolAsync / cudaFreeAsync on a pool of its
//                      own in pinned host memory, every device given access,
//                      primed as pool-runtime: the raw pool of the pinned pairs
//
// growth: what a pool that starts empty costs. In one process: the first
// allocation (for the shim: its pool is made then), then blocks of --size
// until --total bytes are live (the pool grows on each), all freed and
// allocated again (no growth: the steady state), then the pool trimmed to
// nothing (cudaMemPoolTrimTo; the shim's pool is found through the pointer's
// CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) and grown again. Every allocation is
// followed by a device synchronization, so each time is the allocation's own
// (native cudaMalloc synchronizes anyway).
//
// pool-facts: the pool behaviour the shim's design relies on, on this driver
// (a pool of its own, never the shim's): whether a free still pending on its
// stream counts as used and can be trimmed, what a trim needs, the pool's
// growth granularity, and what the calls the shim makes to watch its pools
// cost.
//
// Output: per measurement one JSON object on one line (starts with '{') and
// one line for people (starts with "alloc_bench:"); nothing else on standard
// output. Without a CUDA device: "SKIP: no CUDA device ..." and exit 0 (the
// load-time subcommand needs no device). Exit 2 on a CUDA error or bad usage.
//
// Timing: std::chrono::steady_clock. A warm-up first; then the timed loop is cut
// into batches (--batch pairs or steps, default 100) and each batch's time
// divided by its size gives one sample; median, p10 and p90 are over those
// samples. Nothing in the timed loop synchronizes the device except what the
// API itself does (native cudaFree does; pool frees and the shim's do not):
// the work they queue is waited for once, after the loop, by one
// cudaDeviceSynchronize, whose duration is reported (final_sync_us) and
// included in wall_ns_per_pair / wall_ns_per_step, so that a backlog left on
// the device cannot hide.
//
// libcuda is opened with dlopen rather than linked: the program then starts
// (and says SKIP) on machines without a driver, and under the shim the lookup
// dlsym(libcuda, "cuMemAlloc_v2") returns the shim's entry point, exactly as
// for a program linked with -lcuda.
#include <cuda.h>  // driver types only
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <link.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

#ifndef ALLOC_BENCH_RUNTIME_LINK
#define ALLOC_BENCH_RUNTIME_LINK "shared"
#endif

namespace {

using clock_type = std::chrono::steady_clock;

double ns_since(clock_type::time_point start)
{
  return std::chrono::duration<double, std::nano>(clock_type::now() - start).count();
}

[[noreturn]] void die(std::string const& what)
{
  std::printf("alloc_bench: error: %s\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(2);  // other threads may be inside CUDA: no destructors, no atexit handlers
}

void check(cudaError_t e, char const* what)
{
  if (e != cudaSuccess) { die(std::string{what} + ": " + cudaGetErrorName(e)); }
}

void check(CUresult r, char const* what)
{
  if (r != CUDA_SUCCESS) { die(std::string{what} + ": CUresult " + std::to_string(static_cast<int>(r))); }
}

// ---- the allocators ----------------------------------------------------------

struct driver_functions {
  CUresult (*mem_alloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*alloc_from_pool)(CUdeviceptr*, std::size_t, CUmemoryPool, CUstream) = nullptr;
  CUresult (*free_async)(CUdeviceptr, CUstream) = nullptr;
  CUresult (*mem_get_info)(std::size_t*, std::size_t*) = nullptr;
  CUresult (*pool_trim_to)(CUmemoryPool, std::size_t) = nullptr;
  CUresult (*pool_get_attribute)(CUmemoryPool, CUmemPool_attribute, void*) = nullptr;
  CUresult (*pointer_get_attribute)(void*, CUpointer_attribute, CUdeviceptr) = nullptr;
  CUresult (*stream_query)(CUstream) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
};

template <typename F>
void bind(void* library, char const* name, F& function)
{
  void* address = dlsym(library, name);
  if (address == nullptr) { die(std::string{"dlsym(libcuda.so.1, "} + name + ") failed"); }
  function = reinterpret_cast<F>(address);
}

driver_functions load_driver()
{
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (library == nullptr) { die("dlopen(libcuda.so.1) failed"); }
  driver_functions d;
  bind(library, "cuMemAlloc_v2", d.mem_alloc);
  bind(library, "cuMemFree_v2", d.mem_free);
  bind(library, "cuMemAllocFromPoolAsync", d.alloc_from_pool);
  bind(library, "cuMemFreeAsync", d.free_async);
  bind(library, "cuMemGetInfo_v2", d.mem_get_info);
  bind(library, "cuMemPoolTrimTo", d.pool_trim_to);
  bind(library, "cuMemPoolGetAttribute", d.pool_get_attribute);
  bind(library, "cuPointerGetAttribute", d.pointer_get_attribute);
  bind(library, "cuStreamQuery", d.stream_query);
  bind(library, "cuCtxGetCurrent", d.ctx_get_current);
  return d;
}

enum class api { runtime, driver, pool_runtime, pool_driver, pitched, pinned, pool_host };

char const* api_name(api a)
{
  switch (a) {
    case api::runtime: return "runtime";
    case api::driver: return "driver";
    case api::pool_runtime: return "pool-runtime";
    case api::pool_driver: return "pool-driver";
    case api::pitched: return "pitched";
    case api::pinned: return "pinned";
    case api::pool_host: return "pool-host";
  }
  return "?";
}

api parse_api(std::string const& text)
{
  for (api a :
       {api::runtime, api::driver, api::pool_runtime, api::pool_driver, api::pitched, api::pinned, api::pool_host}) {
    if (text == api_name(a)) { return a; }
  }
  die("--api must be runtime, driver, pool-runtime, pool-driver, pitched, pinned or pool-host, not '" + text + "'");
}

bool is_pool(api a) { return a == api::pool_runtime || a == api::pool_driver || a == api::pool_host; }

// One allocate/release interface over the four APIs. The switch costs a few
// nanoseconds and is the same for every API, so it does not bias the ratios.
struct allocator {
  api kind = api::runtime;
  cudaMemPool_t pool = nullptr;
  driver_functions driver;

  void* allocate(std::size_t bytes, cudaStream_t stream) const
  {
    void* p = nullptr;
    CUdeviceptr d = 0;
    switch (kind) {
      case api::runtime: check(cudaMalloc(&p, bytes), "cudaMalloc"); return p;
      case api::pitched: {
        std::size_t pitch = 0;
        check(cudaMallocPitch(&p, &pitch, bytes / 4, 4), "cudaMallocPitch");
        return p;
      }
      case api::pinned: check(cudaMallocHost(&p, bytes), "cudaMallocHost"); return p;
      case api::driver: check(driver.mem_alloc(&d, bytes), "cuMemAlloc_v2"); break;
      case api::pool_host:
      case api::pool_runtime:
        check(cudaMallocFromPoolAsync(&p, bytes, pool, stream), "cudaMallocFromPoolAsync");
        return p;
      case api::pool_driver:
        check(
          driver.alloc_from_pool(&d, bytes, reinterpret_cast<CUmemoryPool>(pool), reinterpret_cast<CUstream>(stream)),
          "cuMemAllocFromPoolAsync");
        break;
    }
    return reinterpret_cast<void*>(d);
  }

  void release(void* p, cudaStream_t stream) const
  {
    auto const d = reinterpret_cast<CUdeviceptr>(p);
    switch (kind) {
      case api::runtime:
      case api::pitched: check(cudaFree(p), "cudaFree"); return;
      case api::driver: check(driver.mem_free(d), "cuMemFree_v2"); return;
      case api::pinned: check(cudaFreeHost(p), "cudaFreeHost"); return;
      case api::pool_host:
      case api::pool_runtime: check(cudaFreeAsync(p, stream), "cudaFreeAsync"); return;
      case api::pool_driver: check(driver.free_async(d, reinterpret_cast<CUstream>(stream)), "cuMemFreeAsync"); return;
    }
  }
};

allocator make_allocator(api kind, std::size_t prime_bytes)
{
  allocator a;
  a.kind = kind;
  if (kind == api::driver || kind == api::pool_driver) { a.driver = load_driver(); }
  if (!is_pool(kind)) { return a; }
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = kind == api::pool_host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  props.location.id = kind == api::pool_host ? 0 : device;
  check(cudaMemPoolCreate(&a.pool, &props), "cudaMemPoolCreate");
  if (kind == api::pool_host) {  // as the shim's host pool: every device reaches it
    int devices = 0;
    check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    for (int d = 0; d < devices; ++d) {
      cudaMemAccessDesc access{};
      access.location.type = cudaMemLocationTypeDevice;
      access.location.id = d;
      access.flags = cudaMemAccessFlagsProtReadWrite;
      check(cudaMemPoolSetAccess(a.pool, &access, 1), "cudaMemPoolSetAccess");
    }
  }
  // Keep everything the pool ever reserved, as the shim's pools do (their
  // threshold is the device's total memory): no release at synchronizations.
  std::uint64_t threshold = UINT64_MAX;
  check(cudaMemPoolSetAttribute(a.pool, cudaMemPoolAttrReleaseThreshold, &threshold), "cudaMemPoolSetAttribute");
  if (prime_bytes > 0) {
    void* p = nullptr;
    check(cudaMallocFromPoolAsync(&p, prime_bytes, a.pool, cudaStreamLegacy), "cudaMallocFromPoolAsync (prime)");
    check(cudaFreeAsync(p, cudaStreamLegacy), "cudaFreeAsync (prime)");
    check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (prime)");
  }
  return a;
}

// ---- what is measured, for the JSON ------------------------------------------

bool shim_loaded()
{
  auto const visit = [](dl_phdr_info* info, std::size_t, void*) -> int {
    return info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libasyncshim") != nullptr ? 1 : 0;
  };
  return dl_iterate_phdr(visit, nullptr) != 0;
}

std::string lower(std::string s)
{
  for (char& c : s) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return s;
}

// Whether a variable is set to something other than empty, 0 or off.
bool set_on(char const* name)
{
  char const* v = std::getenv(name);
  if (v == nullptr || v[0] == '\0') { return false; }
  std::string const text = lower(v);
  return text != "0" && text != "off" && text != "false" && text != "no";
}

// A size variable set to zero ("0", "0B", "0%", "0MiB", ...).
bool set_to_zero(char const* name)
{
  char const* v = std::getenv(name);
  if (v == nullptr || v[0] < '0' || v[0] > '9') { return false; }
  return std::strtod(v, nullptr) == 0.0;
}

// "native", "pool" or "shim:<ordering>" (the shim's default ordering is
// device), with "+per-thread" when the shim allocates on per-thread streams,
// "+no-reuse" when its reuse cache is off (ASYNCSHIM_REUSE_CACHE=0), and the
// observing settings that cost time on the hot path: "+leak-report"
// (ASYNCSHIM_LEAK_REPORT), "+stacks" (ASYNCSHIM_LEAK_STACK_DEPTH above 0 with
// the leak report on) and "+event-log" (ASYNCSHIM_EVENT_LOG).
std::string allocator_name(api kind)
{
  if (is_pool(kind)) { return "pool"; }
  if (!shim_loaded()) { return "native"; }
  char const* ordering = std::getenv("ASYNCSHIM_ORDERING");
  char const* stream = std::getenv("ASYNCSHIM_STREAM");
  bool const per_thread = stream != nullptr && lower(stream).find("per") == 0;
  bool const leak_report = set_on("ASYNCSHIM_LEAK_REPORT");
  char const* event_log = std::getenv("ASYNCSHIM_EVENT_LOG");
  return std::string{"shim:"} + (ordering != nullptr && ordering[0] != '\0' ? lower(ordering) : "device") +
         (per_thread ? "+per-thread" : "") + (set_to_zero("ASYNCSHIM_REUSE_CACHE") ? "+no-reuse" : "") +
         (leak_report ? "+leak-report" : "") + (leak_report && set_on("ASYNCSHIM_LEAK_STACK_DEPTH") ? "+stacks" : "") +
         (event_log != nullptr && event_log[0] != '\0' ? "+event-log" : "");
}

// Which way the allocation reaches the allocator: "runtime" (exported
// cudaMalloc of the shared runtime), "static-runtime" (cudaMalloc of a
// statically linked runtime, i.e. cuMemAlloc_v2 through cuGetProcAddress) or
// "driver" (cuMemAlloc_v2 called by the program).
std::string path_name(api kind)
{
  if (kind == api::driver || kind == api::pool_driver) { return "driver"; }
  if (kind == api::pitched) { return "pitched"; }
  if (kind == api::pinned || kind == api::pool_host) { return "pinned"; }
  return std::strcmp(ALLOC_BENCH_RUNTIME_LINK, "static") == 0 ? "static-runtime" : "runtime";
}

std::string json_escape(std::string const& s)
{
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
      out += buffer;
    } else {
      out += c;
    }
  }
  return out;
}

class json_line {
 public:
  json_line& add(char const* key, std::string const& value)
  {
    field(key) += "\"" + json_escape(value) + "\"";
    return *this;
  }
  json_line& add(char const* key, char const* value) { return add(key, std::string{value}); }
  json_line& add(char const* key, double value)
  {
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.6g", value);
    field(key) += buffer;
    return *this;
  }
  json_line& add(char const* key, std::int64_t value)
  {
    field(key) += std::to_string(value);
    return *this;
  }
  json_line& add(char const* key, bool value)
  {
    field(key) += value ? "true" : "false";
    return *this;
  }
  void print() const { std::printf("{%s}\n", text_.c_str()); }

 private:
  std::string& field(char const* key)
  {
    if (!text_.empty()) { text_ += ", "; }
    text_ += "\"" + json_escape(key) + "\": ";
    return text_;
  }
  std::string text_;
};

struct options {
  std::string command;
  api kind = api::pool_runtime;
  bool api_given = false;
  std::vector<std::size_t> sizes{256};
  std::int64_t iterations = 20000;
  std::int64_t batch = 100;
  std::int64_t steps = 20000;
  std::int64_t live = 64;
  std::int64_t idle_streams = 0;  // pairs: non-blocking streams made first and left without work
  std::vector<std::int64_t> threads{1};
  double seconds = 1.0;
  std::size_t pool_prime = std::size_t{1} << 30;
  std::size_t total = std::size_t{8} << 30;  // growth
  std::string label;
  // load-time
  std::string preload;
  std::int64_t runs = 100;
  std::vector<std::string> sets;
  std::vector<std::string> program;
};

json_line record(options const& o, char const* bench)
{
  json_line j;
  j.add("bench", bench);
  if (o.command != "load-time") {
    j.add("api", api_name(o.kind))
      .add("allocator", allocator_name(o.kind))
      .add("path", path_name(o.kind))
      .add("runtime_link", ALLOC_BENCH_RUNTIME_LINK)
      .add("shim", shim_loaded());
  }
  if (!o.label.empty()) { j.add("label", o.label); }
  return j;
}

struct summary {
  double median = 0, p10 = 0, p90 = 0, mean = 0;
};

summary summarize(std::vector<double> samples)
{
  summary s;
  if (samples.empty()) { return s; }
  std::sort(samples.begin(), samples.end());
  auto const at = [&](double q) {
    return samples[static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5)];
  };
  s.median = at(0.5);
  s.p10 = at(0.1);
  s.p90 = at(0.9);
  double total = 0;
  for (double v : samples) {
    total += v;
  }
  s.mean = total / static_cast<double>(samples.size());
  return s;
}

// The four figures of a timed loop's samples, as every record names them.
json_line& add_summary(json_line& j, summary const& s)
{
  return j.add("median_ns", s.median).add("p10_ns", s.p10).add("p90_ns", s.p90).add("mean_ns", s.mean);
}

std::string size_text(std::size_t bytes)
{
  char const* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024 && u < 3) {
    v /= 1024;
    ++u;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, v == static_cast<double>(static_cast<std::int64_t>(v)) ? "%.0f %s" : "%.1f %s",
                v, units[u]);
  return buffer;
}

// ---- pairs: one allocation and its free, back to back ------------------------

void run_pairs(options const& o)
{
  allocator const a = make_allocator(o.kind, o.pool_prime);
  cudaStream_t const stream = cudaStreamLegacy;  // the stream the shim allocates on by default
  // --idle-streams: what a program's idle non-blocking streams cost a pair
  // (under the shim's device ordering, a query and a wait each).
  std::vector<cudaStream_t> idle(static_cast<std::size_t>(o.idle_streams));
  for (cudaStream_t& s : idle) {
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  std::int64_t const batches = std::max<std::int64_t>(1, (o.iterations + o.batch - 1) / o.batch);
  std::int64_t const pairs = batches * o.batch;
  for (std::size_t size : o.sizes) {
    // Warm-up: first-touch costs (the pool's first block of this size, the
    // shim's first call for the size class) stay out of the samples.
    std::int64_t const warm = std::max<std::int64_t>(o.batch, std::min<std::int64_t>(pairs / 10, 2000));
    for (std::int64_t i = 0; i < warm; ++i) {
      a.release(a.allocate(size, stream), stream);
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

    std::vector<double> per_pair;
    per_pair.reserve(static_cast<std::size_t>(batches));
    auto const start = clock_type::now();
    for (std::int64_t b = 0; b < batches; ++b) {
      auto const batch_start = clock_type::now();
      for (std::int64_t i = 0; i < o.batch; ++i) {
        a.release(a.allocate(size, stream), stream);
      }
      per_pair.push_back(ns_since(batch_start) / static_cast<double>(o.batch));
    }
    double const loop_ns = ns_since(start);
    auto const sync_start = clock_type::now();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // once, after the loop (see the top)
    double const sync_ns = ns_since(sync_start);

    summary const s = summarize(per_pair);
    double const wall = (loop_ns + sync_ns) / static_cast<double>(pairs);
    json_line j = record(o, "pairs");
    j.add("size", static_cast<std::int64_t>(size))
      .add("pairs", pairs)
      .add("batch", o.batch)
      .add("idle_streams", o.idle_streams);
    add_summary(j, s).add("final_sync_us", sync_ns / 1e3).add("wall_ns_per_pair", wall).print();
    std::printf("alloc_bench: pairs %s/%s %s: median %.3f us per pair (p10 %.3f, p90 %.3f), wall %.3f us incl. a "
                "final sync of %.1f us, %lld pairs\n",
                allocator_name(o.kind).c_str(), path_name(o.kind).c_str(), size_text(size).c_str(), s.median / 1e3,
                s.p10 / 1e3, s.p90 / 1e3, wall / 1e3, sync_ns / 1e3, static_cast<long long>(pairs));
    std::fflush(stdout);
  }
  for (cudaStream_t s : idle) {
    check(cudaStreamDestroy(s), "cudaStreamDestroy");
  }
}

// ---- churn: a live set, one free + one allocation + one kernel per step -------

// Small on purpose: the step is about the allocator, the kernel only makes the
// block used on the device (and the previous frees ordered behind real work).
__global__ void touch(unsigned* words, std::size_t count, unsigned value)
{
  for (std::size_t i = threadIdx.x; i < count; i += blockDim.x) {
    words[i] = value + static_cast<unsigned>(i);
  }
}

void run_churn(options const& o)
{
  allocator const a = make_allocator(o.kind, o.pool_prime);
  cudaStream_t side = nullptr;
  check(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  // Steps alternate between the legacy stream and a non-blocking one, so the
  // shim's device ordering has a non-blocking stream to fence, as in programs
  // with side streams. A raw-pool program knows its streams: it allocates on
  // the stream that uses the block and frees it there.
  cudaStream_t const streams[2] = {cudaStreamLegacy, side};

  // The same sequence of sizes (log-uniform, 256 B .. 1 MiB) and victims for every configuration.
  std::mt19937_64 random{12345};
  std::uniform_real_distribution<double> log_size{8.0, 20.0};
  std::uniform_int_distribution<std::int64_t> victim{0, o.live - 1};
  auto const next_size = [&] { return static_cast<std::size_t>(std::exp2(log_size(random))) & ~std::size_t{3}; };

  struct block {
    void* p = nullptr;
    std::size_t bytes = 0;
    cudaStream_t stream = nullptr;
  };
  std::vector<block> live(static_cast<std::size_t>(o.live));
  std::int64_t step_index = 0;
  auto const step = [&](block& b) {
    cudaStream_t const s = streams[step_index % 2];
    b.p = a.allocate(b.bytes, s);
    b.stream = s;
    std::size_t const words = std::min<std::size_t>(b.bytes / sizeof(unsigned), 1024);
    touch<<<1, 128, 0, s>>>(static_cast<unsigned*>(b.p), words, static_cast<unsigned>(step_index));
    check(cudaGetLastError(), "touch<<<>>>");
    ++step_index;
  };
  for (block& b : live) {
    b.bytes = next_size();
    step(b);
  }
  auto const churn_step = [&] {
    block& b = live[static_cast<std::size_t>(victim(random))];
    a.release(b.p, b.stream);
    b.bytes = next_size();
    step(b);
  };
  std::int64_t const warm = std::max<std::int64_t>(o.batch, std::min<std::int64_t>(o.steps / 10, 1000));
  for (std::int64_t i = 0; i < warm; ++i) {
    churn_step();
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  std::int64_t const batches = std::max<std::int64_t>(1, (o.steps + o.batch - 1) / o.batch);
  std::int64_t const steps = batches * o.batch;
  std::vector<double> per_step;
  per_step.reserve(static_cast<std::size_t>(batches));
  auto const start = clock_type::now();
  for (std::int64_t bi = 0; bi < batches; ++bi) {
    auto const batch_start = clock_type::now();
    for (std::int64_t i = 0; i < o.batch; ++i) {
      churn_step();
    }
    per_step.push_back(ns_since(batch_start) / static_cast<double>(o.batch));
  }
  double const loop_ns = ns_since(start);
  auto const sync_start = clock_type::now();
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  double const sync_ns = ns_since(sync_start);

  for (block& b : live) {
    a.release(b.p, b.stream);
  }
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  check(cudaStreamDestroy(side), "cudaStreamDestroy");

  summary const s = summarize(per_step);
  double const wall = (loop_ns + sync_ns) / static_cast<double>(steps);
  json_line j = record(o, "churn");
  j.add("steps", steps).add("live", o.live).add("batch", o.batch);
  add_summary(j, s).add("final_sync_us", sync_ns / 1e3).add("wall_ns_per_step", wall).print();
  std::printf("alloc_bench: churn %s/%s, %lld live, 256 B..1 MiB: median %.3f us per step (p10 %.3f, p90 %.3f), wall "
              "%.3f us per step incl. a final sync of %.1f us, %lld steps\n",
              allocator_name(o.kind).c_str(), path_name(o.kind).c_str(), static_cast<long long>(o.live), s.median / 1e3,
              s.p10 / 1e3, s.p90 / 1e3, wall / 1e3, sync_ns / 1e3, static_cast<long long>(steps));
}

// ---- threads: aggregate pairs per second --------------------------------------

void run_threads(options const& o)
{
  allocator const a = make_allocator(o.kind, o.pool_prime);
  std::size_t const size = o.sizes.front();
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  for (std::int64_t count : o.threads) {
    std::atomic<std::int64_t> ready{0};
    std::atomic<bool> go{false};
    clock_type::time_point deadline{};
    std::vector<std::int64_t> done(static_cast<std::size_t>(count), 0);
    std::vector<std::thread> workers;
    for (std::int64_t t = 0; t < count; ++t) {
      workers.emplace_back([&, t] {
        // Makes the primary context current on this thread (the driver API needs it).
        check(cudaSetDevice(device), "cudaSetDevice");
        cudaStream_t own = nullptr;
        check(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
        for (int i = 0; i < 100; ++i) {
          a.release(a.allocate(size, own), own);
        }
        check(cudaStreamSynchronize(own), "cudaStreamSynchronize");
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) {
          std::this_thread::yield();
        }
        std::int64_t pairs = 0;
        // The clock is read every 32 pairs only: it costs about as much as a pool pair.
        do {
          for (int i = 0; i < 32; ++i) {
            a.release(a.allocate(size, own), own);
          }
          pairs += 32;
        } while (clock_type::now() < deadline);
        check(cudaStreamSynchronize(own), "cudaStreamSynchronize");
        done[static_cast<std::size_t>(t)] = pairs;
        ready.fetch_add(1);  // counted again: this thread's work is over
        while (ready.load() < 2 * count) {
          std::this_thread::yield();
        }  // streams outlive everyone's loop
        check(cudaStreamDestroy(own), "cudaStreamDestroy");
      });
    }
    while (ready.load() < count) {
      std::this_thread::yield();
    }
    auto const start = clock_type::now();
    deadline = start + std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(o.seconds));
    go.store(true, std::memory_order_release);
    while (ready.load() < 2 * count) {
      std::this_thread::yield();
    }
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // whatever the frees left queued
    double const wall_s = ns_since(start) / 1e9;
    for (std::thread& w : workers) {
      w.join();
    }

    std::int64_t total = 0;
    for (std::int64_t d : done) {
      total += d;
    }
    auto const [least, most] = std::minmax_element(done.begin(), done.end());
    double const rate = static_cast<double>(total) / wall_s;
    record(o, "threads")
      .add("threads", count)
      .add("size", static_cast<std::int64_t>(size))
      .add("seconds", wall_s)
      .add("pairs", total)
      .add("pairs_per_s", rate)
      .add("thread_pairs_min", *least)
      .add("thread_pairs_max", *most)
      .print();
    std::printf("alloc_bench: threads %s/%s, %lld threads, %s: %.0f pairs/s aggregate (%lld pairs in %.2f s; per "
                "thread %lld..%lld)\n",
                allocator_name(o.kind).c_str(), path_name(o.kind).c_str(), static_cast<long long>(count),
                size_text(size).c_str(), rate, static_cast<long long>(total), wall_s, static_cast<long long>(*least),
                static_cast<long long>(*most));
    std::fflush(stdout);
  }
}

// ---- growth: a pool that starts empty -------------------------------------------

std::uint64_t pool_value(driver_functions const& d, CUmemoryPool pool, CUmemPool_attribute attribute)
{
  cuuint64_t value = 0;
  check(d.pool_get_attribute(pool, attribute, &value), "cuMemPoolGetAttribute");
  return value;
}

void run_growth(options const& o)
{
  allocator a = make_allocator(o.kind, o.pool_prime);
  driver_functions const d = load_driver();
  cudaStream_t const stream = cudaStreamLegacy;
  std::size_t const size = o.sizes.front();
  std::size_t const count = std::max<std::size_t>(1, o.total / size);
  double const gib = static_cast<double>(count * size) / static_cast<double>(std::size_t{1} << 30);
  // One allocation, timed with the synchronization that makes it complete.
  auto const timed_allocation = [&](void*& p) {
    auto const start = clock_type::now();
    p = a.allocate(size, stream);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return ns_since(start);
  };
  auto const release_all = [&](std::vector<void*>& blocks) {
    for (void* p : blocks) {
      a.release(p, stream);
    }
    blocks.clear();
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  };
  // Fills `count` blocks; the times of each allocation.
  auto const fill = [&](std::vector<void*>& blocks) {
    std::vector<double> times;
    for (std::size_t i = 0; i < count; ++i) {
      void* p = nullptr;
      times.push_back(timed_allocation(p));
      blocks.push_back(p);
    }
    return times;
  };
  auto const total_us = [](std::vector<double> const& times) {
    double sum = 0;
    for (double t : times) {
      sum += t;
    }
    return sum / 1e3;
  };

  std::vector<void*> blocks;
  void* first = nullptr;
  double const first_ns = timed_allocation(first);
  blocks.push_back(first);
  // The pool that serves this allocator (none for native cudaMalloc).
  CUmemoryPool pool = nullptr;
  if (d.pointer_get_attribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, reinterpret_cast<CUdeviceptr>(first)) !=
      CUDA_SUCCESS) {
    pool = nullptr;
  }
  (void)cudaGetLastError();
  std::uint64_t const reserved_after_first =
    pool != nullptr ? pool_value(d, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) : 0;
  release_all(blocks);

  std::vector<double> const grow = fill(blocks);
  std::uint64_t const reserved_grown = pool != nullptr ? pool_value(d, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) : 0;
  release_all(blocks);
  std::vector<double> const reuse = fill(blocks);
  release_all(blocks);
  double trim_us = 0;
  if (pool != nullptr) {
    auto const start = clock_type::now();
    check(d.pool_trim_to(pool, 0), "cuMemPoolTrimTo");
    trim_us = ns_since(start) / 1e3;
  }
  std::uint64_t const reserved_trimmed =
    pool != nullptr ? pool_value(d, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) : 0;
  std::vector<double> const regrow = fill(blocks);
  release_all(blocks);

  summary const g = summarize(grow), r = summarize(reuse), rg = summarize(regrow);
  json_line j = record(o, "growth");
  j.add("size", static_cast<std::int64_t>(size))
    .add("blocks", static_cast<std::int64_t>(count))
    .add("first_us", first_ns / 1e3)
    .add("reserved_after_first", static_cast<std::int64_t>(reserved_after_first))
    .add("grow_median_us", g.median / 1e3)
    .add("grow_total_us", total_us(grow))
    .add("grow_us_per_gib", total_us(grow) / gib)
    .add("reserved_grown", static_cast<std::int64_t>(reserved_grown))
    .add("reuse_median_us", r.median / 1e3)
    .add("reuse_total_us", total_us(reuse))
    .add("trim_us", trim_us)
    .add("reserved_trimmed", static_cast<std::int64_t>(reserved_trimmed))
    .add("regrow_median_us", rg.median / 1e3)
    .add("regrow_us_per_gib", total_us(regrow) / gib)
    .print();
  std::printf("alloc_bench: growth %s/%s %s x %zu: first %.1f us (pool then %s); growing %.1f us each, %.0f us per GiB "
              "(%s reserved); steady state %.1f us each; trim %.0f us; growing again %.1f us each, %.0f us per GiB\n",
              allocator_name(o.kind).c_str(), path_name(o.kind).c_str(), size_text(size).c_str(), count, first_ns / 1e3,
              size_text(reserved_after_first).c_str(), g.median / 1e3, total_us(grow) / gib,
              size_text(reserved_grown).c_str(), r.median / 1e3, trim_us, rg.median / 1e3, total_us(regrow) / gib);
  std::fflush(stdout);
}

// ---- pool-facts: what the shim's pool watching relies on ----------------------

__global__ void spin(long long cycles)
{
  long long const start = clock64();
  while (clock64() - start < cycles) {}
}

void run_pool_facts(options const& o)
{
  driver_functions const d = load_driver();
  allocator const a = make_allocator(api::pool_runtime, 0);
  auto const pool = reinterpret_cast<CUmemoryPool>(a.pool);
  auto const reserved = [&] {
    return static_cast<std::int64_t>(pool_value(d, pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
  };
  auto const used = [&] { return static_cast<std::int64_t>(pool_value(d, pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT)); };
  cudaStream_t stream = nullptr;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");

  // Granularity: what the empty pool reserves for a small and a large block.
  json_line g = record(o, "pool-facts");
  g.add("fact", "granularity");
  for (std::size_t bytes : {std::size_t{256}, std::size_t{1} << 20, std::size_t{33} << 20, std::size_t{1} << 30}) {
    void* p = a.allocate(bytes, stream);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    g.add(("reserved_for_" + std::to_string(bytes)).c_str(), reserved());
    a.release(p, stream);
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    check(d.pool_trim_to(pool, 0), "cuMemPoolTrimTo");
  }
  g.print();

  // A free still waiting on its stream (behind a 300 ms kernel): used, and trimmable?
  std::size_t const big = std::size_t{4} << 30;
  void* p = a.allocate(big, stream);
  spin<<<1, 1, 0, stream>>>(600'000'000LL);
  check(cudaGetLastError(), "spin<<<>>>");
  a.release(p, stream);
  json_line f = record(o, "pool-facts");
  f.add("fact", "pending_free").add("bytes", static_cast<std::int64_t>(big));
  f.add("used_while_pending", used()).add("reserved_while_pending", reserved());
  std::size_t free_pending = 0, total = 0;
  check(d.mem_get_info(&free_pending, &total), "cuMemGetInfo_v2");
  f.add("trim_while_pending", static_cast<std::int64_t>(d.pool_trim_to(pool, 0)));
  f.add("reserved_after_trim_while_pending", reserved());
  f.add("stream_query_while_pending", static_cast<std::int64_t>(d.stream_query(reinterpret_cast<CUstream>(stream))));
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  f.add("used_after_sync", used()).add("reserved_after_sync", reserved());
  check(d.pool_trim_to(pool, 0), "cuMemPoolTrimTo");
  f.add("reserved_after_trim", reserved());
  std::size_t free_after = 0;
  check(d.mem_get_info(&free_after, &total), "cuMemGetInfo_v2");
  f.add("device_free_gain_from_trim", static_cast<std::int64_t>(free_after) - static_cast<std::int64_t>(free_pending));
  f.print();

  // The release threshold at a synchronization: 0 gives everything back.
  json_line t = record(o, "pool-facts");
  std::uint64_t zero = 0;
  check(cudaMemPoolSetAttribute(a.pool, cudaMemPoolAttrReleaseThreshold, &zero), "cudaMemPoolSetAttribute");
  p = a.allocate(big, stream);
  a.release(p, stream);
  t.add("fact", "threshold_0").add("reserved_before_sync", reserved());
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  t.add("reserved_after_stream_sync", reserved()).print();
  std::uint64_t most = UINT64_MAX;
  check(cudaMemPoolSetAttribute(a.pool, cudaMemPoolAttrReleaseThreshold, &most), "cudaMemPoolSetAttribute");

  // A trim from a thread that has no current context.
  p = a.allocate(big, stream);
  a.release(p, stream);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  CUresult other_thread = CUDA_SUCCESS;
  CUcontext other_context = nullptr;
  std::int64_t reserved_before_thread = reserved();
  std::thread([&] {
    (void)d.ctx_get_current(&other_context);
    other_thread = d.pool_trim_to(pool, 0);
  }).join();
  record(o, "pool-facts")
    .add("fact", "trim_without_context")
    .add("thread_had_context", other_context != nullptr)
    .add("result", static_cast<std::int64_t>(other_thread))
    .add("reserved_before", reserved_before_thread)
    .add("reserved_after", reserved())
    .print();

  // What watching a pool costs, per call (medians of batches of 100).
  auto const cost = [&](char const* name, auto&& call) {
    std::vector<double> samples;
    for (int b = 0; b < 50; ++b) {
      auto const start = clock_type::now();
      for (int i = 0; i < 100; ++i) {
        call();
      }
      samples.push_back(ns_since(start) / 100);
    }
    summary const s = summarize(samples);
    record(o, "pool-facts")
      .add("fact", "cost")
      .add("call", name)
      .add("median_ns", s.median)
      .add("p90_ns", s.p90)
      .print();
    std::printf("alloc_bench: pool-facts cost of %s: %.0f ns (p90 %.0f)\n", name, s.median, s.p90);
  };
  std::size_t fr = 0, to = 0;
  cost("cuMemGetInfo_v2", [&] { (void)d.mem_get_info(&fr, &to); });
  cost("cudaMemGetInfo", [&] { (void)cudaMemGetInfo(&fr, &to); });
  cuuint64_t value = 0;
  cost("cuMemPoolGetAttribute(USED_MEM_CURRENT)",
       [&] { (void)d.pool_get_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &value); });
  cost("cuStreamQuery(idle stream)", [&] { (void)d.stream_query(reinterpret_cast<CUstream>(stream)); });
  cost("cuMemPoolTrimTo(nothing to trim)", [&] { (void)d.pool_trim_to(pool, std::size_t{1} << 40); });
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  std::fflush(stdout);
}

// ---- load-time: what preloading the shim costs a program without CUDA ---------

double spawn_and_wait(std::vector<std::string> const& argv_text, std::vector<std::string> const& env_text)
{
  std::vector<char*> argv, envp;
  for (auto const& s : argv_text) {
    argv.push_back(const_cast<char*>(s.c_str()));
  }
  for (auto const& s : env_text) {
    envp.push_back(const_cast<char*>(s.c_str()));
  }
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  auto const start = clock_type::now();
  pid_t pid = 0;
  if (posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), envp.data()) != 0) {
    die("cannot start " + argv_text[0]);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    die(argv_text[0] + " did not exit with status 0");
  }
  return ns_since(start);
}

void run_load_time(options const& o)
{
  if (o.preload.empty() || o.program.empty()) { die("load-time needs --preload LIB and -- PROGRAM [ARGS...]"); }
  std::vector<std::string> without;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) { without.emplace_back(*e); }
  }
  std::vector<std::string> with = without;
  with.push_back("LD_PRELOAD=" + o.preload);
  for (auto const& s : o.sets) {
    with.push_back(s);
  }

  for (int i = 0; i < 3; ++i) {  // page cache, loader cache
    spawn_and_wait(o.program, without);
    spawn_and_wait(o.program, with);
  }
  // Alternating order (ABBA) so that a drift of the machine hits both arms alike.
  std::vector<double> a, b;
  for (std::int64_t i = 0; i < o.runs; ++i) {
    if (i % 2 == 0) {
      a.push_back(spawn_and_wait(o.program, without));
      b.push_back(spawn_and_wait(o.program, with));
    } else {
      b.push_back(spawn_and_wait(o.program, with));
      a.push_back(spawn_and_wait(o.program, without));
    }
  }
  summary const sa = summarize(a), sb = summarize(b);
  std::string program;
  for (auto const& s : o.program) {
    program += (program.empty() ? "" : " ") + s;
  }
  double const cost = (sb.median - sa.median) / 1e3;
  record(o, "load-time")
    .add("program", program)
    .add("preload", o.preload)
    .add("runs", o.runs)
    .add("without_median_us", sa.median / 1e3)
    .add("without_p10_us", sa.p10 / 1e3)
    .add("without_p90_us", sa.p90 / 1e3)
    .add("with_median_us", sb.median / 1e3)
    .add("with_p10_us", sb.p10 / 1e3)
    .add("with_p90_us", sb.p90 / 1e3)
    .add("cost_us", cost)
    .print();
  std::printf("alloc_bench: load-time '%s': %.1f us with the shim preloaded, %.1f us without (medians of %lld runs "
              "each): cost %.1f us\n",
              program.c_str(), sb.median / 1e3, sa.median / 1e3, static_cast<long long>(o.runs), cost);
}

// ---- command line -------------------------------------------------------------

void usage()
{
  std::printf("usage: alloc_bench pairs   --api A --size N[,N...] [--iterations N] [--batch N] [--idle-streams N]\n"
              "       alloc_bench churn   --api A [--steps N] [--live N] [--batch N]\n"
              "       alloc_bench threads --api A [--threads N[,N...]] [--seconds S] [--size N]\n"
              "       alloc_bench growth  --api A --size N [--total N] [--pool-prime N]\n"
              "       alloc_bench pool-facts\n"
              "       alloc_bench load-time --preload LIB [--runs N] [--set NAME=VALUE]... -- PROGRAM [ARGS...]\n"
              "  A: runtime | driver | pool-runtime | pool-driver; sizes take K, M, G (powers of 1024);\n"
              "  --pool-prime N (pool-*: bytes to prime the pool with, default 1G); --label TEXT (into the JSON)\n");
}

std::size_t parse_size(std::string const& text)
{
  char* end = nullptr;
  double const value = std::strtod(text.c_str(), &end);
  std::string const unit = lower(end);
  double scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else {
    die("not a size: '" + text + "'");
  }
  if (end == text.c_str() || value < 0) { die("not a size: '" + text + "'"); }
  return static_cast<std::size_t>(value * scale);
}

std::int64_t parse_count(std::string const& text)
{
  char* end = nullptr;
  long long const value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || value <= 0) { die("not a positive number: '" + text + "'"); }
  return value;
}

template <typename T, typename Parse>
std::vector<T> parse_list(std::string const& text, Parse parse)
{
  std::vector<T> out;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t const comma = std::min(text.find(',', begin), text.size());
    out.push_back(parse(text.substr(begin, comma - begin)));
    begin = comma + 1;
  }
  return out;
}

options parse(int argc, char** argv)
{
  options o;
  if (argc < 2) {
    usage();
    std::exit(2);
  }
  o.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string const arg = argv[i];
    if (arg == "--") {
      o.program.assign(argv + i + 1, argv + argc);
      break;
    }
    if (i + 1 >= argc) {
      usage();
      die("missing value after " + arg);
    }
    std::string const value = argv[++i];
    if (arg == "--api") {
      o.kind = parse_api(value);
      o.api_given = true;
    } else if (arg == "--size") {
      o.sizes = parse_list<std::size_t>(value, parse_size);
    } else if (arg == "--iterations") {
      o.iterations = parse_count(value);
    } else if (arg == "--batch") {
      o.batch = parse_count(value);
    } else if (arg == "--steps") {
      o.steps = parse_count(value);
    } else if (arg == "--live") {
      o.live = parse_count(value);
    } else if (arg == "--idle-streams") {
      o.idle_streams = parse_count(value);
    } else if (arg == "--threads") {
      o.threads = parse_list<std::int64_t>(value, parse_count);
    } else if (arg == "--seconds") {
      o.seconds = std::strtod(value.c_str(), nullptr);
    } else if (arg == "--total") {
      o.total = parse_size(value);
    } else if (arg == "--pool-prime") {
      o.pool_prime = parse_size(value);
    } else if (arg == "--label") {
      o.label = value;
    } else if (arg == "--preload") {
      o.preload = value;
    } else if (arg == "--runs") {
      o.runs = parse_count(value);
    } else if (arg == "--set") {
      o.sets.push_back(value);
    } else {
      usage();
      die("unknown option " + arg);
    }
  }
  bool const known = o.command == "pairs" || o.command == "churn" || o.command == "threads" || o.command == "growth" ||
                     o.command == "pool-facts" || o.command == "load-time";
  if (!known) {
    usage();
    die("unknown subcommand '" + o.command + "'");
  }
  if (o.command != "load-time" && o.command != "pool-facts" && !o.api_given) { die(o.command + " needs --api"); }
  if (!(o.seconds > 0)) { die("--seconds must be positive"); }
  return o;
}

}  // namespace

int main(int argc, char** argv)
{
  options const o = parse(argc, argv);
  if (o.command == "load-time") {
    run_load_time(o);
    return 0;
  }
  int devices = 0;
  cudaError_t const counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n", cudaGetErrorName(counted), devices);
    return 0;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  check(cudaFree(nullptr), "cudaFree(nullptr)");  // the context exists before anything is timed
  if (o.command == "pairs") {
    run_pairs(o);
  } else if (o.command == "churn") {
    run_churn(o);
  } else if (o.command == "growth") {
    run_growth(o);
  } else if (o.command == "pool-facts") {
    run_pool_facts(o);
  } else {
    run_threads(o);
  }
  std::fflush(stdout);
  return 0;
}
