// The exported CUDA functions: thin forwarders to their hooks in core/,
// generated from cuda/api_table.def, noexcept all the way down, so no C++
// exception reaches the caller.
//  - The runtime's cudaMalloc and cudaFree. The caller's return address goes
//    along: it tells which runtime the program uses (cuda/runtime.hpp).
//  - The driver's cuMemAlloc_v2/cuMemFree_v2 (what the runtime's
//    cudaMalloc/cudaFree use, and what programs linked with -lcuda call),
//    the two lookups through which statically linked runtimes fetch them
//    (cuGetProcAddress, the CUDA 11 ABI, and cuGetProcAddress_v2), and the
//    calls the shim follows.
// Each exported name is given as an assembler label: cuda.h maps some names
// to others with macros (cuGetProcAddress to cuGetProcAddress_v2), and the
// label is the name as written in the table.
//
// Where the allocation entry points land (asyncshim_hook_<field>):
//   cudaMalloc   -> asyncshim_hook_malloc        (core/allocator.cpp)
//   cudaFree     -> asyncshim_hook_free          (core/allocator.cpp)
//   cuMemAlloc_v2 -> asyncshim_hook_mem_alloc    (core/allocator.cpp)
//   cuMemFree_v2 -> asyncshim_hook_mem_free      (core/allocator.cpp)
//   cuGetProcAddress, cuGetProcAddress_v2 -> core/lookup_redirect.cpp
//   every other row of cuda/api_table.def -> core/followed_calls.cpp,
//   core/followed_submissions.cpp, core/ipc_export.cpp, core/ipc_import.cpp,
//   core/memory_info.cpp
#include "abi/export.hpp"
#include "core/hooks.hpp"

#define ASYNCSHIM_RUNTIME_HOOK(field, symbol, params, hook_params, args)         \
  ASYNCSHIM_EXPORT cudaError_t asyncshim_export_##field params __asm__(#symbol); \
  cudaError_t asyncshim_export_##field params { return asyncshim_hook_##field args; }
#define ASYNCSHIM_DRIVER_HOOK(purpose, lookups, need, field, symbol, lookup_name, abi, params, args) \
  ASYNCSHIM_EXPORT CUresult asyncshim_export_##field params __asm__(#symbol);                        \
  CUresult asyncshim_export_##field params { return asyncshim_hook_##field args; }
#include "cuda/api_table.def"
