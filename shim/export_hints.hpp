// Clear messages when the program's attempt to share memory with another
// process fails because the memory is the pool's or the pool's handle type
// does not fit the system.
#pragma once

#include <cuda.h>

namespace asyncshim::shim {

// After a failed cuMemPoolExportToShareableHandle: a clear message for fabric.
void pool_export_failed(CUmemAllocationHandleType type, CUresult result) noexcept;
// After a failed cuIpcGetMemHandle: a hint when the memory is the shim's.
void ipc_handle_failed(CUdeviceptr ptr, CUresult result) noexcept;

}  // namespace asyncshim::shim
