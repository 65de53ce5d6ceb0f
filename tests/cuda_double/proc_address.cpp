// proc_address.cpp: cuGetProcAddress (the CUDA 11.3 ABI) and cuGetProcAddress_v2
// (CUDA 12.0) of the CUDA driver TEST DOUBLE, libcuda.so.1 (see cuda_double.hpp).
//
// A statically linked CUDA runtime dlopen()s libcuda.so.1, dlsym()s only
// "cuGetProcAddress_v2" and fetches every other entry point through it, by
// base name ("cuMemAlloc", not "cuMemAlloc_v2"), for its own CUDA version and
// default-stream mode. The pointers handed out are the double's own
// functions, never an interposer's: the library is linked with
// -Bsymbolic-functions (CMakeLists.txt), so &cuMemAlloc_v2 below is bound at
// link time, as the real driver's internal table is. An interposer that wants
// the program's driver calls must therefore intercept cuGetProcAddress itself.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "cuda_driver_double.hpp"
#include "model.hpp"

namespace {

using function_pointer = void (*)();

template <class F>
function_pointer fn(F* f)
{
  return reinterpret_cast<function_pointer>(f);
}

// The CUDA 7.0 cuDevicePrimaryCtxReset, which only a lookup finds: the double
// exports no symbol for it, as a driver whose library lacks an ABI's export.
CUresult CUDAAPI primary_ctx_reset_v7000(CUdevice dev) { return cuDevicePrimaryCtxReset_v2(dev); }

// What CUDA_DOUBLE_NEWER_ABI hands out: an ABI newer than the headers, whose
// parameters nobody here knows, so it does nothing.
CUresult CUDAAPI newer_abi()
{
  cuda_double::count_failure();
  return CUDA_ERROR_NOT_SUPPORTED;
}

bool has_newer_abi(char const* symbol, int cudaVersion)
{
  if (cudaVersion < cuda_double::newer_driver_version) { return false; }
  auto const& names = cuda_double::config().newer_abis;
  return std::find(names.begin(), names.end(), symbol) != names.end();
}

// One ABI of one entry point: from cudaVersion `since` on (until the next row
// of the same name), `legacy` is handed out, or `per_thread` (when not null)
// for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM. Rows of one name are in
// increasing order of since.
struct proc_entry {
  char const* name;
  int since;
  function_pointer legacy;
  function_pointer per_thread;
};

// The `since` versions are those of the real driver's ABIs that the double
// provides; older ABIs of the same name (e.g. the 32-bit cuMemAlloc of CUDA
// 2.x) are not provided, so asking for them is VERSION_NOT_SUFFICIENT.
proc_entry const table[] = {
  {"cuInit", 2000, fn(&cuInit), nullptr},
  {"cuDriverGetVersion", 2020, fn(&cuDriverGetVersion), nullptr},
  {"cuDeviceGet", 2000, fn(&cuDeviceGet), nullptr},
  {"cuDeviceGetCount", 2000, fn(&cuDeviceGetCount), nullptr},
  {"cuDeviceGetName", 2000, fn(&cuDeviceGetName), nullptr},
  {"cuDeviceGetAttribute", 2000, fn(&cuDeviceGetAttribute), nullptr},
  {"cuDeviceGetPCIBusId", 4010, fn(&cuDeviceGetPCIBusId), nullptr},
  {"cuDevicePrimaryCtxRetain", 7000, fn(&cuDevicePrimaryCtxRetain), nullptr},
  {"cuDevicePrimaryCtxRelease", 11000, fn(&cuDevicePrimaryCtxRelease_v2), nullptr},
  {"cuDevicePrimaryCtxGetState", 7000, fn(&cuDevicePrimaryCtxGetState), nullptr},
  {"cuDevicePrimaryCtxReset", 7000, fn(&primary_ctx_reset_v7000), nullptr},
  {"cuDevicePrimaryCtxReset", 11000, fn(&cuDevicePrimaryCtxReset_v2), nullptr},
  {"cuCtxCreate", 12050, fn(&cuCtxCreate_v4), nullptr},
  {"cuCtxDestroy", 4000, fn(&cuCtxDestroy_v2), nullptr},
  {"cuCtxGetCurrent", 4000, fn(&cuCtxGetCurrent), nullptr},
  {"cuCtxSetCurrent", 4000, fn(&cuCtxSetCurrent), nullptr},
  {"cuCtxGetDevice", 2000, fn(&cuCtxGetDevice), nullptr},
  {"cuCtxPushCurrent", 4000, fn(&cuCtxPushCurrent_v2), nullptr},
  {"cuCtxPopCurrent", 4000, fn(&cuCtxPopCurrent_v2), nullptr},
  {"cuCtxSynchronize", 2000, fn(&cuCtxSynchronize), nullptr},
  {"cuCtxSynchronize", 13000, fn(&cuCtxSynchronize_v2), nullptr},
  {"cuMemAlloc", 3020, fn(&cuMemAlloc_v2), nullptr},
  {"cuMemAllocPitch", 3020, fn(&cuMemAllocPitch_v2), nullptr},
  {"cuMemAllocHost", 3020, fn(&cuMemAllocHost_v2), nullptr},
  {"cuMemHostAlloc", 2020, fn(&cuMemHostAlloc), nullptr},
  {"cuMemFreeHost", 2000, fn(&cuMemFreeHost), nullptr},
  {"cuMemHostGetDevicePointer", 3020, fn(&cuMemHostGetDevicePointer_v2), nullptr},
  {"cuMemHostGetFlags", 2030, fn(&cuMemHostGetFlags), nullptr},
  {"cuMemFree", 3020, fn(&cuMemFree_v2), nullptr},
  {"cuMemGetInfo", 3020, fn(&cuMemGetInfo_v2), nullptr},
  {"cuMemcpyHtoD", 3020, fn(&cuMemcpyHtoD_v2), nullptr},  // no _v2_ptds in the double
  {"cuMemcpyDtoH", 3020, fn(&cuMemcpyDtoH_v2), nullptr},  // no _v2_ptds in the double
  {"cuMemsetD8", 3020, fn(&cuMemsetD8_v2), nullptr},      // no _v2_ptds in the double
  {"cuMemAllocAsync", 11020, fn(&cuMemAllocAsync), fn(&cuMemAllocAsync_ptsz)},
  {"cuMemFreeAsync", 11020, fn(&cuMemFreeAsync), fn(&cuMemFreeAsync_ptsz)},
  {"cuMemAllocFromPoolAsync", 11020, fn(&cuMemAllocFromPoolAsync), fn(&cuMemAllocFromPoolAsync_ptsz)},
  {"cuMemPoolCreate", 11020, fn(&cuMemPoolCreate), nullptr},
  {"cuMemPoolDestroy", 11020, fn(&cuMemPoolDestroy), nullptr},
  {"cuMemPoolSetAttribute", 11020, fn(&cuMemPoolSetAttribute), nullptr},
  {"cuMemPoolGetAttribute", 11020, fn(&cuMemPoolGetAttribute), nullptr},
  {"cuMemPoolTrimTo", 11020, fn(&cuMemPoolTrimTo), nullptr},
  {"cuMemPoolSetAccess", 11020, fn(&cuMemPoolSetAccess), nullptr},
  {"cuMemPoolGetAccess", 11020, fn(&cuMemPoolGetAccess), nullptr},
  {"cuMemPoolExportToShareableHandle", 11020, fn(&cuMemPoolExportToShareableHandle), nullptr},
  {"cuMemPoolExportPointer", 11020, fn(&cuMemPoolExportPointer), nullptr},
  {"cuMemPoolImportFromShareableHandle", 11020, fn(&cuMemPoolImportFromShareableHandle), nullptr},
  {"cuMemPoolImportPointer", 11020, fn(&cuMemPoolImportPointer), nullptr},
  {"cuIpcGetMemHandle", 4010, fn(&cuIpcGetMemHandle), nullptr},
  {"cuIpcOpenMemHandle", 4010, fn(&cuIpcOpenMemHandle_v1), nullptr},
  {"cuIpcOpenMemHandle", 11000, fn(&cuIpcOpenMemHandle_v2), nullptr},
  {"cuIpcCloseMemHandle", 4010, fn(&cuIpcCloseMemHandle), nullptr},
  {"cuMemGetAddressRange", 3020, fn(&cuMemGetAddressRange_v2), nullptr},
  {"cuDeviceCanAccessPeer", 4000, fn(&cuDeviceCanAccessPeer), nullptr},
  {"cuCtxEnablePeerAccess", 4000, fn(&cuCtxEnablePeerAccess), nullptr},
  {"cuCtxDisablePeerAccess", 4000, fn(&cuCtxDisablePeerAccess), nullptr},
  {"cuStreamCreate", 2000, fn(&cuStreamCreate), nullptr},
  {"cuStreamCreateWithPriority", 5050, fn(&cuStreamCreateWithPriority), nullptr},
  {"cuStreamDestroy", 2000, fn(&cuStreamDestroy_v1), nullptr},
  {"cuStreamDestroy", 4000, fn(&cuStreamDestroy_v2), nullptr},
  {"cuLaunchKernel", 4000, fn(&cuLaunchKernel), fn(&cuLaunchKernel_ptsz)},
  {"cuLaunchHostFunc", 10000, fn(&cuLaunchHostFunc), fn(&cuLaunchHostFunc_ptsz)},
  {"cuMemcpyAsync", 4000, fn(&cuMemcpyAsync), fn(&cuMemcpyAsync_ptsz)},
  {"cuMemsetD8Async", 3020, fn(&cuMemsetD8Async), fn(&cuMemsetD8Async_ptsz)},
  {"cuDoubleFutureFunction", 13000, fn(&cuDoubleFutureFunction), nullptr},
  {"cuStreamGetFlags", 5050, fn(&cuStreamGetFlags), fn(&cuStreamGetFlags_ptsz)},
  {"cuStreamSynchronize", 2000, fn(&cuStreamSynchronize), fn(&cuStreamSynchronize_ptsz)},
  {"cuStreamQuery", 2000, fn(&cuStreamQuery), fn(&cuStreamQuery_ptsz)},
  {"cuStreamWaitEvent", 3020, fn(&cuStreamWaitEvent), fn(&cuStreamWaitEvent_ptsz)},
  {"cuEventCreate", 2000, fn(&cuEventCreate), nullptr},
  {"cuEventDestroy", 4000, fn(&cuEventDestroy_v2), nullptr},
  {"cuEventRecord", 2000, fn(&cuEventRecord), fn(&cuEventRecord_ptsz)},
  {"cuEventQuery", 2000, fn(&cuEventQuery), nullptr},
  {"cuEventSynchronize", 2000, fn(&cuEventSynchronize), nullptr},
  {"cuStreamBeginCapture", 10010, fn(&cuStreamBeginCapture_v2), fn(&cuStreamBeginCapture_v2_ptsz)},
  {"cuStreamEndCapture", 10000, fn(&cuStreamEndCapture), fn(&cuStreamEndCapture_ptsz)},
  {"cuStreamIsCapturing", 10000, fn(&cuStreamIsCapturing), fn(&cuStreamIsCapturing_ptsz)},
  {"cuThreadExchangeStreamCaptureMode", 10010, fn(&cuThreadExchangeStreamCaptureMode), nullptr},
  {"cuGraphDestroy", 10000, fn(&cuGraphDestroy), nullptr},
  {"cuGraphGetNodes", 10000, fn(&cuGraphGetNodes), nullptr},
  {"cuGraphInstantiateWithFlags", 11040, fn(&cuGraphInstantiateWithFlags), nullptr},
  {"cuGraphLaunch", 10000, fn(&cuGraphLaunch), fn(&cuGraphLaunch_ptsz)},
  {"cuGraphExecDestroy", 10000, fn(&cuGraphExecDestroy), nullptr},
  {"cuPointerGetAttribute", 4000, fn(&cuPointerGetAttribute), nullptr},
  {"cuPointerSetAttribute", 6000, fn(&cuPointerSetAttribute), nullptr},
  {"cuGetErrorName", 6000, fn(&cuGetErrorName), nullptr},
  {"cuGetErrorString", 6000, fn(&cuGetErrorString), nullptr},
  {"cuGetProcAddress", 11030, fn(&cuGetProcAddress_v1), nullptr},
  {"cuGetProcAddress", 12000, fn(&cuGetProcAddress_v2), nullptr},
};

constexpr cuuint64_t known_flags = CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

// The shared body of both exported ABIs. status may be null.
CUresult lookup(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) noexcept
{
  CUresult result = CUDA_ERROR_UNKNOWN;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  try {
    if (symbol != nullptr) {
      auto& m = cuda_double::model();
      std::lock_guard<std::mutex> lock(m.mu);
      auto it = m.proc_lookups.find(symbol);
      if (it == m.proc_lookups.end()) { it = m.proc_lookups.emplace(symbol, 0).first; }
      ++it->second;
    }
    if (symbol == nullptr || pfn == nullptr || (flags & ~known_flags) != 0) {
      result = CUDA_ERROR_INVALID_VALUE;
    } else if (has_newer_abi(symbol, cudaVersion)) {
      *pfn = reinterpret_cast<void*>(fn(&newer_abi));
      found = CU_GET_PROC_ADDRESS_SUCCESS;
      result = CUDA_SUCCESS;
    } else {
      *pfn = nullptr;
      proc_entry const* best = nullptr;
      bool named = false;
      for (proc_entry const& e : table) {
        if (std::strcmp(e.name, symbol) != 0) { continue; }
        named = true;
        if (e.since <= cudaVersion) { best = &e; }
      }
      if (best != nullptr) {
        bool const per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
        function_pointer const f = per_thread && best->per_thread != nullptr ? best->per_thread : best->legacy;
        *pfn = reinterpret_cast<void*>(f);
        found = CU_GET_PROC_ADDRESS_SUCCESS;
        result = CUDA_SUCCESS;
      } else {
        found = named ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        result = CUDA_ERROR_NOT_FOUND;
      }
    }
  } catch (...) {
    result = CUDA_ERROR_OUT_OF_MEMORY;  // only the lookup counter can throw (std::bad_alloc)
  }
  if (status != nullptr) { *status = found; }
  if (result != CUDA_SUCCESS) { cuda_double::count_failure(); }
  return result;
}

}  // namespace

extern "C" {

CUDA_DOUBLE_API CUresult CUDAAPI cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                                     CUdriverProcAddressQueryResult* symbolStatus)
{
  return lookup(symbol, pfn, cudaVersion, flags, symbolStatus);
}

// Exported as "cuGetProcAddress" (see cuda_driver_double.hpp).
CUDA_DOUBLE_API CUresult CUDAAPI cuGetProcAddress_v1(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags)
{
  return lookup(symbol, pfn, cudaVersion, flags, nullptr);
}

}  // extern "C"
