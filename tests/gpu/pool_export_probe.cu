// Sharing the shim's pool memory with another process, and what legacy IPC
// does on it. One subcommand per case (tests/gpu/CMakeLists.txt, gpu.pool_export.*):
//
//   export-import  with ASYNCSHIM_EXPORT_HANDLE_TYPE=posix_file_descriptor: the
//                  parent cudaMallocs 64 MiB and fills it, finds the pool behind
//                  the pointer (cuPointerGetAttribute, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE),
//                  exports the pool as a file descriptor and the block as
//                  cudaMemPoolPtrExportData, and runs itself again (fork + exec of
//                  /proc/self/exe, the descriptor inherited with FD_CLOEXEC cleared)
//                  as `import <fd> <hex of the 64-byte export data>`. The child
//                  imports pool and block, checks the data, overwrites the first
//                  4 KiB, frees its import with cudaFree (CUDA: the imported memory
//                  must be freed in every importing process before the exporter
//                  frees it, with cudaFree or cudaFreeAsync) and exits; the parent
//                  then sees the child's writes and frees. Natively cudaMalloc
//                  memory has no pool: the probe says so and stops (exit 0).
//   fabric         with ASYNCSHIM_EXPORT_HANDLE_TYPE=fabric: cudaMalloc works, the
//                  pool exists, exporting a fabric handle gives cudaSuccess (fabric
//                  set up here) or cudaErrorNotPermitted (no fabric/IMEX set-up).
//   ipc-hint       cudaIpcGetMemHandle on cudaMalloc memory: cudaSuccess natively,
//                  cudaErrorInvalidValue on memory of a pool without an export
//                  handle type (ASYNCSHIM_EXPORT_HANDLE_TYPE=none; the shim logs a hint).
//
// Every successful case ends with "pool_export_probe: passed" (exit 0); a
// failed one with "pool_export_probe: FAILED" (exit 1); "SKIP: ..." (exit 0)
// where there is no device or the device lacks the handle type. Usage errors:
// exit 2. Every run has 120 s (alarm), the child 60 s.
//
// Built against the shared CUDA runtime and linked with libcuda (the pool
// behind a pointer is a driver-level attribute), so the tests start it through
// with_driver.sh.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "byte_literals.hpp"
#include "probe_common.cuh"

namespace {

using byte_literals::MiB;
constexpr std::size_t shared_bytes = 64 * MiB;  // export-import: the shared block
constexpr std::size_t child_bytes = 4096;       // the part the child overwrites
constexpr unsigned parent_seed = 0x5eed0001u;
constexpr unsigned child_seed = 0x5eed0002u;

char const* name(cudaError_t e) { return cudaGetErrorName(e); }

char const* name(CUresult r)
{
  char const* text = nullptr;
  return cuGetErrorName(r, &text) == CUDA_SUCCESS && text != nullptr ? text : "unknown CUresult";
}

void report(std::string const& what, cudaError_t e) { std::printf("%s: %s\n", what.c_str(), name(e)); }

// Words [0, head) must hold pattern(i, head_seed), words [head, n) pattern(i,
// tail_seed); mismatches are counted in bad_words[0] (head) and [1] (tail).
__device__ unsigned long long bad_words[2];

__global__ void check_kernel(unsigned const* data, std::size_t n, std::size_t head, unsigned head_seed,
                             unsigned tail_seed)
{
  unsigned long long bad_head = 0;
  unsigned long long bad_tail = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    if (i < head) {
      bad_head += data[i] != pattern(i, head_seed) ? 1 : 0;
    } else {
      bad_tail += data[i] != pattern(i, tail_seed) ? 1 : 0;
    }
  }
  if (bad_head != 0) { atomicAdd(&bad_words[0], bad_head); }
  if (bad_tail != 0) { atomicAdd(&bad_words[1], bad_tail); }
}

struct bad_count {
  bool ok = false;  // the check itself ran
  unsigned long long head = 0;
  unsigned long long tail = 0;
};

// Counts the words of data that differ from what check_kernel expects, on the
// current device (legacy stream, waited for).
bad_count count_bad_words(std::string const& who, void const* data, std::size_t n, std::size_t head, unsigned head_seed,
                          unsigned tail_seed)
{
  bad_count result;
  unsigned long long const zero[2] = {0, 0};
  cudaError_t e = cudaMemcpyToSymbol(bad_words, zero, sizeof(zero));
  if (e != cudaSuccess) {
    report(who + "cudaMemcpyToSymbol", e);
    return result;
  }
  check_kernel<<<256, 256>>>(static_cast<unsigned const*>(data), n, head, head_seed, tail_seed);
  e = cudaGetLastError();
  if (e != cudaSuccess) {
    report(who + "check kernel launch", e);
    return result;
  }
  unsigned long long counts[2] = {0, 0};
  e = cudaMemcpyFromSymbol(counts, bad_words, sizeof(counts));
  if (e != cudaSuccess) {
    report(who + "cudaMemcpyFromSymbol", e);
    return result;
  }
  result.ok = true;
  result.head = counts[0];
  result.tail = counts[1];
  return result;
}

// The pool behind a device pointer: the driver's answer and the pool (null
// for memory that is not from a pool).
CUmemoryPool pool_of(void* ptr, CUresult* result)
{
  CUmemoryPool pool = nullptr;
  *result = cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, reinterpret_cast<CUdeviceptr>(ptr));
  return *result == CUDA_SUCCESS ? pool : nullptr;
}

// Prints the lookup and returns the pool, or null after printing the native
// story ("no pool: ...").
cudaMemPool_t find_pool(void* ptr, char const* flow)
{
  CUresult r = CUDA_SUCCESS;
  CUmemoryPool const pool = pool_of(ptr, &r);
  std::printf("cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE): %s, %s\n", name(r),
              pool != nullptr ? "a pool" : "no pool");
  if (pool == nullptr) {
    std::printf("no pool: the %s flow needs the shim (natively cudaMalloc memory is not from a pool)\n", flow);
  }
  return reinterpret_cast<cudaMemPool_t>(pool);
}

int finish(bool passed)
{
  std::printf("pool_export_probe: %s\n", passed ? "passed" : "FAILED");
  return passed ? 0 : 1;
}

int supported_handle_types(int device)
{
  int pools = 0;
  int types = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess || pools == 0) {
    return -1;
  }
  if (cudaDeviceGetAttribute(&types, cudaDevAttrMemoryPoolSupportedHandleTypes, device) != cudaSuccess) { return -1; }
  return types;
}

std::string wait_status(pid_t pid)
{
  int status = 0;
  pid_t r = -1;
  do {
    r = waitpid(pid, &status, 0);
  } while (r < 0 && errno == EINTR);
  if (r != pid) { return "waitpid failed"; }
  if (WIFEXITED(status)) { return "exit " + std::to_string(WEXITSTATUS(status)); }
  if (WIFSIGNALED(status)) { return "signal " + std::to_string(WTERMSIG(status)); }
  return "other";
}

std::string to_hex(void const* data, std::size_t bytes)
{
  static char const digits[] = "0123456789abcdef";
  std::string hex;
  auto const* p = static_cast<unsigned char const*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    hex += digits[p[i] >> 4];
    hex += digits[p[i] & 0xf];
  }
  return hex;
}

bool from_hex(std::string const& hex, void* data, std::size_t bytes)
{
  if (hex.size() != 2 * bytes) { return false; }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') { return c - '0'; }
    if (c >= 'a' && c <= 'f') { return c - 'a' + 10; }
    if (c >= 'A' && c <= 'F') { return c - 'A' + 10; }
    return -1;
  };
  auto* p = static_cast<unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) {
    int const hi = nibble(hex[2 * i]);
    int const lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) { return false; }
    p[i] = static_cast<unsigned char>(hi << 4 | lo);
  }
  return true;
}

// ---- export-import: the child ---------------------------------------------------

int import_child(char const* fd_text, char const* hex)
{
  alarm(60);
  char* end = nullptr;
  long const fd = std::strtol(fd_text, &end, 10);
  cudaMemPoolPtrExportData data{};
  if (end == fd_text || *end != '\0' || fd < 0 || !from_hex(hex, &data, sizeof(data))) {
    std::printf("child: bad arguments\n");
    return 2;
  }
  bool ok = true;
  auto step = [&](std::string const& what, cudaError_t e) {
    report("child: " + what, e);
    ok = ok && e == cudaSuccess;
    return e == cudaSuccess;
  };
  if (!step("cudaSetDevice(0)", cudaSetDevice(0))) { return 1; }
  cudaMemPool_t pool = nullptr;
  bool const imported =
    step("cudaMemPoolImportFromShareableHandle(posix fd)",
         cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
                                              cudaMemHandleTypePosixFileDescriptor, 0));
  close(static_cast<int>(fd));
  if (!imported) { return 1; }

  // The imported pool resides on device 0, this process's device: access is
  // expected already. Should it be missing, it is granted as NVIDIA's
  // streamOrderedAllocationIPC sample does (and the result printed).
  cudaMemLocation here{};
  here.type = cudaMemLocationTypeDevice;
  here.id = 0;
  cudaMemAccessFlags access = cudaMemAccessFlagsProtNone;
  if (step("cudaMemPoolGetAccess(imported pool, device 0)", cudaMemPoolGetAccess(&access, pool, &here))) {
    std::printf("child: access of device 0 to the imported pool: %s\n", access_name(access));
    if (access != cudaMemAccessFlagsProtReadWrite) {
      cudaMemAccessDesc desc{};
      desc.location = here;
      desc.flags = cudaMemAccessFlagsProtReadWrite;
      step("cudaMemPoolSetAccess(imported pool, device 0, read-write)", cudaMemPoolSetAccess(pool, &desc, 1));
    }
  }

  void* p = nullptr;
  if (!step("cudaMemPoolImportPointer", cudaMemPoolImportPointer(&p, pool, &data))) { return 1; }
  std::size_t const words = shared_bytes / sizeof(unsigned);
  bad_count const seen = count_bad_words("child: ", p, words, 0, parent_seed, parent_seed);
  if (!seen.ok) {
    ok = false;
  } else if (seen.tail == 0) {
    std::printf("child: data ok\n");
  } else {
    std::printf("child: %llu of %zu words wrong\n", seen.tail, words);
    ok = false;
  }
  fill_kernel<<<64, 256>>>(static_cast<unsigned*>(p), child_bytes / sizeof(unsigned), child_seed);
  step("fill kernel launch (first 4 KiB, second pattern)", cudaGetLastError());
  step("cudaDeviceSynchronize", cudaDeviceSynchronize());
  // Before the exporting process frees the block (it waits for this process).
  step("cudaFree(imported pointer)", cudaFree(p));
  step("cudaGetLastError", cudaGetLastError());
  std::printf("child: %s\n", ok ? "done" : "FAILED");
  std::fflush(stdout);
  return ok ? 0 : 1;
}

// ---- export-import: the parent --------------------------------------------------

int export_import()
{
  int const types = supported_handle_types(0);
  if (types < 0 || (types & cudaMemHandleTypePosixFileDescriptor) == 0) {
    std::printf(
      "SKIP: device 0 does not list posix_file_descriptor in cudaDevAttrMemoryPoolSupportedHandleTypes (%d)\n", types);
    return 0;
  }
  std::printf("device 0: cudaDevAttrMemoryPoolSupportedHandleTypes = %d\n", types);
  bool ok = true;
  auto step = [&](std::string const& what, cudaError_t e) {
    report(what, e);
    ok = ok && e == cudaSuccess;
    return e == cudaSuccess;
  };
  if (!step("cudaSetDevice(0)", cudaSetDevice(0))) { return finish(false); }
  void* ptr = nullptr;
  if (!step("cudaMalloc(64 MiB)", cudaMalloc(&ptr, shared_bytes))) { return finish(false); }
  std::size_t const words = shared_bytes / sizeof(unsigned);
  fill_kernel<<<256, 256>>>(static_cast<unsigned*>(ptr), words, parent_seed);
  step("fill kernel launch", cudaGetLastError());
  step("cudaDeviceSynchronize", cudaDeviceSynchronize());

  cudaMemPool_t const pool = find_pool(ptr, "export");
  if (pool == nullptr) {
    report("cudaFree", cudaFree(ptr));
    return 0;  // the native story, told; not a failure
  }
  cudaMemPool_t default_pool = nullptr;
  cudaMemPool_t current_pool = nullptr;
  if (step("cudaDeviceGetDefaultMemPool(0)", cudaDeviceGetDefaultMemPool(&default_pool, 0))) {
    std::printf("pool is the default pool: %s\n", pool == default_pool ? "yes" : "no");
    ok = ok && pool != default_pool;
  }
  if (step("cudaDeviceGetMemPool(0)", cudaDeviceGetMemPool(&current_pool, 0))) {
    std::printf("the device's current pool is the default pool: %s\n", current_pool == default_pool ? "yes" : "no");
    ok = ok && current_pool == default_pool;
  }

  int fd = -1;
  bool const exported = step("cudaMemPoolExportToShareableHandle(posix fd)",
                             cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0));
  cudaMemPoolPtrExportData data{};
  bool const pointer_exported = step("cudaMemPoolExportPointer", cudaMemPoolExportPointer(&data, ptr));
  if (!exported || !pointer_exported || fd < 0) {
    if (fd >= 0) { close(fd); }
    report("cudaFree", cudaFree(ptr));
    return finish(false);
  }

  // The child inherits the descriptor under the same number across exec.
  int const flags = fcntl(fd, F_GETFD);
  if (flags < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) != 0) {
    std::printf("fcntl(F_SETFD) failed: %s\n", std::strerror(errno));
    close(fd);
    report("cudaFree", cudaFree(ptr));
    return finish(false);
  }
  // Everything the child needs is built before fork: between fork and exec
  // the child of a multi-threaded process may only make async-signal-safe calls.
  std::string const fd_text = std::to_string(fd);
  std::string const hex = to_hex(&data, sizeof(data));
  char self[] = "/proc/self/exe";
  char arg0[] = "pool_export_probe";
  char arg1[] = "import";
  char* const argv[] = {arg0, arg1, const_cast<char*>(fd_text.c_str()), const_cast<char*>(hex.c_str()), nullptr};
  std::printf("parent: running the child (import <fd> <%zu bytes of export data>)\n", sizeof(data));
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t const pid = fork();
  if (pid == 0) {
    execv(self, argv);
    _exit(127);
  }
  close(fd);
  if (pid < 0) {
    std::printf("fork failed: %s\n", std::strerror(errno));
    report("cudaFree", cudaFree(ptr));
    return finish(false);
  }
  std::string const status = wait_status(pid);
  std::printf("parent: child's exit status: %s\n", status.c_str());
  ok = ok && status == "exit 0";

  bad_count const seen =
    count_bad_words("parent: ", ptr, words, child_bytes / sizeof(unsigned), child_seed, parent_seed);
  if (seen.ok) {
    std::printf("parent: sees the child's writes: %s\n", seen.head == 0 ? "yes" : "no");
    std::printf("parent: the rest of the block unchanged: %s\n", seen.tail == 0 ? "yes" : "no");
    if (seen.head != 0 || seen.tail != 0) {
      std::printf("parent: %llu wrong words in the first 4 KiB, %llu after it\n", seen.head, seen.tail);
    }
  }
  ok = ok && seen.ok && seen.head == 0 && seen.tail == 0;
  step("cudaFree", cudaFree(ptr));
  step("cudaDeviceSynchronize", cudaDeviceSynchronize());
  step("cudaGetLastError", cudaGetLastError());
  return finish(ok);
}

// ---- fabric ---------------------------------------------------------------------

int fabric()
{
#if CUDART_VERSION >= 12030
  int const types = supported_handle_types(0);
  if (types < 0 || (types & cudaMemHandleTypeFabric) == 0) {
    std::printf("SKIP: device 0 does not list fabric in cudaDevAttrMemoryPoolSupportedHandleTypes (%d)\n", types);
    return 0;
  }
  std::printf("device 0: cudaDevAttrMemoryPoolSupportedHandleTypes = %d\n", types);
  cudaError_t e = cudaSetDevice(0);
  report("cudaSetDevice(0)", e);
  if (e != cudaSuccess) { return finish(false); }
  void* ptr = nullptr;
  cudaError_t const made = cudaMalloc(&ptr, MiB);
  report("cudaMalloc(1 MiB)", made);
  if (made != cudaSuccess) { return finish(false); }
  bool ok = true;
  std::size_t const words = MiB / sizeof(unsigned);
  fill_kernel<<<64, 256>>>(static_cast<unsigned*>(ptr), words, parent_seed);
  bad_count const seen = count_bad_words("", ptr, words, 0, parent_seed, parent_seed);
  std::printf("data: %s\n", seen.ok && seen.tail == 0 ? "ok" : "WRONG");
  ok = ok && seen.ok && seen.tail == 0;

  cudaMemPool_t const pool = find_pool(ptr, "fabric export");
  if (pool == nullptr) {
    report("cudaFree", cudaFree(ptr));
    return 0;
  }
  cudaMemFabricHandle_t handle{};
  e = cudaMemPoolExportToShareableHandle(&handle, pool, cudaMemHandleTypeFabric, 0);
  report("cudaMemPoolExportToShareableHandle(fabric)", e);
  if (e == cudaSuccess) {
    std::printf("fabric is set up on this machine: the pool's fabric handle was exported\n");
  } else if (e == cudaErrorNotPermitted) {
    std::printf("fabric export not permitted: no fabric (IMEX) set-up on this machine\n");
  } else {
    ok = false;
  }
  report("cudaGetLastError", cudaGetLastError());
  e = cudaFree(ptr);
  report("cudaFree", e);
  ok = ok && e == cudaSuccess;
  return finish(ok);
#else
  std::printf("SKIP: CUDA %d headers have no fabric handle type\n", CUDART_VERSION);
  return 0;
#endif
}

// ---- ipc-hint -------------------------------------------------------------------

int ipc_hint()
{
  void* ptr = nullptr;
  cudaError_t const made = cudaMalloc(&ptr, MiB);
  report("cudaMalloc(1 MiB)", made);
  if (made != cudaSuccess) { return finish(false); }
  CUresult r = CUDA_SUCCESS;
  bool const pooled = pool_of(ptr, &r) != nullptr;
  std::printf("memory from a pool: %s\n", pooled ? "yes" : "no");
  cudaIpcMemHandle_t handle{};
  cudaError_t const got = cudaIpcGetMemHandle(&handle, ptr);
  report("cudaIpcGetMemHandle", got);
  report("cudaGetLastError", cudaGetLastError());
  // Legacy IPC works natively on cudaMalloc memory and on no pool memory (the
  // test runs the shim with ASYNCSHIM_EXPORT_HANDLE_TYPE=none).
  cudaError_t const expected = pooled ? cudaErrorInvalidValue : cudaSuccess;
  std::printf("as expected for %s: %s\n", pooled ? "pool memory" : "cudaMalloc memory", got == expected ? "yes" : "no");
  cudaError_t const freed = cudaFree(ptr);
  report("cudaFree", freed);
  return finish(got == expected && freed == cudaSuccess);
}

[[noreturn]] void usage()
{
  std::fprintf(stderr, "usage: pool_export_probe export-import|fabric|ipc-hint\n"
                       "       pool_export_probe import FD HEX   (the child of export-import)\n");
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc < 2) { usage(); }
  std::string const cmd = argv[1];
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a crash in the same order
  if (cmd == "import") {
    if (argc != 4) { usage(); }
    return import_child(argv[2], argv[3]);
  }
  if (argc != 2 || (cmd != "export-import" && cmd != "fabric" && cmd != "ipc-hint")) { usage(); }
  alarm(120);
  int count = 0;
  cudaError_t const counted = cudaGetDeviceCount(&count);
  if (counted != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s)\n", name(counted));
    return 0;
  }
  if (cmd == "export-import") { return export_import(); }
  if (cmd == "fabric") { return fabric(); }
  return ipc_hint();
}
