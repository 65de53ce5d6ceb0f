// What the interposed cudaMalloc and cudaFree do (entry_points.cpp only forwards).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>

namespace asyncshim::shim {

// `caller` is the return address of the interposed call (see runtime_binding.hpp).
[[nodiscard]] cudaError_t allocate(void** dev_ptr, std::size_t size, void const* caller) noexcept;
[[nodiscard]] cudaError_t deallocate(void* ptr, void const* caller) noexcept;

// Frees put off while a stream capture was in progress, issued now that
// none is (called when a capture ends, and by the next allocation or free).
void issue_deferred_frees() noexcept;
// After a successful cuCtxSynchronize (cudaDeviceSynchronize): every queued
// free is handed to the pool (pending_frees.hpp).
void issue_all_queued_frees() noexcept;
// Before the real cuDevicePrimaryCtxReset (cudaDeviceReset): the device's
// pool, its ownership records and the shim's streams on it are dropped.
void device_resetting(int device) noexcept;
// After a successful cuCtxEnablePeerAccess / cuCtxDisablePeerAccess of the
// current context to `peer`: the owner's pool follows (peer_access.hpp).
void peer_access_changed(CUcontext peer, bool enabled) noexcept;
// After a failed cuMemPoolExportToShareableHandle: a clear message for fabric.
void pool_export_failed(CUmemAllocationHandleType type, CUresult result) noexcept;
// After a failed cuIpcGetMemHandle: a hint when the memory is the shim's.
void ipc_handle_failed(CUdeviceptr ptr, CUresult result) noexcept;
// Before the real cuCtxDestroy: the shim forgets the program's streams there,
// and drops a device's pool made in that context as for a reset.
void context_destroying(CUcontext context) noexcept;

}  // namespace asyncshim::shim
