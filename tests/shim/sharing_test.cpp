// A good neighbour on a shared GPU (README, "Sharing a GPU"): the pool starts
// empty, memory info tells the truth, and memory the program has freed goes
// back to the device when the process is idle or the device runs short.
// libasyncshim.so preloaded into a program of the CUDA test double; each
// suite runs in an environment of its own, stated in tests/shim/CMakeLists.txt
// (sharing_case) and checked at the start of each test
// (suite_environment.hpp). Neighbours are processes of the double run without
// the shim (memory_neighbour), sharing the devices' memory through
// CUDA_DOUBLE_SHARED_MEMORY.
#include "cuda_double.hpp"
#include "shim_test_support.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using namespace shim_test;
using namespace std::chrono_literals;

constexpr std::size_t memory = 8 * GiB;  // the double's default per device

// What the program is told is free on its current device, by each way a
// program reaches memory info; every way must tell the same.
std::size_t reported_free()
{
  std::size_t free = 0;
  std::size_t total = 0;
  EXPECT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(total, memory);

  std::size_t driver_free = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&driver_free, &total), CUDA_SUCCESS);  // as a program linked with -lcuda
  EXPECT_EQ(driver_free, free);

  void* libcuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  auto const by_dlsym = reinterpret_cast<decltype(&cuMemGetInfo_v2)>(dlsym(libcuda, "cuMemGetInfo_v2"));
  std::size_t dlsym_free = 0;
  EXPECT_EQ(by_dlsym(&dlsym_free, &total), CUDA_SUCCESS);
  EXPECT_EQ(dlsym_free, free);

  void* fetched = nullptr;
  CUdriverProcAddressQueryResult status{};
  EXPECT_EQ(cuGetProcAddress_v2("cuMemGetInfo", &fetched, 12000, 0, &status), CUDA_SUCCESS);  // a static runtime's way
  std::size_t fetched_free = 0;
  EXPECT_EQ(reinterpret_cast<decltype(&cuMemGetInfo_v2)>(fetched)(&fetched_free, &total), CUDA_SUCCESS);
  EXPECT_EQ(fetched_free, free);
  return free;
}

// Allocates and frees a block of `bytes`: the shim's pool then holds them
// unused (the free perhaps still queued). The pool, or null on failure.
cudaMemPool_t pool_after_allocating_and_freeing(std::size_t bytes)
{
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) { return nullptr; }
  cudaMemPool_t const shim_pool = cuda_double_pointer_pool(p);
  return cudaFree(p) == cudaSuccess ? shim_pool : nullptr;
}

// Whether a thread of this process is named `name` (/proc/self/task/*/comm).
bool has_thread(char const* name)
{
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) { return false; }
  bool found = false;
  while (dirent const* task = readdir(tasks)) {
    if (task->d_name[0] == '.') { continue; }
    std::ifstream comm{std::string{"/proc/self/task/"} + task->d_name + "/comm"};
    std::string line;
    found = found || (std::getline(comm, line) && line == name);
  }
  closedir(tasks);
  return found;
}

// ---- ShimMemoryInfo: memory info with the shim's defaults, two devices

using ShimMemoryInfo = ShimTest;

TEST_F(ShimMemoryInfo, FreeMemoryIsWhatTheProgramCouldStillAllocate)
{
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(reported_free(), memory);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 * MiB), cudaSuccess);
  ASSERT_EQ(cuda_double_pointer_kind(p), pool);
  // The pool reserved a whole 2 MiB step: the other half is still the program's to allocate.
  EXPECT_EQ(pool_attribute(p, cudaMemPoolAttrReservedMemCurrent), 2 * MiB);
  EXPECT_EQ(reported_free(), memory - 1 * MiB);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(reported_free(), memory);  // queued (device ordering): it comes back
  issue_queued_frees();
  EXPECT_EQ(reported_free(), memory);
}

TEST_F(ShimMemoryInfo, TheProgramsOwnPoolsAreNotTheShims)
{
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t own = nullptr;
  ASSERT_EQ(cudaMemPoolCreate(&own, &props), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&p, 64 * MiB, own, cudaStreamLegacy), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(p, cudaStreamLegacy), cudaSuccess);
  // The program's pool keeps its 64 MiB: cudaMalloc cannot have them, as natively.
  EXPECT_EQ(reported_free(), memory - 64 * MiB);
  ASSERT_EQ(cudaMemPoolDestroy(own), cudaSuccess);
  EXPECT_EQ(reported_free(), memory);
}

TEST_F(ShimMemoryInfo, ADeviceWithoutAShimPoolGetsTheNativeAnswer)
{
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 100 * MiB), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  issue_queued_frees();  // device 0's pool holds 100 MiB unused
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  void* native_block = nullptr;
  ASSERT_EQ(native_malloc(&native_block, 1 * GiB), cudaSuccess);
  EXPECT_EQ(reported_free(), memory - 1 * GiB);
  ASSERT_EQ(cudaFree(native_block), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

TEST_F(ShimMemoryInfo, BadArgumentsGetTheNativeErrors)
{
  std::size_t value = 0;
  EXPECT_EQ(cudaMemGetInfo(nullptr, &value), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cuMemGetInfo_v2(&value, nullptr), CUDA_ERROR_INVALID_VALUE);
}

// ---- ShimMemoryInfoNative: observe mode, and the shim disabled: the native
// answer, no thread

using ShimMemoryInfoNative = ShimTest;

TEST_F(ShimMemoryInfoNative, TheAnswerIsTheDriversAndNoThreadStarts)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 * MiB), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), native);
  EXPECT_EQ(reported_free(), memory - 1 * MiB);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(reported_free(), memory);
  EXPECT_FALSE(has_thread("asyncshim-idle"));
}

// ---- ShimHalfFree: a pool primed with half the free memory, RMM's resource
// default, one setting away

using ShimHalfFree = ShimTest;

TEST_F(ShimHalfFree, PoolIsPrimedWithHalfOfTheFreeMemory)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1), cudaSuccess);
  EXPECT_EQ(pool_attribute(p, cudaMemPoolAttrReservedMemCurrent), memory / 2);
  EXPECT_EQ(reported_free(), memory - 1);  // primed memory is the program's to allocate
  ASSERT_EQ(cudaFree(p), cudaSuccess);
}

// ---- ShimInitialTooLarge: an initial pool size larger than the device

using ShimInitialTooLarge = ShimTest;

TEST_F(ShimInitialTooLarge, ThePoolStartsEmptyAndSaysWhy)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_EQ(cuda_double_pointer_kind(p), pool);  // a pool all the same, not the native allocator
  EXPECT_EQ(pool_attribute(p, cudaMemPoolAttrReservedMemCurrent), 2 * MiB);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // the failed reservation left no error behind
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  std::string const log = log_text();
  EXPECT_NE(log.find("warning: device 0: cannot reserve the initial pool of 16.0 GiB, from "
                     "ASYNCSHIM_INITIAL_POOL_SIZE=16GiB (CUDA_ERROR_OUT_OF_MEMORY (2: out of memory); the device has "
                     "8.0 GiB free): the pool starts empty and grows as the program allocates. Set "
                     "ASYNCSHIM_INITIAL_POOL_SIZE below the free memory, or leave it unset to reserve nothing"),
            std::string::npos)
    << log;
  EXPECT_EQ(log.find("cannot create"), std::string::npos) << log;
}

// ---- ShimIdleRelease: a short idle release period

using ShimIdleRelease = ShimTest;

TEST_F(ShimIdleRelease, TheThreadStartsWithTheFirstPool)
{
  std::size_t free = 0;
  std::size_t total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_FALSE(has_thread("asyncshim-idle"));
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
  EXPECT_TRUE(has_thread("asyncshim-idle"));
  ASSERT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(ShimIdleRelease, AnIdleProcessGivesItsUnusedMemoryBack)
{
  cudaMemPool_t const shim_pool = pool_after_allocating_and_freeing(256 * MiB);
  ASSERT_NE(shim_pool, nullptr);
  issue_queued_frees();
  EXPECT_GE(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 256 * MiB);
  std::this_thread::sleep_for(500ms);  // several idle periods
  EXPECT_EQ(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_EQ(reported_free(), memory);  // the same truth before and after
  std::string const log = log_text();
  EXPECT_NE(log.find("info: device 0: no allocation or free for 100ms: gave "), std::string::npos) << log;
  EXPECT_NE(log.find(" of unused asyncshim pool memory back"), std::string::npos) << log;
}

TEST_F(ShimIdleRelease, ABusyProcessKeepsIt)
{
  cudaMemPool_t const shim_pool = pool_after_allocating_and_freeing(256 * MiB);
  ASSERT_NE(shim_pool, nullptr);
  issue_queued_frees();
  auto const until = std::chrono::steady_clock::now() + 600ms;
  while (std::chrono::steady_clock::now() < until) {
    void* small = nullptr;
    ASSERT_EQ(cudaMalloc(&small, 1000), cudaSuccess);
    ASSERT_EQ(cudaFree(small), cudaSuccess);
    EXPECT_GE(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 256 * MiB);
    std::this_thread::sleep_for(10ms);
  }
  std::this_thread::sleep_for(500ms);
  EXPECT_LT(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 256 * MiB);
}

// ---- ShimIdleReleaseKeeps: idle release with an initial pool size: what the
// user asked for stays

using ShimIdleReleaseKeeps = ShimTest;

TEST_F(ShimIdleReleaseKeeps, TheInitialPoolSizeStaysReserved)
{
  cudaMemPool_t const shim_pool = pool_after_allocating_and_freeing(256 * MiB);
  ASSERT_NE(shim_pool, nullptr);
  std::this_thread::sleep_for(500ms);
  EXPECT_EQ(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 64 * MiB);
}

// ---- ShimIdleReleaseOff: idle release off: no thread, the pool keeps what it has

using ShimIdleReleaseOff = ShimTest;

TEST_F(ShimIdleReleaseOff, NoThreadAndNothingGivenBack)
{
  cudaMemPool_t const shim_pool = pool_after_allocating_and_freeing(256 * MiB);
  ASSERT_NE(shim_pool, nullptr);
  issue_queued_frees();
  std::this_thread::sleep_for(300ms);
  EXPECT_FALSE(has_thread("asyncshim-idle"));
  EXPECT_GE(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 256 * MiB);
}

// ---- neighbours sharing the devices' memory: ShimNeighbours (idle release
// off: only a device that runs short gets memory back) and ShimNeighboursIdle
// (idle release on)

// A neighbour process of the double without the shim.
class neighbour {
 public:
  // Runs `memory_neighbour <what> <bytes>`; for "hold", returns once it holds them.
  neighbour(char const* what, std::size_t bytes)
  {
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) { env_text.emplace_back(*e); }
    }
    std::vector<char*> envp;
    for (auto& s : env_text) {
      envp.push_back(s.data());
    }
    envp.push_back(nullptr);
    std::string const program = std::getenv("MEMORY_NEIGHBOUR");
    std::string const size = std::to_string(bytes);
    char* argv[] = {const_cast<char*>(program.c_str()), const_cast<char*>(what), const_cast<char*>(size.c_str()),
                    nullptr};
    int out[2];
    int in[2];
    if (pipe(out) != 0 || pipe(in) != 0) { return; }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    if (posix_spawn(&pid_, program.c_str(), &actions, nullptr, argv, envp.data()) != 0) { pid_ = -1; }
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(in[0]);
    output_ = fdopen(out[0], "r");
    input_ = in[1];
    char line[128] = {};
    if (output_ != nullptr && std::fgets(line, sizeof line, output_) != nullptr) { first_line_ = line; }
  }
  ~neighbour() { (void)finish(); }
  neighbour(neighbour const&) = delete;
  neighbour& operator=(neighbour const&) = delete;

  [[nodiscard]] std::string const& first_line() const { return first_line_; }
  [[nodiscard]] pid_t pid() const { return pid_; }
  // Lets a holding neighbour go; its exit status.
  int finish()
  {
    if (input_ >= 0) {
      close(input_);
      input_ = -1;
    }
    if (output_ != nullptr) {
      std::fclose(output_);
      output_ = nullptr;
    }
    if (pid_ <= 0) { return -1; }
    int status = 0;
    (void)waitpid(pid_, &status, 0);
    pid_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_ = -1;
  FILE* output_ = nullptr;
  int input_ = -1;
  std::string first_line_;
};

// Whether a native process could allocate `bytes` now.
bool neighbour_can_allocate(std::size_t bytes)
{
  neighbour n{"allocate", bytes};
  bool const allocated = n.first_line() == "allocated\n";
  return n.finish() == 0 && allocated;
}

class ShimNeighbours : public ShimTest {
 protected:
  void SetUp() override
  {
    ShimTest::SetUp();
    ASSERT_NE(std::getenv("MEMORY_NEIGHBOUR"), nullptr) << "set MEMORY_NEIGHBOUR to the memory_neighbour program";
    ASSERT_NE(std::getenv("CUDA_DOUBLE_SHARED_MEMORY"), nullptr) << "set CUDA_DOUBLE_SHARED_MEMORY to a file";
  }
};

TEST_F(ShimNeighbours, AnIdleNeighbourLeavesNearlyEverything)
{
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 1 * MiB), cudaSuccess);
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  // Natively the whole device but that 1 MiB would be free; the pool holds one 2 MiB step.
  EXPECT_TRUE(neighbour_can_allocate(memory - 4 * MiB));
}

TEST_F(ShimNeighbours, TwoProcessesTakeTurnsAtMostOfTheDevice)
{
  for (int round = 0; round < 3; ++round) {
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 6 * GiB), cudaSuccess) << "round " << round;
    cudaMemPool_t const shim_pool = cuda_double_pointer_pool(p);
    ASSERT_EQ(cudaFree(p), cudaSuccess);
    // The free left the device short (2 GiB free, 6 GiB unused in the
    // pool): the pool gave it back before cudaFree returned.
    EXPECT_LT(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 64 * MiB) << "round " << round;
    EXPECT_TRUE(neighbour_can_allocate(6 * GiB)) << "round " << round;
  }
  EXPECT_NE(log_text().find("info: device 0: the device had 2.0 GiB free while the asyncshim pool held 6.0 GiB unused: "
                            "gave 6.0 GiB back"),
            std::string::npos)
    << log_text();
}

TEST_F(ShimNeighbours, AShortDeviceGetsManySmallFreesBackAtOnce)
{
  neighbour holder{"hold", 3 * GiB};
  ASSERT_EQ(holder.first_line(), "holding\n");
  std::vector<void*> blocks(128);
  for (void*& p : blocks) {
    ASSERT_EQ(cudaMalloc(&p, 32 * MiB), cudaSuccess);
  }  // 4 GiB
  cudaMemPool_t const shim_pool = cuda_double_pointer_pool(blocks.front());
  for (void* p : blocks) {
    ASSERT_EQ(cudaFree(p), cudaSuccess);
  }
  // Natively 5 GiB would be free now. Each time the pool held more unused
  // memory than the device had free, it gave it back: without that, a
  // neighbour would find 1 GiB.
  EXPECT_LT(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 4 * GiB);
  EXPECT_TRUE(neighbour_can_allocate(2 * GiB));
  EXPECT_EQ(holder.finish(), 0);
}

using ShimOutOfMemoryNeighbours = ShimNeighbours;

TEST_F(ShimOutOfMemoryNeighbours, TheWarningNamesTheProcessesUsingTheDevice)
{
  neighbour holder{"hold", 5 * GiB};
  ASSERT_EQ(holder.first_line(), "holding\n");
  void* mine = nullptr;
  ASSERT_EQ(cudaMalloc(&mine, 1 * GiB), cudaSuccess);
  void* beyond = nullptr;
  EXPECT_EQ(cudaMalloc(&beyond, 4 * GiB), cudaErrorMemoryAllocation);
  (void)cudaGetLastError();
  std::string const text = log_text();
  // Through the driver's NVML (the double): the holder first, the larger.
  std::size_t const heading = text.find("  the processes using device 0 (as the driver's NVML library sees them):\n");
  ASSERT_NE(heading, std::string::npos) << text;
  std::size_t const other =
    text.find("    pid " + std::to_string(holder.pid()) + " (memory_neighbou): 5.0 GiB\n", heading);
  std::size_t const self = text.find("    pid " + std::to_string(getpid()) + " (this process): 1.0 GiB\n", heading);
  EXPECT_NE(other, std::string::npos) << text;
  EXPECT_LT(other, self) << text;
  EXPECT_EQ(cudaFree(mine), cudaSuccess);
  EXPECT_EQ(holder.finish(), 0);
}

using ShimNeighboursIdle = ShimNeighbours;

TEST_F(ShimNeighboursIdle, WhatAnIdleProcessHoldsGoesBackWithinAFewPeriods)
{
  std::vector<void*> blocks(64);
  for (void*& p : blocks) {
    ASSERT_EQ(cudaMalloc(&p, 32 * MiB), cudaSuccess);
  }  // 2 GiB
  cudaMemPool_t const shim_pool = cuda_double_pointer_pool(blocks.front());
  for (void* p : blocks) {
    ASSERT_EQ(cudaFree(p), cudaSuccess);
  }
  // The device is not short (6 GiB free, 2 GiB unused): the pool keeps them while the process is busy...
  EXPECT_GE(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 2 * GiB);
  // ...and gives them back once it has been idle for the period.
  std::this_thread::sleep_for(1000ms);
  EXPECT_EQ(pool_attribute(shim_pool, cudaMemPoolAttrReservedMemCurrent), 0u);
  EXPECT_TRUE(neighbour_can_allocate(memory - 4 * MiB));
}

}  // namespace
