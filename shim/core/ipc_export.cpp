// cudaIpcGetMemHandle / cuIpcGetMemHandle on the shim's pool memory, and the
// channel that answers the processes opening such handles.
//
// A pool block has no driver handle (natively an invalid value). Where the
// block's pool is exportable (ASYNCSHIM_EXPORT_HANDLE_TYPE=auto or
// posix_file_descriptor), the shim exports the block once with
// cuMemPoolExportPointer and gives out its own handle (support/ipc_handle.hpp)
// naming the block. A process opening that handle under the shim asks this
// process's channel (support/unix_channel.hpp) for the export data and the
// pool's descriptor, and imports both (core/ipc_import.cpp). The channel's
// thread makes no CUDA call: everything it sends was made when the handle was.
//
// Memory the shim passed through to the native allocator keeps native IPC:
// the real call answers for it.
#include "core/hooks.hpp"
#include "core/ipc_protocol.hpp"
#include "core/lookup_redirect.hpp"
#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "state/shim_state.hpp"
#include "state/statistics.hpp"
#include "state/stream_tracker.hpp"
#include "support/background_thread.hpp"
#include "support/log.hpp"
#include "support/unix_channel.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace asyncshim::shim {
namespace {

// The process's channel: bound and served from the first export on.
struct channel_state {
  std::mutex mutex;
  bool tried = false;
  int fd = -1;
  std::atomic<std::uint64_t> id{0};
};

channel_state& channel() noexcept
{
  static channel_state state;  // trivially destructible: usable from exit handlers and the channel's thread
  return state;
}

// A child made by fork must not keep the parent's name bound: should the
// parent exit first, importers would connect to a socket nobody accepts on.
void close_channel_in_child() noexcept
{
  channel_state& c = channel();
  if (c.fd >= 0) { (void)close(c.fd); }
  c.fd = -1;
  c.id.store(0, std::memory_order_relaxed);
}

void refuse_other_user(bool known, uid_t uid) noexcept
{
  static std::atomic<bool> said{false};
  if (said.exchange(true)) { return; }
  log::warn("refused a process of user {} that asked for pool memory shared with a legacy IPC handle: asyncshim "
            "shares pool memory only between processes of one user (this process runs as user {})",
            known ? std::to_string(uid) : std::string{"unknown"}, static_cast<unsigned long>(geteuid()));
}

// How long the channel waits for a request: short, as one process at a
// time is answered (an importer waits for its answer for ipc_timeout_ms).
constexpr int request_timeout_ms = 1000;
constexpr int look_every_ms = 1000;  // at whether the program's threads have ended

void answer(shim_state& s, int connection)
{
  ipc_reply reply;
  ipc_request request;
  int stray_fd = -1;
  bool const received = receive_message(connection, &request, sizeof request, stray_fd);
  if (stray_fd >= 0) { (void)close(stray_fd); }
  uid_t peer = 0;
  bool const known = peer_user(connection, peer);
  if (!known || peer != geteuid()) {
    refuse_other_user(known, peer);
    reply.status = ipc_status::other_user;
    (void)send_message(connection, &reply, sizeof reply);
    return;
  }
  if (!received) { return; }  // gone, or not the shim
  if (request.magic != ipc_request_magic || request.version != ipc_protocol_version) {
    reply.status = ipc_status::bad_request;
    (void)send_message(connection, &reply, sizeof reply);
    return;
  }
  s.exports.note_request();
  std::optional<exported_block> const block = s.exports.find(request.block);
  std::optional<pool_share> const share = block ? s.exports.pool_share_copy(block->device) : std::nullopt;
  if (!block) {
    reply.status = ipc_status::unknown_block;
  } else if (!share) {
    reply.status = ipc_status::failed;
  } else {
    reply.status = ipc_status::ok;
    reply.device = block->device;
    reply.size = block->size;
    reply.pool_generation = share->generation;
    reply.data = block->data;
  }
  (void)send_message(connection, &reply, sizeof reply, share ? share->fd : -1);
  if (share) { (void)close(share->fd); }
}

void* serve(void* state) noexcept
{
  auto& s = *static_cast<shim_state*>(state);
  int const listening = channel().fd;
  auto next_look = std::chrono::steady_clock::now() + std::chrono::milliseconds{look_every_ms};
  for (;;) {
    // Once a second, requests or not: when the program's threads have all
    // ended, the thread ends.
    pollfd waiting{listening, POLLIN, 0};
    int const ready = poll(&waiting, 1, look_every_ms);
    if (auto const now = std::chrono::steady_clock::now(); now >= next_look) {
      if (only_background_threads_left()) { return nullptr; }
      next_look = now + std::chrono::milliseconds{look_every_ms};
    }
    if (ready < 0) {
      (void)poll(nullptr, 0, 100);  // no memory for the poll: the thread does not spin
      continue;
    }
    if (ready == 0) { continue; }
    int const connection = accept_connection(listening, request_timeout_ms);
    if (connection < 0) {
      if (errno == EBADF || errno == EINVAL || errno == ENOTSOCK) { return nullptr; }
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        (void)poll(nullptr, 0, 100);  // no descriptor for now: the connection waits, the thread does not spin
      }
      continue;
    }
    try {
      answer(s, connection);
    } catch (...) {  // no host memory: this importer is not answered (it says so)
    }
    (void)close(connection);
  }
}

// Binds the channel and starts its thread, once; false when either fails (said once).
bool channel_ready(shim_state& s)
{
  channel_state& c = channel();
  std::lock_guard lock{c.mutex};
  if (c.tried) { return c.id.load(std::memory_order_relaxed) != 0; }
  c.tried = true;
  listening_channel const opened = open_channel();
  if (opened.fd < 0) {
    log::warn("cannot open the channel for legacy IPC handles of pool memory (a Unix socket: {}): "
              "cudaIpcGetMemHandle on pool memory fails as natively",
              std::strerror(opened.error));
    return false;
  }
  c.fd = opened.fd;
  (void)pthread_atfork(nullptr, nullptr, close_channel_in_child);
  if (int const made = start_background_thread(serve, &s, "asyncshim-ipc"); made != 0) {
    (void)close(c.fd);
    c.fd = -1;
    log::warn("cannot start the thread that answers legacy IPC handles of pool memory ({}): cudaIpcGetMemHandle "
              "on pool memory fails as natively",
              std::strerror(made));
    return false;
  }
  c.id.store(opened.id, std::memory_order_release);
  log::debug("legacy IPC channel {}{:016x} open", channel_prefix, opened.id);
  return true;
}

// Said once when handles were given out and no process opened one through
// the shim: the likely reason is an importer without it.
void say_if_never_opened() noexcept
{
  shim_state* s = existing_state();
  if (s == nullptr || s->exports.requested() || s->exports.ever_exported() == 0) { return; }
  log::warn("{} legacy IPC handle(s) of pool memory (cudaIpcGetMemHandle) were given out and no process opened one "
            "through asyncshim: such a handle opens only in a process of the same user that runs under asyncshim "
            "(LD_PRELOAD=libasyncshim.so) on the same host; elsewhere cudaIpcOpenMemHandle returns "
            "cudaErrorInvalidValue. Run the exporting process with ASYNCSHIM_DISABLE=1 to share with such processes",
            s->exports.ever_exported());
}

// The pool's descriptor for importers of `device`'s blocks, made once.
CUresult pool_share_ready(shim_state& s, int device, cuda_async_memory_resource& pool) noexcept
{
  int fd = -1;
  try {
    if (s.exports.pool_share_of(device)) { return CUDA_SUCCESS; }
    auto const& drv = driver();
    if (drv.mem_pool_export_to_shareable_handle == nullptr) { return CUDA_ERROR_NOT_SUPPORTED; }
    CUresult const r = drv.mem_pool_export_to_shareable_handle(&fd, reinterpret_cast<CUmemoryPool>(pool.pool_handle()),
                                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) { return r; }
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);  // never inherited by a program the process runs
    (void)s.exports.keep_pool_share(device, fd);
    return CUDA_SUCCESS;
  } catch (...) {
    if (fd >= 0) { (void)close(fd); }
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}

// The block of the shim's pool that `ptr` lies in: its start and record.
std::optional<std::pair<std::uintptr_t, allocation_record>> pool_block_of(shim_state& s, CUdeviceptr ptr) noexcept
{
  auto const* start = reinterpret_cast<void const*>(ptr);
  if (auto const record = s.registry.find(start)) { return std::pair{static_cast<std::uintptr_t>(ptr), *record}; }
  // Natively a handle of an address inside an allocation is the allocation's handle.
  auto const& drv = driver();
  CUdeviceptr base = 0;
  std::size_t size = 0;
  if (drv.mem_get_address_range == nullptr || drv.mem_get_address_range(&base, &size, ptr) != CUDA_SUCCESS ||
      base == ptr) {
    return std::nullopt;
  }
  if (auto const record = s.registry.find(reinterpret_cast<void const*>(base))) {
    return std::pair{static_cast<std::uintptr_t>(base), *record};
  }
  return std::nullopt;
}

void say_not_exportable(config::handle_type type, CUresult result) noexcept
{
  static std::atomic<bool> said{false};
  if (said.exchange(true)) { return; }
  log::warn("cudaIpcGetMemHandle/cuIpcGetMemHandle failed with {} on memory from the asyncshim pool: legacy IPC "
            "works on pool memory only with ASYNCSHIM_EXPORT_HANDLE_TYPE=auto (the default) or "
            "posix_file_descriptor, and this pool has {}. Unset ASYNCSHIM_EXPORT_HANDLE_TYPE, or run this process "
            "with ASYNCSHIM_DISABLE=1",
            cuda_status{result}, config::to_string(type));
}

// Throws std::bad_alloc (no host memory for a message or a record).
CUresult export_block(shim_state& s, std::uintptr_t address, allocation_record const& record, CUipcMemHandle* handle)
{
  if (auto const known = s.exports.handle_of(address)) {
    std::memcpy(handle->reserved, known->data(), known->size());
    return CUDA_SUCCESS;
  }
  cuda_async_memory_resource* pool = s.pools.existing(record.device);
  auto const& drv = driver();
  if (pool == nullptr || drv.mem_pool_export_pointer == nullptr) { return CUDA_ERROR_INVALID_VALUE; }
  if (!channel_ready(s)) { return CUDA_ERROR_INVALID_VALUE; }
  // Another process may use the block at once, in no order with this one's
  // legacy stream: if it came back from an in-order free, the work before
  // that free finishes first (state/stream_tracker.hpp).
  tracker().settle_on_host();
  // The pool's descriptor first: export data made before it cannot be
  // imported (measured on an H200).
  if (CUresult const r = pool_share_ready(s, record.device, *pool); r != CUDA_SUCCESS) {
    log::warn("cannot export the asyncshim pool of device {} for a legacy IPC handle: {}", record.device,
              cuda_status{r});
    return r;
  }
  exported_block block;
  block.address = address;
  block.size = record.bytes;
  block.device = record.device;
  static_assert(sizeof(CUmemPoolPtrExportData) == pool_export_data_size);
  CUmemPoolPtrExportData data{};
  if (CUresult const r = drv.mem_pool_export_pointer(&data, static_cast<CUdeviceptr>(address)); r != CUDA_SUCCESS) {
    log::warn("cannot export a block of the asyncshim pool for a legacy IPC handle: {}", cuda_status{r});
    return r;
  }
  std::memcpy(block.data.data(), &data, sizeof data);
  ipc_handle identity;
  identity.exporter = channel().id.load(std::memory_order_acquire);
  identity.uid = static_cast<std::uint32_t>(geteuid());
  identity.pid = static_cast<std::uint32_t>(getpid());
  std::uint64_t const before = s.exports.ever_exported();
  ipc_handle_bytes const made = s.exports.add(block, identity);
  if (s.exports.ever_exported() > before && s.stats != nullptr) { s.stats->block_exported(record.device); }
  std::memcpy(handle->reserved, made.data(), made.size());
  static std::atomic<bool> first{true};
  if (first.exchange(false)) {
    (void)std::atexit(say_if_never_opened);
    log::info("legacy IPC handles of pool memory are asyncshim's own: they open in processes of user {} that run "
              "under asyncshim, through channel {}{:016x}",
              identity.uid, channel_prefix, identity.exporter);
  }
  return CUDA_SUCCESS;
}

}  // namespace

std::uint64_t own_channel_id() noexcept { return channel().id.load(std::memory_order_acquire); }

}  // namespace asyncshim::shim

CUresult asyncshim_hook_ipc_get_mem_handle(CUipcMemHandle* handle, CUdeviceptr ptr) noexcept
{
  using namespace asyncshim::shim;
  auto const real = [&] { return call_real(driver().ipc_get_mem_handle, handle, ptr); };
  shim_state* s = tracking_active() ? existing_state() : nullptr;
  if (s == nullptr || handle == nullptr) { return real(); }
  auto const block = pool_block_of(*s, ptr);
  if (!block) { return real(); }  // not the shim's: native IPC
  asyncshim::config::handle_type const type = s->pools.export_handle_type(block->second.device);
  if (type != asyncshim::config::handle_type::posix_file_descriptor) {
    CUresult const result = real();  // fails on pool memory, as natively
    if (result != CUDA_SUCCESS) { say_not_exportable(type, result); }
    return result;
  }
  try {
    return export_block(*s, block->first, block->second, handle);
  } catch (...) {  // no host memory
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
}
