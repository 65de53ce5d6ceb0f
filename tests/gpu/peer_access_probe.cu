// Peer access between two devices with cudaMalloc memory. Natively,
// cudaDeviceEnablePeerAccess(peer) makes every cudaMalloc block of the peer
// accessible from the current device, blocks made before or after the call;
// pool memory needs cudaMemPoolSetAccess instead, so the shim makes its pools
// follow the program's peer access. Subcommands:
//
//   peer-access         a on device 0 before device 1 enables access to device 0,
//                       b after it; a device-1 kernel checks both and writes them;
//                       cudaMemcpyPeer both ways with a device-1 buffer, before and
//                       after cudaDeviceDisablePeerAccess (no kernel touches the
//                       peer's memory without access: it would fault); enabling and
//                       disabling twice (the already-enabled / not-enabled errors).
//   pools-after-enable  access enabled both ways before either device's first
//                       cudaMalloc (so the shim makes the pools after the enable),
//                       then kernels on each device check and write the other's block.
//   pool-access         (the shim only) cudaMemPoolGetAccess on the pools behind the
//                       pointers as access is enabled, disabled and enabled again,
//                       for a pool made before and one made after the enable.
//
// The first two print deterministic lines only (CUDA error names, data checks),
// so tests/shim/compare_runs.cmake compares them without and with the shim
// (gpu.same_as_native.peer_access*). Each run ends with
// "peer_access_probe: passed" (exit 0) or "peer_access_probe: FAILED" (exit 1);
// "SKIP: ..." (exit 0) with fewer than two devices or without peer access
// between devices 0 and 1; usage errors exit 2. Every run has 120 s (alarm).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "byte_literals.hpp"
#include "probe_common.cuh"

namespace {

using byte_literals::MiB;
constexpr std::size_t bytes = 4 * MiB;
constexpr std::size_t words = bytes / sizeof(unsigned);

int failures = 0;

char const* name(cudaError_t e) { return cudaGetErrorName(e); }

// Prints "what: <error name>"; anything but `expected` is a failure.
bool call(std::string const& what, cudaError_t e, cudaError_t expected = cudaSuccess)
{
  std::printf("%s: %s\n", what.c_str(), name(e));
  if (e != expected) {
    std::printf("  (expected %s)\n", name(expected));
    ++failures;
  }
  return e == cudaSuccess;
}

void on(int device)
{
  cudaError_t const e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    std::printf("cudaSetDevice(%d): %s\n", device, name(e));
    ++failures;
  }
}

void last_error() { call("cudaGetLastError", cudaGetLastError()); }

// After an expected error: whatever CUDA's last-error state holds is printed
// (and cleared), not judged; the comparison with the native run judges it.
void show_last_error() { std::printf("cudaGetLastError: %s\n", name(cudaGetLastError())); }

__device__ unsigned long long bad_words;  // one per device

// Counts the words that differ from pattern(i, expect), then writes pattern(i, write).
__global__ void check_and_write_kernel(unsigned* data, std::size_t n, unsigned expect, unsigned write)
{
  unsigned long long bad = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    bad += data[i] != pattern(i, expect) ? 1 : 0;
    data[i] = pattern(i, write);
  }
  if (bad != 0) { atomicAdd(&bad_words, bad); }
}

// A kernel on the current device writes the buffer (which may be the peer's).
void fill(std::string const& label, void* p, unsigned seed)
{
  fill_kernel<<<64, 256>>>(static_cast<unsigned*>(p), words, seed);
  cudaError_t const launched = cudaGetLastError();
  if (launched != cudaSuccess) {
    call("fill " + label + ": kernel launch", launched);
    return;
  }
  call("fill " + label + ": cudaDeviceSynchronize", cudaDeviceSynchronize());
}

// A kernel on the current device reads the buffer, expecting pattern `expect`,
// and writes pattern `write`: "<label>: data ok" or how many words were wrong.
void check_and_write(std::string const& label, void* p, unsigned expect, unsigned write)
{
  unsigned long long const zero = 0;
  if (!call(label + ": cudaMemcpyToSymbol", cudaMemcpyToSymbol(bad_words, &zero, sizeof(zero)))) { return; }
  check_and_write_kernel<<<64, 256>>>(static_cast<unsigned*>(p), words, expect, write);
  cudaError_t const launched = cudaGetLastError();
  if (launched != cudaSuccess) {
    call(label + ": kernel launch", launched);
    return;
  }
  if (!call(label + ": cudaDeviceSynchronize", cudaDeviceSynchronize())) { return; }
  unsigned long long bad = 0;
  if (!call(label + ": cudaMemcpyFromSymbol", cudaMemcpyFromSymbol(&bad, bad_words, sizeof(bad)))) { return; }
  if (bad == 0) {
    std::printf("%s: data ok\n", label.c_str());
  } else {
    std::printf("%s: %llu words wrong\n", label.c_str(), bad);
    ++failures;
  }
}

// The host reads the buffer back (cudaMemcpy, current device's legacy stream).
void host_check(std::string const& label, void const* p, unsigned seed)
{
  std::vector<unsigned> host(words);
  cudaError_t const e = cudaMemcpy(host.data(), p, bytes, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    call(label + ": cudaMemcpy", e);
    return;
  }
  std::size_t bad = 0;
  for (std::size_t i = 0; i < words; ++i) {
    bad += host[i] != pattern(i, seed) ? 1 : 0;
  }
  if (bad == 0) {
    std::printf("%s: data ok\n", label.c_str());
  } else {
    std::printf("%s: %zu words wrong\n", label.c_str(), bad);
    ++failures;
  }
}

void* malloc_on(int device, std::string const& label)
{
  on(device);
  void* p = nullptr;
  if (!call("device " + std::to_string(device) + ": cudaMalloc(" + label + ", 4 MiB)", cudaMalloc(&p, bytes))) {
    return nullptr;
  }
  return p;
}

void free_on(int device, std::string const& label, void* p)
{
  if (p == nullptr) { return; }
  on(device);
  call("device " + std::to_string(device) + ": cudaFree(" + label + ")", cudaFree(p));
}

void enable(int device, int peer, cudaError_t expected = cudaSuccess)
{
  on(device);
  call("device " + std::to_string(device) + ": cudaDeviceEnablePeerAccess(" + std::to_string(peer) + ")",
       cudaDeviceEnablePeerAccess(peer, 0), expected);
}

void disable(int device, int peer, cudaError_t expected = cudaSuccess)
{
  on(device);
  call("device " + std::to_string(device) + ": cudaDeviceDisablePeerAccess(" + std::to_string(peer) + ")",
       cudaDeviceDisablePeerAccess(peer), expected);
}

// cudaMemcpyPeer, then the destination checked from the host.
void copy_peer(std::string const& label, void* dst, int dst_device, void const* src, int src_device, unsigned seed)
{
  if (!call(label + ": cudaMemcpyPeer", cudaMemcpyPeer(dst, dst_device, src, src_device, bytes))) { return; }
  on(dst_device);
  if (!call(label + ": cudaDeviceSynchronize", cudaDeviceSynchronize())) { return; }
  host_check(label, dst, seed);
}

void finish_devices()
{
  for (int device : {0, 1}) {
    on(device);
    call("device " + std::to_string(device) + ": cudaDeviceSynchronize", cudaDeviceSynchronize());
  }
  last_error();
}

// ---- peer-access ------------------------------------------------------------

void peer_access()
{
  void* a = malloc_on(0, "a");  // before device 1 enables access to device 0
  if (a != nullptr) { fill("a on device 0", a, 1); }
  enable(1, 0);
  void* b = malloc_on(0, "b");  // after
  if (b != nullptr) { fill("b on device 0", b, 2); }

  on(1);
  if (a != nullptr) { check_and_write("device 1 reads and writes a (allocated before the enable)", a, 1, 11); }
  if (b != nullptr) { check_and_write("device 1 reads and writes b (allocated after the enable)", b, 2, 12); }
  on(0);
  if (a != nullptr) { host_check("a", a, 11); }
  if (b != nullptr) { host_check("b", b, 12); }

  void* c = malloc_on(1, "c");
  if (c != nullptr && a != nullptr) {
    copy_peer("c <- a (device 0 to 1)", c, 1, a, 0, 11);
    on(1);
    fill("c on device 1", c, 21);
    copy_peer("a <- c (device 1 to 0)", a, 0, c, 1, 21);
  }

  disable(1, 0);
  // No kernel of device 1 touches device 0's memory from here on (it would fault).
  if (c != nullptr && b != nullptr) {
    copy_peer("c <- b without peer access", c, 1, b, 0, 12);
    on(1);
    fill("c on device 1", c, 22);
    copy_peer("b <- c without peer access", b, 0, c, 1, 22);
  }

  enable(1, 0);  // again: a works from device 1 once more
  if (a != nullptr) {
    on(1);
    check_and_write("device 1 reads and writes a after enabling again", a, 21, 31);
  }
  enable(1, 0, cudaErrorPeerAccessAlreadyEnabled);
  show_last_error();
  disable(1, 0);
  disable(1, 0, cudaErrorPeerAccessNotEnabled);
  show_last_error();
  if (a != nullptr) {
    on(0);
    host_check("a", a, 31);
  }

  free_on(0, "a", a);
  free_on(0, "b", b);
  free_on(1, "c", c);
  finish_devices();
}

// ---- pools-after-enable --------------------------------------------------------

void pools_after_enable()
{
  enable(1, 0);  // before device 0's first cudaMalloc
  enable(0, 1);  // before device 1's first cudaMalloc
  void* a = malloc_on(0, "a");
  if (a != nullptr) { fill("a on device 0", a, 1); }
  void* c = malloc_on(1, "c");
  if (c != nullptr) { fill("c on device 1", c, 2); }

  on(1);
  if (a != nullptr) { check_and_write("device 1 reads and writes a", a, 1, 11); }
  on(0);
  if (c != nullptr) { check_and_write("device 0 reads and writes c", c, 2, 12); }
  on(0);
  if (a != nullptr) { host_check("a", a, 11); }
  on(1);
  if (c != nullptr) { host_check("c", c, 12); }

  disable(1, 0);
  disable(0, 1);
  free_on(0, "a", a);
  free_on(1, "c", c);
  finish_devices();
}

// ---- pool-access (the shim only) ---------------------------------------------------

void expect_access(std::string const& label, cudaMemPool_t pool, int from, cudaMemAccessFlags expected)
{
  cudaMemLocation location{};
  location.type = cudaMemLocationTypeDevice;
  location.id = from;
  cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
  cudaError_t const e = cudaMemPoolGetAccess(&flags, pool, &location);
  if (e != cudaSuccess) {
    call(label + ": cudaMemPoolGetAccess", e);
    return;
  }
  std::printf("%s: access from device %d: %s\n", label.c_str(), from, access_name(flags));
  if (flags != expected) {
    std::printf("  (expected %s)\n", access_name(expected));
    ++failures;
  }
}

void pool_access()
{
  cudaMemAccessFlags const none = cudaMemAccessFlagsProtNone;
  cudaMemAccessFlags const rw = cudaMemAccessFlagsProtReadWrite;
  void* c = malloc_on(1, "c");  // device 1's pool exists before device 0 enables access to it
  cudaMemPool_t const pool1 = c != nullptr ? pool_of(c) : nullptr;
  if (pool1 == nullptr) {
    std::printf("no pool behind c: this check needs the shim\n");
    ++failures;
    free_on(1, "c", c);
    return;
  }
  expect_access("device 1's pool, peer access not enabled", pool1, 0, none);
  enable(0, 1);
  expect_access("device 1's pool, made before device 0 enabled access", pool1, 0, rw);

  enable(1, 0);  // before device 0 has a pool
  void* a = malloc_on(0, "a");
  cudaMemPool_t const pool0 = a != nullptr ? pool_of(a) : nullptr;
  if (pool0 == nullptr) {
    std::printf("no pool behind a\n");
    ++failures;
  } else {
    expect_access("device 0's pool, made after device 1 enabled access", pool0, 1, rw);
  }

  disable(1, 0);
  if (pool0 != nullptr) { expect_access("device 0's pool, device 1 disabled access", pool0, 1, none); }
  disable(0, 1);
  expect_access("device 1's pool, device 0 disabled access", pool1, 0, none);

  void* b = malloc_on(0, "b");
  if (b != nullptr && pool0 != nullptr) {
    std::printf("b is from device 0's pool too: %s\n", pool_of(b) == pool0 ? "yes" : "no");
    failures += pool_of(b) == pool0 ? 0 : 1;
  }
  enable(1, 0);
  if (pool0 != nullptr) { expect_access("device 0's pool, device 1 enabled access again", pool0, 1, rw); }
  disable(1, 0);
  if (pool0 != nullptr) { expect_access("device 0's pool, device 1 disabled access again", pool0, 1, none); }

  free_on(0, "a", a);
  free_on(0, "b", b);
  free_on(1, "c", c);
  finish_devices();
}

[[noreturn]] void usage()
{
  std::fprintf(stderr, "usage: peer_access_probe peer-access|pools-after-enable|pool-access\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc != 2) { usage(); }
  std::string const cmd = argv[1];
  if (cmd != "peer-access" && cmd != "pools-after-enable" && cmd != "pool-access") { usage(); }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a crash in the same order
  alarm(120);

  int count = 0;
  cudaError_t const counted = cudaGetDeviceCount(&count);
  if (counted != cudaSuccess || count < 2) {
    std::printf("SKIP: needs two CUDA devices (found %d; cudaGetDeviceCount: %s)\n", counted == cudaSuccess ? count : 0,
                name(counted));
    return 0;
  }
  std::printf("devices: %d\n", count);
  int one_to_zero = 0;
  int zero_to_one = 0;
  call("cudaDeviceCanAccessPeer(1 -> 0)", cudaDeviceCanAccessPeer(&one_to_zero, 1, 0));
  call("cudaDeviceCanAccessPeer(0 -> 1)", cudaDeviceCanAccessPeer(&zero_to_one, 0, 1));
  std::printf("device 1 can access device 0: %s; device 0 can access device 1: %s\n", one_to_zero ? "yes" : "no",
              zero_to_one ? "yes" : "no");
  if (!one_to_zero || !zero_to_one) {
    std::printf("SKIP: devices 0 and 1 cannot access each other's memory (cudaDeviceCanAccessPeer)\n");
    return 0;
  }
  if (cmd == "peer-access") {
    peer_access();
  } else if (cmd == "pools-after-enable") {
    pools_after_enable();
  } else {
    pool_access();
  }
  std::printf("peer_access_probe: %s\n", failures == 0 ? "passed" : "FAILED");
  return failures == 0 ? 0 : 1;
}
