// static_runtime_probe: a program that reaches the CUDA driver the way a
// statically linked CUDA runtime (nvcc's default, libcudart_static) does. It
// links neither libcudart nor libcuda (only libdl): it dlopen()s the driver
// library by path with RTLD_NOW | RTLD_LOCAL (the static runtime opens
// "libcuda.so.1" so), dlsym()s "cuGetProcAddress_v2" and fetches every entry
// point through it, by base name, for CUDA 13.0 with the default flags.
//
//   static_runtime_probe <path to libcuda.so.1> <check>
//
// checks:
//   basic         look up the entry points, then through them: cuInit, retain
//                 and set device 0's primary context, 4 cuMemAlloc, write and
//                 read back data, 4 cuMemFree
//   self-lookup   the same, with the cuGetProcAddress that cuGetProcAddress_v2
//                 hands out for "cuGetProcAddress" (itself); plus the legacy
//                 cuGetProcAddress (cudaVersion 11030) looking up cuMemFree
//   dlsym-direct  the same, with dlsym(handle, "cuMemAlloc_v2") etc. instead
//                 of cuGetProcAddress, as some frameworks do
//   unknown       look up names the driver does not have
//
// It prints one stable, greppable line per fact (no addresses), e.g.
//   lookup cuMemAlloc -> result 0 status 0 same-as-dlsym-export 1 in libcuda.so.1
//   alloc 1: ok kind 3            (kind: cuda_double_pointer_kind; "-" when the
//                                  library is not the double)
//   data ok
//   free 1: ok
//   summary: allocations 4 pool 0 driver 4
// so a test can run it with and without LD_PRELOAD=libasyncshim.so and compare.
// "same-as-dlsym-export" compares the pointer handed out with what
// dlsym(handle, <exported name>) gives for the same function (an interposer
// that also intercepts dlsym makes both its own); "in" names the file that
// holds the function's code, as dladdr() says. The summary
// comes from the double's counters (allocations = cudaMalloc + pool +
// cuMemAlloc_v2 allocations, since start-up). Exit status: 0 when every call
// that should succeed did and the data came back, 1 otherwise, 2 for bad usage
// or a library that cannot be loaded.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <cuda.h>

#include "cuda_double.hpp"

namespace {

using GetProcAddressV2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using GetProcAddressV1 = CUresult (*)(const char*, void**, int, cuuint64_t);

constexpr int cuda_version = 13000;

void* g_handle = nullptr;
bool g_failed = false;

void fail() { g_failed = true; }

// The file name (no folder) of the loaded object that holds code address p, as
// the dynamic loader knows it: says whose function a pointer is, whatever
// dlsym has been made to answer.
char const* object_of(void const* p)
{
  Dl_info info{};
  if (p == nullptr || dladdr(p, &info) == 0 || info.dli_fname == nullptr) { return "?"; }
  char const* slash = std::strrchr(info.dli_fname, '/');
  return slash != nullptr ? slash + 1 : info.dli_fname;
}

// The symbol the driver exports for a base name (what cuda.h #defines it to).
std::string exported_name(std::string const& base, bool per_thread, int version)
{
  if (base == "cuGetProcAddress" && version < 12000) {
    return base;  // the CUDA 11.3 ABI
  }
  if (base == "cuCtxSynchronize" && version >= 13000) { return "cuCtxSynchronize_v2"; }
  static char const* const v2[] = {
    "cuMemAlloc",      "cuMemFree",        "cuMemGetInfo",    "cuMemcpyHtoD",    "cuMemcpyDtoH",
    "cuMemsetD8",      "cuCtxPushCurrent", "cuCtxPopCurrent", "cuStreamDestroy", "cuDevicePrimaryCtxRelease",
    "cuGetProcAddress"};
  static char const* const ptsz[] = {"cuMemAllocAsync", "cuMemFreeAsync", "cuMemAllocFromPoolAsync",
                                     "cuStreamSynchronize"};
  if (per_thread) {
    for (char const* n : ptsz) {
      if (base == n) { return base + "_ptsz"; }
    }
  }
  for (char const* n : v2) {
    if (base == n) { return base + "_v2"; }
  }
  return base;
}

// Looks a base name up through get (v2 ABI) and prints the facts.
void* lookup_with(GetProcAddressV2 get, char const* label, char const* name, int version, cuuint64_t flags)
{
  void* pfn = reinterpret_cast<void*>(std::uintptr_t{1});  // must be overwritten
  auto status = static_cast<CUdriverProcAddressQueryResult>(-1);
  CUresult const r = get(name, &pfn, version, flags, &status);
  bool const per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  std::printf("%s %s%s%s -> result %d status %d", label, name, per_thread ? " per-thread" : "",
              version != cuda_version ? (" version " + std::to_string(version)).c_str() : "", static_cast<int>(r),
              static_cast<int>(status));
  if (r == CUDA_SUCCESS) {
    void* exported = dlsym(g_handle, exported_name(name, per_thread, version).c_str());
    std::printf(" same-as-dlsym-export %d in %s\n", pfn != nullptr && pfn == exported ? 1 : 0, object_of(pfn));
  } else {
    std::printf(" pfn %s\n", pfn == nullptr ? "null" : "not-null");
  }
  return r == CUDA_SUCCESS ? pfn : nullptr;
}

// The entry points the allocation flow uses.
struct driver_api {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*ctx_synchronize)(CUcontext) = nullptr;  // CUDA 13's, null: the current context
};

template <class F>
void take(F& slot, void* p)
{
  slot = reinterpret_cast<F>(p);
}

driver_api look_up_all(GetProcAddressV2 get, char const* label)
{
  driver_api api;
  take(api.init, lookup_with(get, label, "cuInit", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  take(api.device_get, lookup_with(get, label, "cuDeviceGet", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  take(api.primary_ctx_retain,
       lookup_with(get, label, "cuDevicePrimaryCtxRetain", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  take(api.ctx_set_current, lookup_with(get, label, "cuCtxSetCurrent", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  take(api.mem_alloc, lookup_with(get, label, "cuMemAlloc", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  take(api.mem_free, lookup_with(get, label, "cuMemFree", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  take(api.memcpy_htod, lookup_with(get, label, "cuMemcpyHtoD", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  take(api.memcpy_dtoh, lookup_with(get, label, "cuMemcpyDtoH", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  take(api.ctx_synchronize, lookup_with(get, label, "cuCtxSynchronize", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  take(api.device_get_name, lookup_with(get, label, "cuDeviceGetName", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
  (void)lookup_with(get, label, "cuGetProcAddress", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT);
  (void)lookup_with(get, label, "cuMemAllocAsync", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT);
  (void)lookup_with(get, label, "cuMemAllocAsync", cuda_version, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  return api;
}

void* direct(char const* name)
{
  void* p = dlsym(g_handle, name);
  if (p != nullptr) {
    std::printf("dlsym %s: found in %s\n", name, object_of(p));
  } else {
    std::printf("dlsym %s: missing\n", name);
  }
  if (p == nullptr) { fail(); }
  return p;
}

driver_api look_up_directly()
{
  driver_api api;
  take(api.init, direct("cuInit"));
  take(api.device_get, direct("cuDeviceGet"));
  take(api.primary_ctx_retain, direct("cuDevicePrimaryCtxRetain"));
  take(api.ctx_set_current, direct("cuCtxSetCurrent"));
  take(api.mem_alloc, direct("cuMemAlloc_v2"));
  take(api.mem_free, direct("cuMemFree_v2"));
  take(api.memcpy_htod, direct("cuMemcpyHtoD_v2"));
  take(api.memcpy_dtoh, direct("cuMemcpyDtoH_v2"));
  take(api.ctx_synchronize, direct("cuCtxSynchronize_v2"));
  take(api.device_get_name, direct("cuDeviceGetName"));
  return api;
}

// Prints "<what>: <result>" and notes a failure.
bool step(char const* what, CUresult r)
{
  std::printf("%s: %d\n", what, static_cast<int>(r));
  if (r != CUDA_SUCCESS) { fail(); }
  return r == CUDA_SUCCESS;
}

void allocate_and_check(driver_api const& api)
{
  if (api.init == nullptr || api.device_get == nullptr || api.primary_ctx_retain == nullptr ||
      api.ctx_set_current == nullptr || api.mem_alloc == nullptr || api.mem_free == nullptr ||
      api.memcpy_htod == nullptr || api.memcpy_dtoh == nullptr || api.device_get_name == nullptr) {
    std::printf("entry points missing: not running\n");
    fail();
    return;
  }
  auto kind_of = reinterpret_cast<int (*)(void const*)>(dlsym(g_handle, "cuda_double_pointer_kind"));

  if (!step("cuInit", api.init(0))) { return; }
  CUdevice device = -1;
  if (!step("cuDeviceGet", api.device_get(&device, 0))) { return; }
  char name[128] = {};
  if (step("cuDeviceGetName", api.device_get_name(name, sizeof name, device))) {
    std::printf("device name: %s\n", name);
  }
  CUcontext context = nullptr;
  if (!step("cuDevicePrimaryCtxRetain", api.primary_ctx_retain(&context, device))) { return; }
  if (!step("cuCtxSetCurrent", api.ctx_set_current(context))) { return; }

  constexpr std::size_t sizes[] = {256, 4096, 1 << 20, (3 << 20) + 5};
  constexpr int buffer_count = 4;
  CUdeviceptr buffers[buffer_count] = {};
  for (int i = 0; i < buffer_count; ++i) {
    CUresult const r = api.mem_alloc(&buffers[i], sizes[i]);
    if (r != CUDA_SUCCESS) {
      std::printf("alloc %d: failed %d\n", i + 1, static_cast<int>(r));
      fail();
      buffers[i] = 0;
      continue;
    }
    void const* p = reinterpret_cast<void const*>(static_cast<std::uintptr_t>(buffers[i]));
    if (kind_of != nullptr) {
      std::printf("alloc %d: ok kind %d\n", i + 1, kind_of(p));
    } else {
      std::printf("alloc %d: ok kind -\n", i + 1);
    }
  }

  bool data_ok = true;
  for (int i = 0; i < buffer_count; ++i) {
    if (buffers[i] == 0) { continue; }
    std::vector<unsigned char> out(sizes[i]), in(sizes[i], 0);
    for (std::size_t j = 0; j < out.size(); ++j) {
      out[j] = static_cast<unsigned char>((j * 31 + i * 7) & 0xff);
    }
    CUresult r = api.memcpy_htod(buffers[i], out.data(), out.size());
    if (r == CUDA_SUCCESS) { r = api.memcpy_dtoh(in.data(), buffers[i], in.size()); }
    if (r != CUDA_SUCCESS) {
      std::printf("copy %d: failed %d\n", i + 1, static_cast<int>(r));
      data_ok = false;
    } else if (in != out) {
      std::printf("data mismatch in buffer %d\n", i + 1);
      data_ok = false;
    }
  }
  std::printf(data_ok ? "data ok\n" : "data NOT ok\n");
  if (!data_ok) { fail(); }

  for (int i = 0; i < buffer_count; ++i) {
    if (buffers[i] == 0) { continue; }
    CUresult const r = api.mem_free(buffers[i]);
    if (r == CUDA_SUCCESS) {
      std::printf("free %d: ok\n", i + 1);
    } else {
      std::printf("free %d: failed %d\n", i + 1, static_cast<int>(r));
      fail();
    }
  }
  // Frees may be queued until a synchronization (the shim's device ordering).
  if (api.ctx_synchronize != nullptr && api.ctx_synchronize(nullptr) != CUDA_SUCCESS) {
    std::printf("synchronize: failed\n");
    fail();
  }
}

void summary()
{
  auto counters = reinterpret_cast<cuda_double_counters (*)()>(dlsym(g_handle, "cuda_double_get_counters"));
  auto live = reinterpret_cast<int (*)()>(dlsym(g_handle, "cuda_double_live_allocations"));
  if (counters == nullptr || live == nullptr) {
    std::printf("summary: unavailable (not the CUDA double)\n");
    return;
  }
  cuda_double_counters const c = counters();
  std::printf("summary: allocations %llu pool %llu driver %llu\n", c.native_mallocs + c.pool_allocs + c.driver_mallocs,
              c.pool_allocs, c.driver_mallocs);
  std::printf("live allocations: %d\n", live());
}

int usage()
{
  std::fprintf(stderr,
               "usage: static_runtime_probe <path to libcuda.so.1> basic|twice|self-lookup|dlsym-direct|unknown\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc != 3) { return usage(); }
  std::string const check = argv[2];
  if (check != "basic" && check != "twice" && check != "self-lookup" && check != "dlsym-direct" && check != "unknown") {
    return usage();
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);

  g_handle = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (g_handle == nullptr) {
    std::fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 2;
  }
  auto get = reinterpret_cast<GetProcAddressV2>(dlsym(g_handle, "cuGetProcAddress_v2"));
  std::printf("dlsym cuGetProcAddress_v2: %s\n", get != nullptr ? "found" : "missing");
  if (get == nullptr) { return 2; }

  if (check == "basic") {
    allocate_and_check(look_up_all(get, "lookup"));
  } else if (check == "twice") {  // the same sizes again: sizes a cache of freed blocks would keep
    driver_api const api = look_up_all(get, "lookup");
    allocate_and_check(api);
    allocate_and_check(api);
  } else if (check == "self-lookup") {
    auto self = reinterpret_cast<GetProcAddressV2>(
      lookup_with(get, "lookup", "cuGetProcAddress", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT));
    if (self == nullptr) { return 1; }
    // The legacy ABI, as a CUDA 11.3 runtime would get it, used once.
    auto v1 = reinterpret_cast<GetProcAddressV1>(
      lookup_with(self, "self-lookup", "cuGetProcAddress", 11030, CU_GET_PROC_ADDRESS_DEFAULT));
    if (v1 == nullptr) {
      fail();
    } else {
      void* p = nullptr;
      CUresult const r = v1("cuMemFree", &p, 11030, CU_GET_PROC_ADDRESS_DEFAULT);
      std::printf("v1 lookup cuMemFree -> result %d same-as-dlsym-export %d in %s\n", static_cast<int>(r),
                  p != nullptr && p == dlsym(g_handle, "cuMemFree_v2") ? 1 : 0, object_of(p));
      if (r != CUDA_SUCCESS) { fail(); }
    }
    allocate_and_check(look_up_all(self, "self-lookup"));
  } else if (check == "dlsym-direct") {
    allocate_and_check(look_up_directly());
  } else {  // unknown
    if (lookup_with(get, "lookup", "cuNoSuchFunction", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT) != nullptr) {
      fail();
    }
    if (lookup_with(get, "lookup", "cuMemAlloc_v2", cuda_version, CU_GET_PROC_ADDRESS_DEFAULT) != nullptr) { fail(); }
    if (lookup_with(get, "lookup", "cuMemAlloc", 3000, CU_GET_PROC_ADDRESS_DEFAULT) != nullptr) { fail(); }
  }
  summary();
  return g_failed ? 1 : 0;
}
