// The exported driver API: cuMemAlloc_v2 and cuMemFree_v2 (what the runtime's
// cudaMalloc/cudaFree use, and what programs linked with -lcuda call), and the
// two lookups through which statically linked runtimes fetch them:
// cuGetProcAddress (the CUDA 11 ABI, 4 arguments) and cuGetProcAddress_v2.
// Thin forwarders, noexcept all the way down.
#include "driver_binding.hpp"
#include "driver_interception.hpp"
#include "log.hpp"

#define ASYNCSHIM_EXPORT extern "C" __attribute__((visibility("default")))

extern "C" {
CUresult asyncshim_entry_get_proc_address_v2(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* symbolStatus);
CUresult asyncshim_entry_get_proc_address_v1(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
}

namespace {

using asyncshim::shim::driver;
using asyncshim::shim::replacement_for_pointer;

// Replaces the answer when it is a replaced driver function; at trace level
// every lookup is logged (how the entry points a runtime uses were found).
CUresult substitute(char const* lookup, char const* symbol, int version, cuuint64_t flags, CUresult result,
                    void** pfn) noexcept
{
  void* const real = pfn != nullptr ? *pfn : nullptr;
  if (result == CUDA_SUCCESS && real != nullptr) { *pfn = replacement_for_pointer(real); }
  if (asyncshim::shim::log::enabled(asyncshim::shim::log::log_level::trace)) {
    asyncshim::shim::log::trace("{}(\"{}\", version {}, flags {}) = {}{}", lookup, symbol != nullptr ? symbol : "(null)",
                                version, flags, static_cast<int>(result),
                                pfn != nullptr && *pfn != real ? ": replaced by asyncshim" : "");
  }
  return result;
}

}  // namespace

ASYNCSHIM_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize)
{
  return asyncshim::shim::driver_allocate(dptr, bytesize);
}

ASYNCSHIM_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) { return asyncshim::shim::driver_deallocate(dptr); }

// The same entry points under hidden names, for the pointers handed out by
// lookups (an address taken of an exported name could resolve elsewhere).
extern "C" CUresult asyncshim_entry_mem_alloc(CUdeviceptr* dptr, size_t bytesize)
{
  return asyncshim::shim::driver_allocate(dptr, bytesize);
}

extern "C" CUresult asyncshim_entry_mem_free(CUdeviceptr dptr) { return asyncshim::shim::driver_deallocate(dptr); }

// The real lookup always runs, with the caller's own symbolStatus, so the
// status is always filled as the driver fills it.
ASYNCSHIM_EXPORT CUresult cuGetProcAddress_v2(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                              CUdriverProcAddressQueryResult* symbolStatus)
{
  return asyncshim_entry_get_proc_address_v2(symbol, pfn, cudaVersion, flags, symbolStatus);
}

extern "C" CUresult asyncshim_entry_get_proc_address_v2(char const* symbol, void** pfn, int cudaVersion,
                                                        cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus)
{
  auto const real = driver().get_proc_address_v2;
  if (real == nullptr) {  // no driver loaded: answer as a lookup that found nothing
    if (pfn != nullptr) { *pfn = nullptr; }
    if (symbolStatus != nullptr) { *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; }
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return substitute("cuGetProcAddress_v2", symbol, cudaVersion, flags,
                    real(symbol, pfn, cudaVersion, flags, symbolStatus), pfn);
}

// cuda.h maps the name cuGetProcAddress to cuGetProcAddress_v2; the CUDA 11
// entry point is defined under its exported name with an assembler label.
extern "C" __attribute__((visibility("default"))) CUresult asyncshim_get_proc_address_v1(
  char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags) __asm__("cuGetProcAddress");

CUresult asyncshim_get_proc_address_v1(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags)
{
  return asyncshim_entry_get_proc_address_v1(symbol, pfn, cudaVersion, flags);
}

extern "C" CUresult asyncshim_entry_get_proc_address_v1(char const* symbol, void** pfn, int cudaVersion,
                                                        cuuint64_t flags)
{
  auto const real = driver().get_proc_address_v1;
  if (real == nullptr) {
    if (pfn != nullptr) { *pfn = nullptr; }
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return substitute("cuGetProcAddress", symbol, cudaVersion, flags, real(symbol, pfn, cudaVersion, flags), pfn);
}
