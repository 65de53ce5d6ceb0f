#include "export_hints.hpp"

#include "driver_binding.hpp"
#include "log.hpp"
#include "process_settings.hpp"
#include "shim_state.hpp"

#include <atomic>

namespace asyncshim::shim {

void pool_export_failed(CUmemAllocationHandleType type, CUresult result) noexcept
{
  // Fabric handles need a system set up for them (IMEX): a fabric pool can be
  // made without, but exporting it fails. Said once. (Not tried by the shim
  // itself when it makes the pool: on the H200, exporting a fabric pool a
  // second time after a refused export crashed inside the driver.)
  if (type != CU_MEM_HANDLE_TYPE_FABRIC || process_settings().export_handle_type != config::handle_type::fabric) {
    return;
  }
  static std::atomic<bool> said{false};
  if (said.exchange(true)) { return; }
  char const* name = nullptr;
  if (driver().get_error_name == nullptr || driver().get_error_name(result, &name) != CUDA_SUCCESS) { name = "an error"; }
  log::warn("ASYNCSHIM_EXPORT_HANDLE_TYPE=fabric: exporting the pool failed with {}: this system is not set up for "
            "fabric handles (IMEX); processes on one node can share the pool with posix_file_descriptor",
            name);
}

void ipc_handle_failed(CUdeviceptr ptr, CUresult result) noexcept
{
  shim_state* s = existing_state();
  if (s == nullptr || !s->registry.contains(reinterpret_cast<void const*>(ptr))) { return; }
  static std::atomic<bool> said{false};
  if (said.exchange(true)) { return; }
  log::warn("cudaIpcGetMemHandle/cuIpcGetMemHandle failed (error {}) on memory from the asyncshim pool: legacy IPC "
            "does not work on pool memory. Share the pool instead (ASYNCSHIM_EXPORT_HANDLE_TYPE=posix_file_descriptor, "
            "cudaMemPoolExportToShareableHandle + cudaMemPoolExportPointer; README, \"Several processes\"), or run "
            "this process with ASYNCSHIM_DISABLE=1",
            static_cast<int>(result));
}

}  // namespace asyncshim::shim
