// GPU-tier checks of libasyncshim.so on a real device. One program, one
// subcommand per check; tests/gpu/CMakeLists.txt runs each with and without the
// shim and the environment it needs. Exit 0: passed; 1: failed; a line starting
// "SKIP:" (and exit 77): the check cannot run here, and why.
//
// Built with nvcc against the shared CUDA runtime (-cudart shared), as programs
// that the shim can serve are. The driver library is opened at run time, only
// to read pointer attributes, so the program also starts where none is installed.
#include <cuda.h>  // the driver's types; its functions come through cudaGetDriverEntryPointByVersion
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "byte_literals.hpp"
#include "probe_common.cuh"

namespace {

using byte_literals::GiB;
using byte_literals::MiB;

int failures = 0;

#define CHECK(cond)                                                 \
  do {                                                              \
    if (!(cond)) {                                                  \
      std::printf("FAIL: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      ++failures;                                                   \
    }                                                               \
  } while (0)

#define CUDA_OK(call)                                                                                 \
  do {                                                                                                \
    cudaError_t const e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                          \
      std::printf("FAIL: %s returned %s (%s:%d)\n", #call, cudaGetErrorName(e_), __FILE__, __LINE__); \
      ++failures;                                                                                     \
    }                                                                                                 \
  } while (0)

// One word's share of a checksum: a hash of the word and its index, so that
// words moved, or a buffer filled with another seed, change the sum (a plain
// sum of pattern(i, seed) is the same for many seeds).
__host__ __device__ inline unsigned long long word_hash(unsigned word, std::size_t i)
{
  unsigned long long z = ((static_cast<unsigned long long>(word) << 32) | (i & 0xffffffffu)) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void checksum(unsigned const* data, std::size_t n, unsigned long long* sum)
{
  unsigned long long local = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    local += word_hash(data[i], i);
  }
  atomicAdd(sum, local);
}

unsigned long long expected_checksum(std::size_t n, unsigned seed)
{
  unsigned long long sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sum += word_hash(pattern(i, seed), i);
  }
  return sum;
}

std::uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr)
{
  std::uint64_t value = 0;
  CUDA_OK(cudaMemPoolGetAttribute(pool, attr, &value));
  return value;
}

bool expect_pool() { return std::getenv("LD_PRELOAD") != nullptr && std::getenv("ASYNCSHIM_DISABLE") == nullptr; }

std::uint64_t env_bytes(char const* name)
{
  char const* v = std::getenv(name);
  return v != nullptr ? std::strtoull(v, nullptr, 10) : 0;
}

// Sets count to the number of devices. With fewer than two, prints the SKIP
// line of a check that needs two and returns true (the check then exits 77).
bool fewer_than_two_devices(int& count)
{
  CUDA_OK(cudaGetDeviceCount(&count));
  if (count >= 2) { return false; }
  std::printf("SKIP: one CUDA device here; this check needs two\n");
  return true;
}

// ---- checks -----------------------------------------------------------------

// The program's very first CUDA call is cudaMalloc; the memory is the pool's
// under the shim and works with kernels.
int first_call_is_malloc()
{
  unsigned* data = nullptr;
  std::size_t const n = 1 << 20;
  cudaError_t const first = cudaMalloc(&data, n * sizeof(unsigned));
  if (first == cudaErrorNoDevice || first == cudaErrorInsufficientDriver) {
    std::printf("SKIP: no CUDA device or driver on this machine (cudaMalloc: %s)\n", cudaGetErrorName(first));
    return 77;
  }
  CUDA_OK(first);
  if (data == nullptr) { return 1; }
  CHECK((pool_of(data) != nullptr) == expect_pool());
  fill_kernel<<<64, 256>>>(data, n, 7);
  unsigned long long* sum = nullptr;
  CUDA_OK(cudaMalloc(&sum, sizeof(*sum)));
  CUDA_OK(cudaMemset(sum, 0, sizeof(*sum)));
  checksum<<<64, 256>>>(data, n, sum);
  unsigned long long host = 0;
  CUDA_OK(cudaMemcpy(&host, sum, sizeof(host), cudaMemcpyDeviceToHost));
  CHECK(host == expected_checksum(n, 7));
  CUDA_OK(cudaFree(data));
  CUDA_OK(cudaFree(sum));
  return 0;
}

// Deterministic output for the with/without comparison: kernels over buffers
// of many sizes, allocated and freed in an interleaved order.
void kernels()
{
  std::vector<std::pair<unsigned*, std::size_t>> live;
  unsigned long long* sum = nullptr;
  CUDA_OK(cudaMalloc(&sum, sizeof(*sum)));
  for (int round = 0; round < 200; ++round) {
    std::size_t const n = (std::size_t{1} << (6 + round % 17)) + static_cast<std::size_t>(round);
    unsigned* data = nullptr;
    CUDA_OK(cudaMalloc(&data, n * sizeof(unsigned)));
    fill_kernel<<<128, 256>>>(data, n, static_cast<unsigned>(round));
    live.emplace_back(data, n);
    if (round % 3 == 2) {  // check and free the oldest
      auto [old, old_n] = live.front();
      live.erase(live.begin());
      CUDA_OK(cudaMemset(sum, 0, sizeof(*sum)));
      checksum<<<128, 256>>>(old, old_n, sum);
      unsigned long long host = 0;
      CUDA_OK(cudaMemcpy(&host, sum, sizeof(host), cudaMemcpyDeviceToHost));
      std::printf("round %3d: %zu words, checksum %llu\n", round, old_n, host);
      CUDA_OK(cudaFree(old));
    }
  }
  for (auto [p, n] : live) {
    CUDA_OK(cudaFree(p));
  }
  CUDA_OK(cudaFree(sum));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
}

// The pool behind cudaMalloc has the attributes the environment asked for:
// EXPECT_THRESHOLD and EXPECT_RESERVED_MIN in bytes, EXPECT_HALF_FREE=1 for
// ASYNCSHIM_INITIAL_POOL_SIZE=half-free (reserved ~ half of the free memory),
// or the shim's defaults (threshold = total memory, nothing reserved beyond
// the pool's first step for the 1-byte allocation) when they are unset.
void pool_attributes()
{
  std::size_t free = 0;
  std::size_t total = 0;
  CUDA_OK(cudaMemGetInfo(&free, &total));  // before the first cudaMalloc: no pool yet
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, 1));
  cudaMemPool_t pool = pool_of(p);
  CHECK(pool != nullptr);
  if (pool == nullptr) { return; }
  std::uint64_t const threshold = pool_attribute(pool, cudaMemPoolAttrReleaseThreshold);
  std::uint64_t const reserved = pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent);
  std::printf("free %zu total %zu threshold %llu reserved %llu\n", free, total,
              static_cast<unsigned long long>(threshold), static_cast<unsigned long long>(reserved));
  std::uint64_t const want_threshold = env_bytes("EXPECT_THRESHOLD");
  std::uint64_t const want_reserved = env_bytes("EXPECT_RESERVED_MIN");
  if (want_threshold != 0) {
    CHECK(threshold == want_threshold);
  } else {
    CHECK(threshold == total);
  }
  if (want_reserved != 0) {
    CHECK(reserved >= want_reserved);
    CHECK(reserved < want_reserved + 64 * MiB);
  } else if (env_bytes("EXPECT_HALF_FREE") != 0) {
    CHECK(reserved >= free / 2 - 64 * MiB);  // the pool rounds to its granularity
    CHECK(reserved <= free / 2 + 64 * MiB);
  } else {
    CHECK(reserved <= 64 * MiB);
  }
  // The pool is exportable as a POSIX descriptor when ASYNCSHIM_EXPORT_HANDLE_TYPE
  // asks for it, or is unset or auto (the default) and the device supports it.
  char const* handle = std::getenv("ASYNCSHIM_EXPORT_HANDLE_TYPE");
  std::string const asked = handle != nullptr ? handle : "auto";
  int supported = 0;
  CUDA_OK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolSupportedHandleTypes, 0));
  bool const want_fd = asked == "posix_fd" || asked == "posix_file_descriptor" ||
                       (asked == "auto" && (supported & cudaMemHandleTypePosixFileDescriptor) != 0);
  int fd = -1;
  cudaError_t const exported = cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0);
  std::printf("export as posix fd: %s\n", cudaGetErrorName(exported));
  CHECK((exported == cudaSuccess) == want_fd);
  (void)cudaGetLastError();
  CUDA_OK(cudaFree(p));
}

// 1 PiB fails as natively, and the program carries on.
void out_of_memory()
{
  void* p = nullptr;
  cudaError_t const e = cudaMalloc(&p, std::size_t{1} << 50);
  std::printf("cudaMalloc(1 PiB): %s\n", cudaGetErrorName(e));
  CHECK(e == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  CUDA_OK(cudaMalloc(&p, GiB));
  CHECK((pool_of(p) != nullptr) == expect_pool());
  CUDA_OK(cudaMemset(p, 1, GiB));
  CUDA_OK(cudaFree(p));
  CUDA_OK(cudaDeviceSynchronize());
}

// Threads allocate, fill with kernels, check, and free each other's buffers.
void threads()
{
  constexpr int thread_count = 16;
  constexpr int rounds = 200;
  std::vector<std::vector<std::pair<unsigned*, unsigned>>> handoff(thread_count);
  std::atomic<int> bad{0};
  auto work = [&](int t) {
    cudaStream_t stream = nullptr;
    if (cudaStreamCreate(&stream) != cudaSuccess) {
      ++bad;
      return;
    }
    std::vector<unsigned> host(4096);
    for (int i = 0; i < rounds; ++i) {
      unsigned* data = nullptr;
      std::size_t const n = 4096;
      if (cudaMalloc(&data, n * sizeof(unsigned) + static_cast<std::size_t>(i % 7) * 1000) != cudaSuccess) {
        ++bad;
        continue;
      }
      if ((pool_of(data) != nullptr) != expect_pool()) { ++bad; }  // the pool's under the shim, natively none
      unsigned const seed = static_cast<unsigned>(t * 1000 + i);
      // cudaMalloc memory is usable from any stream at once.
      fill_kernel<<<8, 256, 0, stream>>>(data, n, seed);
      if (cudaMemcpyAsync(host.data(), data, n * sizeof(unsigned), cudaMemcpyDeviceToHost, stream) != cudaSuccess ||
          cudaStreamSynchronize(stream) != cudaSuccess) {
        ++bad;
      }
      for (std::size_t k = 0; k < n; ++k) {
        if (host[k] != pattern(k, seed)) {
          ++bad;
          break;
        }
      }
      if (i % 2 == 0) {
        if (cudaFree(data) != cudaSuccess) { ++bad; }
      } else {
        handoff[t].emplace_back(data, seed);
      }
    }
    cudaStreamDestroy(stream);
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back(work, t);
  }
  for (auto& th : pool) {
    th.join();
  }
  pool.clear();
  for (int t = 0; t < thread_count; ++t) {
    pool.emplace_back([&, t] {
      // Every word: a block handed out again while another thread still held it shows anywhere in it.
      std::vector<unsigned> seen(4096);
      for (auto [p, seed] : handoff[(t + 1) % thread_count]) {
        if (cudaMemcpy(seen.data(), p, seen.size() * sizeof(unsigned), cudaMemcpyDeviceToHost) != cudaSuccess) {
          ++bad;
        }
        for (std::size_t k = 0; k < seen.size(); ++k) {
          if (seen[k] != pattern(k, seed)) {
            ++bad;
            break;
          }
        }
        if (cudaFree(p) != cudaSuccess) { ++bad; }
      }
    });
  }
  for (auto& th : pool) {
    th.join();
  }
  std::printf("threads: %d problems\n", bad.load());
  CHECK(bad.load() == 0);
}

// Every device gets its own pool, created with that device's own resolved
// sizes: EXPECT_RESERVED_PERCENT and EXPECT_THRESHOLD_PERCENT (of each device's
// total memory), or the shim's defaults (nothing reserved beyond what the
// first allocation needed, threshold = its total). Each pool's memory then works
// with a kernel on its device.
int every_device()
{
  int count = 0;
  if (fewer_than_two_devices(count)) { return 77; }
  char const* reserved_percent = std::getenv("EXPECT_RESERVED_PERCENT");
  char const* threshold_percent = std::getenv("EXPECT_THRESHOLD_PERCENT");
  std::vector<cudaMemPool_t> pools;
  std::vector<unsigned*> buffers(count, nullptr);
  std::size_t const n = 1 << 20;
  for (int device = 0; device < count; ++device) {
    CUDA_OK(cudaSetDevice(device));
    std::size_t free = 0;
    std::size_t total = 0;
    CUDA_OK(cudaMemGetInfo(&free, &total));  // before this device's first cudaMalloc
    CUDA_OK(cudaMalloc(&buffers[device], n * sizeof(unsigned)));
    cudaPointerAttributes attributes{};
    CUDA_OK(cudaPointerGetAttributes(&attributes, buffers[device]));
    CHECK(attributes.device == device);
    cudaMemPool_t const pool = pool_of(buffers[device]);
    CHECK((pool != nullptr) == expect_pool());
    if (pool == nullptr) { continue; }
    for (cudaMemPool_t other : pools) {
      CHECK(other != pool);
    }
    pools.push_back(pool);
    std::uint64_t const threshold = pool_attribute(pool, cudaMemPoolAttrReleaseThreshold);
    std::uint64_t const reserved = pool_attribute(pool, cudaMemPoolAttrReservedMemCurrent);
    std::uint64_t const want_threshold =
      threshold_percent != nullptr ? static_cast<std::uint64_t>(total * std::atof(threshold_percent) / 100.0) : total;
    std::uint64_t const want_reserved =
      reserved_percent != nullptr ? static_cast<std::uint64_t>(total * std::atof(reserved_percent) / 100.0) : 0;
    std::printf("device %d: free %zu total %zu threshold %llu (want %llu) reserved %llu (want %llu)\n", device, free,
                total, static_cast<unsigned long long>(threshold), static_cast<unsigned long long>(want_threshold),
                static_cast<unsigned long long>(reserved), static_cast<unsigned long long>(want_reserved));
    // The percentage is resolved in whole bytes; allow a byte's rounding.
    CHECK(threshold + 1 >= want_threshold && threshold <= want_threshold + 1);
    CHECK(reserved + 64 * MiB >= want_reserved);  // the pool rounds to its granularity
    CHECK(reserved <= want_reserved + 64 * MiB);
  }
  for (int device = 0; device < count; ++device) {
    CUDA_OK(cudaSetDevice(device));
    unsigned long long* sum = nullptr;
    CUDA_OK(cudaMalloc(&sum, sizeof(*sum)));
    CUDA_OK(cudaMemset(sum, 0, sizeof(*sum)));
    unsigned const seed = 17u + static_cast<unsigned>(device);
    fill_kernel<<<128, 256>>>(buffers[device], n, seed);
    checksum<<<128, 256>>>(buffers[device], n, sum);
    unsigned long long host = 0;
    CUDA_OK(cudaMemcpy(&host, sum, sizeof(host), cudaMemcpyDeviceToHost));
    CHECK(host == expected_checksum(n, seed));
    CUDA_OK(cudaFree(sum));
  }
  // Freed from device 0, whichever device each buffer lives on.
  CUDA_OK(cudaSetDevice(0));
  for (unsigned* p : buffers) {
    CUDA_OK(cudaFree(p));
  }
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaGetLastError());
  return 0;
}

// cudaSetDevice + cudaMalloc on a second device gets that device's own pool.
int second_device()
{
  int count = 0;
  if (fewer_than_two_devices(count)) { return 77; }
  void* a = nullptr;
  void* b = nullptr;
  CUDA_OK(cudaSetDevice(0));
  CUDA_OK(cudaMalloc(&a, MiB));
  CUDA_OK(cudaSetDevice(1));
  CUDA_OK(cudaMalloc(&b, MiB));
  cudaPointerAttributes attributes{};
  CUDA_OK(cudaPointerGetAttributes(&attributes, b));
  CHECK(attributes.device == 1);
  CHECK((pool_of(b) != nullptr) == expect_pool());
  if (expect_pool()) { CHECK(pool_of(a) != pool_of(b)); }
  CUDA_OK(cudaMemset(b, 3, MiB));
  CUDA_OK(cudaFree(a));  // freed while device 1 is current
  CUDA_OK(cudaFree(b));
  int current = -1;
  CUDA_OK(cudaGetDevice(&current));
  CHECK(current == 1);
  return 0;
}

// Spins on the device for about `ns` nanoseconds (the device's own clock).
__device__ void spin_for(unsigned long long ns)
{
  unsigned long long const start = device_clock_ns();
  while (device_clock_ns() - start < ns) {}
}

__global__ void spin(unsigned long long ns) { spin_for(ns); }

// Launches each kernel of the ordering checks once, on scratch words, and
// waits: loading a kernel at its first launch waits for the device, which
// would hold the host back until a spin has ended (and the free after it).
void load_kernels(unsigned* word, unsigned long long* sum)
{
  fill_kernel<<<1, 1>>>(word, 1, 0);
  spin<<<1, 1>>>(0);
  checksum<<<1, 1>>>(word, 1, sum);
  CUDA_OK(cudaMemset(sum, 0, sizeof *sum));
  CUDA_OK(cudaDeviceSynchronize());
}

// A 64 MiB block filled with seed 7, and its checksum read into `sum` on
// `stream` behind a 200 ms spin: the block a check frees while it is read.
struct slow_read {
  static constexpr std::size_t bytes = 64 * MiB;
  static constexpr std::size_t n = bytes / sizeof(unsigned);
  unsigned long long* sum = nullptr;
  unsigned* block = nullptr;
  [[nodiscard]] bool read_its_own_data() const;
};

slow_read allocate_slow_read()
{
  slow_read r;
  CUDA_OK(cudaMalloc(&r.sum, sizeof *r.sum));
  CUDA_OK(cudaMemset(r.sum, 0, sizeof *r.sum));
  CUDA_OK(cudaMalloc(&r.block, slow_read::bytes));
  return r;
}

// `scratch`: a word load_kernels may write (the block, by default).
void read_slowly(slow_read const& r, cudaStream_t stream, unsigned* scratch = nullptr)
{
  load_kernels(scratch != nullptr ? scratch : r.block, r.sum);
  fill_kernel<<<256, 256, 0, stream>>>(r.block, slow_read::n, 7);
  spin<<<1, 1, 0, stream>>>(200'000'000ull);  // 200 ms before the read
  checksum<<<256, 256, 0, stream>>>(r.block, slow_read::n, r.sum);
  CUDA_OK(cudaGetLastError());
}

slow_read fill_then_read_slowly(cudaStream_t stream)
{
  slow_read const r = allocate_slow_read();
  read_slowly(r, stream);
  return r;
}

bool slow_read::read_its_own_data() const
{
  unsigned long long got = 0;
  CUDA_OK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost));
  return got == expected_checksum(n, 7);
}

double seconds_since(std::chrono::steady_clock::time_point start)
{
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

__global__ void spin_then_set(unsigned long long ns, unsigned* flag)
{
  spin_for(ns);
  *flag = 1;
}

__global__ void copy_flag(unsigned const* flag, unsigned* seen) { *seen = *flag; }

// Whether the legacy stream's next work waits for work still pending on a
// stream the program has just destroyed: a 100 ms kernel on the stream sets
// a flag, the stream is destroyed, and a kernel on the legacy stream reads
// the flag. For a live blocking stream it must wait (the control); the shim
// follows only non-blocking streams and relies on the answer for a destroyed
// blocking one, which CUDA's documentation does not give. Prints the three
// answers and how long each cudaStreamDestroy took (one that waits for the
// kernel, about 100 ms, leaves nothing for the legacy stream to wait for:
// the answer then says nothing); fails only if the control does not wait.
void destroyed_stream()
{
  unsigned* flag = nullptr;
  unsigned* seen = nullptr;
  CUDA_OK(cudaMalloc(&flag, sizeof(unsigned)));
  CUDA_OK(cudaMallocManaged(&seen, sizeof(unsigned)));
  double destroy_ms[2] = {0, 0};
  auto const waited = [&](unsigned stream_flags, bool destroy) {
    CUDA_OK(cudaMemset(flag, 0, sizeof(unsigned)));
    *seen = 7;
    CUDA_OK(cudaDeviceSynchronize());
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, stream_flags));
    spin_then_set<<<1, 1, 0, stream>>>(100'000'000ull, flag);
    CUDA_OK(cudaGetLastError());
    if (destroy) {
      auto const start = std::chrono::steady_clock::now();
      CUDA_OK(cudaStreamDestroy(stream));
      destroy_ms[stream_flags == cudaStreamDefault ? 0 : 1] = seconds_since(start) * 1e3;
    }
    copy_flag<<<1, 1, 0, cudaStreamLegacy>>>(flag, seen);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    if (!destroy) { CUDA_OK(cudaStreamDestroy(stream)); }
    return *seen == 1;
  };
  bool const live_blocking = waited(cudaStreamDefault, false);
  bool const destroyed_blocking = waited(cudaStreamDefault, true);
  bool const destroyed_non_blocking = waited(cudaStreamNonBlocking, true);
  std::printf("destroyed-stream: the legacy stream's next kernel waited for a 100 ms kernel on a live blocking "
              "stream: %s; on a destroyed blocking stream: %s (its cudaStreamDestroy took %.1f ms); on a destroyed "
              "non-blocking stream: %s (%.1f ms)\n",
              live_blocking ? "yes" : "no", destroyed_blocking ? "yes" : "no", destroy_ms[0],
              destroyed_non_blocking ? "yes" : "no", destroy_ms[1]);
  CHECK(live_blocking);
  CUDA_OK(cudaFree(flag));
  CUDA_OK(cudaFree(seen));
}

// ASYNCSHIM_FREE_BACKLOG (set by the test, EXPECT_BACKLOG_WAIT=1 where the
// free must wait): 64 MiB freed while a 200 ms kernel runs on the legacy
// stream. Over a small backlog the free waits for that kernel, as native
// cudaFree does; without a limit it returns at once. Either way the block is
// then allocated again and used.
void free_backlog()
{
  bool const must_wait = std::getenv("EXPECT_BACKLOG_WAIT") != nullptr;
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, 64 * MiB));
  CUDA_OK(cudaDeviceSynchronize());
  spin<<<1, 1>>>(200'000'000ull);
  CUDA_OK(cudaGetLastError());
  auto const start = std::chrono::steady_clock::now();
  CUDA_OK(cudaFree(p));
  double const took = seconds_since(start);
  std::printf("free_backlog: the free took %.1f ms beside a 200 ms kernel\n", took * 1e3);
  if (must_wait) {
    CHECK(took >= 0.150);
  } else {
    CHECK(took < 0.100);
  }
  auto* again = static_cast<unsigned*>(nullptr);
  CUDA_OK(cudaMalloc(&again, 64 * MiB));
  std::size_t const n = 64 * MiB / sizeof(unsigned);
  fill_kernel<<<256, 256>>>(again, n, 7);
  unsigned long long* sum = nullptr;
  CUDA_OK(cudaMalloc(&sum, sizeof *sum));
  CUDA_OK(cudaMemset(sum, 0, sizeof *sum));
  checksum<<<256, 256>>>(again, n, sum);
  unsigned long long got = 0;
  CUDA_OK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost));
  CHECK(got == expected_checksum(n, 7));
  CUDA_OK(cudaFree(sum));
  CUDA_OK(cudaFree(again));
}

// A block freed while a kernel on the legacy stream still has to read it,
// allocated again at once and written from a non-blocking stream. Natively
// cudaFree waited for the kernel. Under the shim the free went in the legacy
// stream's order, the next allocation may get the same block at once, and
// the non-blocking stream must not write it before the kernel has read it.
// late-stream (stream_made_before false): the stream is made after the free
// (no non-blocking stream existed then); idle-stream (true): it was made and
// used before, and has no work in progress at the free.
// EXPECT_SAME_BLOCK: the second allocation must be the first block (the
// in-order path was taken). RECURRING_SIZE: the block's size is allocated
// twice first (the second held to the end), so that the reuse cache keeps the
// freed block (it keeps only sizes allocated again after two misses).
void freed_in_order_then_non_blocking(bool stream_made_before)
{
  bool const same_expected = std::getenv("EXPECT_SAME_BLOCK") != nullptr;
  cudaStream_t side = nullptr;
  unsigned* used_before = nullptr;  // freed at the end: the pool's layout stays that of late-stream
  if (stream_made_before) {
    CUDA_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    CUDA_OK(cudaMalloc(&used_before, MiB));
    fill_kernel<<<16, 256, 0, side>>>(used_before, MiB / sizeof(unsigned), 3);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaStreamSynchronize(side));  // idle from now on
  }
  void* recurring = nullptr;  // the size's second block, held: the cache starts empty
  if (std::getenv("RECURRING_SIZE") != nullptr) {
    CUDA_OK(cudaMalloc(&recurring, slow_read::bytes));
    CUDA_OK(cudaFree(recurring));
    CUDA_OK(cudaMalloc(&recurring, slow_read::bytes));
  }
  slow_read const read = fill_then_read_slowly(nullptr);
  CUDA_OK(cudaFree(read.block));
  unsigned* second = nullptr;
  CUDA_OK(cudaMalloc(&second, slow_read::bytes));
  if (!stream_made_before) { CUDA_OK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking)); }
  fill_kernel<<<256, 256, 0, side>>>(second, slow_read::n, 9);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  bool const own_data = read.read_its_own_data();
  std::printf("%s: the second allocation is %s block; the legacy-stream kernel read %s\n",
              stream_made_before ? "idle_stream" : "late_stream", second == read.block ? "the same" : "another",
              own_data ? "its own data" : "OTHER DATA");
  CHECK(own_data);
  if (same_expected) { CHECK(second == read.block); }
  CUDA_OK(cudaStreamDestroy(side));
  CUDA_OK(cudaFree(second));
  CUDA_OK(cudaFree(read.sum));
  if (used_before != nullptr) { CUDA_OK(cudaFree(used_before)); }
  if (recurring != nullptr) { CUDA_OK(cudaFree(recurring)); }
}

// A block freed while a kernel on a non-blocking stream still has to read it
// (the first stream the program makes, so the first the shim follows),
// allocated again 20 ms later and written from another non-blocking stream.
// Natively cudaFree waits for the kernel. Under device ordering the free is
// fenced behind that stream (64 MiB: its queue is issued at once), so the
// block comes back only after the kernel; the kernel must read its own data.
// Under stream ordering, the control, the block comes back at once.
void freed_while_stream_busy()
{
  cudaStream_t busy = nullptr;
  cudaStream_t other = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  slow_read const read = fill_then_read_slowly(busy);
  CUDA_OK(cudaFree(read.block));
  bool const busy_at_free = cudaStreamQuery(busy) == cudaErrorNotReady;  // else this proves nothing
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  unsigned* second = nullptr;
  CUDA_OK(cudaMalloc(&second, slow_read::bytes));
  cudaEvent_t filled = nullptr;
  CUDA_OK(cudaEventCreateWithFlags(&filled, cudaEventDisableTiming));
  fill_kernel<<<256, 256, 0, other>>>(second, slow_read::n, 9);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaEventRecord(filled, other));
  bool filled_beside = false;  // the other stream's fill ended while the busy stream still ran
  for (auto const start = std::chrono::steady_clock::now(); seconds_since(start) < 1.0;) {
    if (cudaEventQuery(filled) == cudaSuccess) {
      filled_beside = cudaStreamQuery(busy) == cudaErrorNotReady;
      break;
    }
  }
  CUDA_OK(cudaDeviceSynchronize());
  bool const own_data = read.read_its_own_data();
  std::printf("busy_stream: the stream %s busy at the free; the second allocation is %s block, filled %s; the "
              "kernel on the busy stream read %s\n",
              busy_at_free ? "was" : "WAS NOT", second == read.block ? "the same" : "another",
              filled_beside ? "beside the busy stream" : "after it", own_data ? "its own data" : "OTHER DATA");
  if (expect_pool()) { CHECK(busy_at_free); }
  CUDA_OK(cudaEventDestroy(filled));
  CHECK(own_data);
  CUDA_OK(cudaStreamDestroy(busy));
  CUDA_OK(cudaStreamDestroy(other));
  CUDA_OK(cudaFree(second));
  CUDA_OK(cudaFree(read.sum));
}

// A driver function as the program's runtime hands it out (through the
// shim's lookups when it is loaded).
template <class F>
F driver_function(char const* name, int version)
{
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    return nullptr;
  }
  return reinterpret_cast<F>(fn);
}

// A block freed while a kernel in a context the program made (cuCtxCreate)
// still has to read it on that context's legacy stream, allocated again
// 20 ms later in the primary context and written there. No fence reaches
// that context's legacy stream: the shim waits for the context on the host,
// and the kernel must read its own data. (Natively the free does not wait
// for another context's work: the kernel faults, cudaErrorIllegalAddress.)
void freed_while_own_context_busy()
{
  using create_fn = CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice);
  using pop_fn = CUresult (*)(CUcontext*);
  using push_fn = CUresult (*)(CUcontext);
  using destroy_fn = CUresult (*)(CUcontext);
  auto const create = driver_function<create_fn>("cuCtxCreate", 12050);
  auto const pop = driver_function<pop_fn>("cuCtxPopCurrent", 4000);
  auto const push = driver_function<push_fn>("cuCtxPushCurrent", 4000);
  auto const destroy = driver_function<destroy_fn>("cuCtxDestroy", 4000);
  if (create == nullptr || pop == nullptr || push == nullptr || destroy == nullptr) {
    std::printf("FAIL: the runtime did not hand out cuCtxCreate, cuCtxPopCurrent, cuCtxPushCurrent, cuCtxDestroy\n");
    ++failures;
    return;
  }
  unsigned* scratch = nullptr;
  CUDA_OK(cudaMalloc(&scratch, sizeof *scratch));
  slow_read const read = allocate_slow_read();  // in the primary context, the pool's
  CUcontext own = nullptr;
  if (create(&own, nullptr, 0, 0) != CUDA_SUCCESS) {  // current from now on
    std::printf("FAIL: cuCtxCreate\n");
    ++failures;
    return;
  }
  read_slowly(read, nullptr, scratch);  // in the context made: the runtime works in the current one
  cudaEvent_t read_done = nullptr;
  CUDA_OK(cudaEventCreateWithFlags(&read_done, cudaEventDisableTiming));
  CUDA_OK(cudaEventRecord(read_done, nullptr));
  CUcontext popped = nullptr;
  CHECK(pop(&popped) == CUDA_SUCCESS && popped == own);                      // the primary context again
  bool const busy_at_free = cudaEventQuery(read_done) == cudaErrorNotReady;  // else this proves nothing
  auto const freeing = std::chrono::steady_clock::now();
  CUDA_OK(cudaFree(read.block));
  double const free_took = seconds_since(freeing);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  unsigned* second = nullptr;
  CUDA_OK(cudaMalloc(&second, slow_read::bytes));
  fill_kernel<<<256, 256>>>(second, slow_read::n, 9);
  CUDA_OK(cudaGetLastError());
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaEventSynchronize(read_done));
  bool const own_data = read.read_its_own_data();
  std::printf("own_context: the context's kernel %s busy at the free, which took %.3f s; the second allocation is %s "
              "block; the kernel read %s\n",
              busy_at_free ? "was" : "WAS NOT", free_took, second == read.block ? "the same" : "another",
              own_data ? "its own data" : "OTHER DATA");
  CHECK(busy_at_free);
  CHECK(own_data);
  CUDA_OK(cudaEventDestroy(read_done));
  CHECK(push(own) == CUDA_SUCCESS && destroy(own) == CUDA_SUCCESS);
  CUDA_OK(cudaFree(second));
  CUDA_OK(cudaFree(scratch));
  CUDA_OK(cudaFree(read.sum));
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc != 2) {
    std::fprintf(stderr, "usage: shim_gpu_probe first-call|kernels|attributes|oom|threads|second-device|every-device|"
                         "free-backlog|late-stream|idle-stream|busy-stream|own-context|destroyed-stream\n");
    return 2;
  }
  std::string const check = argv[1];
  int status = 0;
  if (check == "first-call") {
    status = first_call_is_malloc();  // touches nothing of CUDA before its cudaMalloc
  } else {
    int count = 0;
    cudaError_t const e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
      std::printf("SKIP: no CUDA device or driver on this machine (cudaGetDeviceCount: %s)\n", cudaGetErrorName(e));
      return 77;
    }
  }
  if (check == "first-call") {
  } else if (check == "kernels") {
    kernels();
  } else if (check == "attributes") {
    pool_attributes();
  } else if (check == "oom") {
    out_of_memory();
  } else if (check == "threads") {
    threads();
  } else if (check == "second-device") {
    status = second_device();
  } else if (check == "every-device") {
    status = every_device();
  } else if (check == "free-backlog") {
    free_backlog();
  } else if (check == "late-stream") {
    freed_in_order_then_non_blocking(false);
  } else if (check == "idle-stream") {
    freed_in_order_then_non_blocking(true);
  } else if (check == "busy-stream") {
    freed_while_stream_busy();
  } else if (check == "own-context") {
    freed_while_own_context_busy();
  } else if (check == "destroyed-stream") {
    destroyed_stream();
  } else {
    std::fprintf(stderr, "unknown check %s\n", check.c_str());
    return 2;
  }
  if (status != 0) { return status; }
  std::printf("%s: %s\n", check.c_str(), failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
