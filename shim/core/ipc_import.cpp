// cudaIpcOpenMemHandle / cuIpcOpenMemHandle and cudaIpcCloseMemHandle /
// cuIpcCloseMemHandle for the legacy IPC handles the shim makes for pool
// memory (core/ipc_export.cpp); every other handle and pointer goes to the
// real call untouched.
//
// Opening one: ask the exporter's channel for the block (support/unix_channel.hpp),
// import its pool from the descriptor that comes back (once per exporter's
// pool), import the block's pointer. As natively, the flags must be
// cudaIpcMemLazyEnablePeerAccess, a handle opened in the process that made
// it is an invalid context, opening a handle again gives the same pointer
// and counts one more open, and the memory stays mapped until the last
// close, whatever the exporter does meanwhile (it may free the block or
// exit: measured natively and with pool imports on an H200). A handle whose
// block the exporter has freed fails with an invalid value, as natively;
// so does one whose exporter cannot be reached, with a message saying why.
#include "core/hooks.hpp"
#include "core/ipc_protocol.hpp"
#include "cuda/calling_thread.hpp"
#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "state/shim_state.hpp"
#include "state/statistics.hpp"
#include "support/ipc_handle.hpp"
#include "support/log.hpp"
#include "support/unix_channel.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace asyncshim::shim {
namespace {

// Held from a missed reopen until the import is recorded, and from a last
// close until the block is unmapped: a close racing an open of the same
// block never unmaps the fresh open (the driver gives it the same address).
std::mutex import_mutex;

// Where the handle came from, for messages (the callers may throw
// std::bad_alloc: the hooks catch it).
std::string origin(ipc_handle const& h)
{
  return fmt::format("process {} of user {}, device {}, channel {}{:016x}", h.pid, h.uid, h.device, channel_prefix,
                     h.exporter);
}

void say_unreachable(ipc_handle const& h, int error)
{
  log::warn("cudaIpcOpenMemHandle: cannot reach the asyncshim process that made this handle ({}): {}. The "
            "exporting process has exited, or runs in another network namespace (container) than this one; "
            "cudaErrorInvalidValue is returned",
            origin(h),
            error == ECONNREFUSED || error == ENOENT ? "nobody listens on its channel" : std::strerror(error));
}

struct answer {
  ipc_reply reply;
  int pool_fd = -1;
  bool received = false;
};

answer ask_exporter(ipc_handle const& h)
{
  answer a;
  int const connection = connect_channel(h.exporter, ipc_timeout_ms);
  if (connection < 0) {
    say_unreachable(h, errno);
    return a;
  }
  uid_t peer = 0;
  if (!peer_user(connection, peer) || peer != geteuid()) {
    (void)close(connection);
    log::warn("cudaIpcOpenMemHandle: the channel named in this handle ({}) belongs to a process of user {}, not "
              "of this process's user {}: not trusted; cudaErrorInvalidValue is returned",
              origin(h), static_cast<unsigned long>(peer), static_cast<unsigned long>(geteuid()));
    return a;
  }
  ipc_request request;
  request.block = h.block;
  if (send_message(connection, &request, sizeof request)) {
    a.received = receive_message(connection, &a.reply, sizeof a.reply, a.pool_fd);
  }
  int const error = errno;
  (void)close(connection);
  if (!a.received) {
    log::warn("cudaIpcOpenMemHandle: the asyncshim process that made this handle ({}) did not answer ({}); "
              "cudaErrorInvalidValue is returned",
              origin(h), std::strerror(error));
  }
  return a;
}

void say_refused(ipc_handle const& h, ipc_status status)
{
  switch (status) {
    case ipc_status::unknown_block: return;  // freed by the exporter: an invalid value, as natively, no message
    case ipc_status::other_user:
      log::warn("cudaIpcOpenMemHandle: the process that made this handle ({}) shares pool memory only with "
                "processes of its own user; cudaErrorInvalidValue is returned",
                origin(h));
      return;
    case ipc_status::failed:
    case ipc_status::bad_request:
    case ipc_status::ok:
      log::warn("cudaIpcOpenMemHandle: the process that made this handle ({}) cannot share the block (its log "
                "says why); cudaErrorInvalidValue is returned",
                origin(h));
      return;
  }
}

void say_import_failed(char const* what, ipc_handle const& h, CUresult r)
{
  log::warn("cudaIpcOpenMemHandle: cannot import the {} of the process that made this handle ({}): {}", what, origin(h),
            cuda_status{r});
}

// The exporter's pool, imported from the descriptor that came with the answer (and closed here).
CUresult imported_pool(shim_state& s, ipc_handle const& h, answer const& a, CUmemoryPool& pool)
{
  auto const& drv = driver();
  if (auto const known = s.imports.pool(h.exporter, a.reply.device, a.reply.pool_generation)) {
    if (a.pool_fd >= 0) { (void)close(a.pool_fd); }
    pool = static_cast<CUmemoryPool>(*known);
    return CUDA_SUCCESS;
  }
  if (a.pool_fd < 0 || drv.mem_pool_import_from_shareable_handle == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
  CUresult const r = drv.mem_pool_import_from_shareable_handle(
    &pool, reinterpret_cast<void*>(static_cast<std::intptr_t>(a.pool_fd)), CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  (void)close(a.pool_fd);  // the import keeps what it needs
  if (r != CUDA_SUCCESS) { return r; }
  if (!s.imports.keep_pool(h.exporter, a.reply.device, a.reply.pool_generation, pool)) {
    if (drv.mem_pool_destroy != nullptr) { (void)drv.mem_pool_destroy(pool); }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  return CUDA_SUCCESS;
}

// Natively the memory is mapped where the calling thread's context is: a
// block whose pool lives on another device needs access from this one.
void give_current_device_access(CUmemoryPool pool, CUdeviceptr ptr) noexcept
{
  auto const& drv = driver();
  CUdevice current = 0;
  int resident = 0;
  if (drv.ctx_get_device == nullptr || drv.pointer_get_attribute == nullptr || drv.mem_pool_set_access == nullptr ||
      drv.ctx_get_device(&current) != CUDA_SUCCESS ||
      drv.pointer_get_attribute(&resident, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) != CUDA_SUCCESS ||
      resident == current) {
    return;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = current;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult const r = drv.mem_pool_set_access(pool, &access, 1); r != CUDA_SUCCESS) {
    log::warn("cudaIpcOpenMemHandle: cannot give device {} access to the imported block on device {} ({})", current,
              resident, cuda_status{r});
  }
}

CUresult open_shim_handle(shim_state& s, ipc_handle const& h, CUdeviceptr* ptr, unsigned flags)
{
  if (ptr == nullptr || flags != CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) { return CUDA_ERROR_INVALID_VALUE; }
  if (!context_is_current()) { return CUDA_ERROR_INVALID_CONTEXT; }
  if (h.exporter == own_channel_id()) { return CUDA_ERROR_INVALID_CONTEXT; }  // as natively in the exporting process
  if (auto const open = s.imports.reopen(h.exporter, h.block)) {
    *ptr = static_cast<CUdeviceptr>(*open);
    return CUDA_SUCCESS;
  }
  std::lock_guard importing{import_mutex};
  if (auto const open = s.imports.reopen(h.exporter, h.block)) {  // opened meanwhile by another thread
    *ptr = static_cast<CUdeviceptr>(*open);
    return CUDA_SUCCESS;
  }
  answer const a = ask_exporter(h);
  if (!a.received) { return CUDA_ERROR_INVALID_VALUE; }
  if (a.reply.status != ipc_status::ok || a.reply.size != h.size || a.reply.device != h.device) {
    if (a.pool_fd >= 0) { (void)close(a.pool_fd); }
    say_refused(h, a.reply.status);
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto const& drv = driver();
  CUmemoryPool pool = nullptr;
  if (CUresult const r = imported_pool(s, h, a, pool); r != CUDA_SUCCESS) {
    say_import_failed("pool", h, r);
    return r;
  }
  CUmemPoolPtrExportData data{};
  std::memcpy(&data, a.reply.data.data(), sizeof data);
  CUdeviceptr imported = 0;
  CUresult const r = drv.mem_pool_import_pointer != nullptr ? drv.mem_pool_import_pointer(&imported, pool, &data)
                                                            : CUDA_ERROR_INVALID_VALUE;
  if (r != CUDA_SUCCESS) {
    say_import_failed("block", h, r);
    return r;
  }
  give_current_device_access(pool, imported);
  try {
    s.imports.add(h.exporter, h.block, static_cast<std::uintptr_t>(imported));
  } catch (...) {
    if (drv.mem_free != nullptr) { (void)drv.mem_free(imported); }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (s.stats != nullptr) {
    CUdevice device = 0;
    if (drv.ctx_get_device == nullptr || drv.ctx_get_device(&device) != CUDA_SUCCESS) { device = -1; }
    s.stats->block_imported(device);
    report_at_exit(s.sources);  // a process that only imports has its report too
  }
  *ptr = imported;
  if (log::enabled(log::log_level::debug)) {
    log::debug("cudaIpcOpenMemHandle: block {} of {} ({}) opened at {:#x}", h.block, origin(h), byte_count{h.size},
               imported);
  }
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace asyncshim::shim

CUresult asyncshim_hook_ipc_open_mem_handle(CUdeviceptr* ptr, CUipcMemHandle handle, unsigned int flags) noexcept
{
  using namespace asyncshim::shim;
  std::optional<ipc_handle> const ours = decode_ipc_handle(reinterpret_cast<unsigned char const*>(handle.reserved));
  shim_state* s = ours ? active_state() : nullptr;
  if (s == nullptr) {  // a driver handle, or the shim is off here: the driver answers
    return call_real(driver().ipc_open_mem_handle, ptr, handle, flags);
  }
  try {
    return open_shim_handle(*s, *ours, ptr, flags);
  } catch (...) {  // a message without host memory
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

CUresult asyncshim_hook_ipc_close_mem_handle(CUdeviceptr ptr) noexcept
{
  using namespace asyncshim::shim;
  auto const address = static_cast<std::uintptr_t>(ptr);
  shim_state* s = existing_state();
  // Checked before the lock, which an open holds while it asks its exporter:
  // closing anything else never waits for that.
  if (s != nullptr && s->imports.contains(address)) {
    std::lock_guard closing{import_mutex};
    switch (s->imports.close(address)) {
      case import_close::not_imported: break;  // closed meanwhile by another thread
      case import_close::still_open: return CUDA_SUCCESS;
      // An imported block is unmapped by freeing it (the real cuMemFree, not the shim's).
      case import_close::last_close: return call_real(driver().mem_free, ptr);
    }
  }
  return call_real(driver().ipc_close_mem_handle, ptr);
}
