// model.cpp: the state of the CUDA TEST DOUBLES: devices, primary contexts,
// memory accounting, the allocation registry, pools, streams, events,
// captures, graphs and the per-thread state (see cuda_double.hpp for the model). Part of the
// driver double, libcuda.so.1; the runtime double reaches it through the
// internal API of model.hpp.
#include "model.hpp"
#include "shared_devices.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string>

namespace cuda_double {
namespace {

constexpr std::uint64_t max64 = std::numeric_limits<std::uint64_t>::max();

// Rounds up to a multiple of granule; false on overflow.
bool round_up(std::uint64_t value, std::uint64_t granule, std::uint64_t& out)
{
  std::uint64_t const rem = value % granule;
  if (rem == 0) {
    out = value;
    return true;
  }
  if (value > max64 - (granule - rem)) { return false; }
  out = value + (granule - rem);
  return true;
}

// The per-thread context stack: trivially destructible, so that it works in
// every thread until the very end (calls from thread-exit destructors included).
struct context_stack {
  context_state* entries[max_context_stack_depth];
  std::size_t depth;
};
thread_local context_stack t_contexts{};

// The rest of the per-thread state; trivially destructible too.
thread_local int t_runtime_calls = 0;           // runtime_call_scope nesting
thread_local std::uint64_t t_thread_token = 0;  // 0 until first asked for
thread_local int t_capture_mode = capture_mode_global;
std::atomic<std::uint64_t> g_next_thread_token{1};

std::atomic<bool> g_initialized{false};

}  // namespace

context_state* current_context() { return t_contexts.depth == 0 ? nullptr : t_contexts.entries[t_contexts.depth - 1]; }

void set_current_context(context_state* context)
{
  if (context == nullptr) {
    if (t_contexts.depth != 0) { --t_contexts.depth; }
  } else if (t_contexts.depth == 0) {
    t_contexts.entries[t_contexts.depth++] = context;
  } else {
    t_contexts.entries[t_contexts.depth - 1] = context;
  }
}

bool push_context(context_state* context)
{
  if (t_contexts.depth == max_context_stack_depth) { return false; }
  t_contexts.entries[t_contexts.depth++] = context;
  return true;
}

context_state* pop_context() { return t_contexts.depth == 0 ? nullptr : t_contexts.entries[--t_contexts.depth]; }

void initialize() { g_initialized.store(true, std::memory_order_release); }
bool initialized() { return g_initialized.load(std::memory_order_acquire); }

cudaError_t availability()
{
  configuration const& c = config();
  if (c.no_driver) { return cudaErrorInsufficientDriver; }
  if (c.devices == 0) { return cudaErrorNoDevice; }
  return cudaSuccess;
}

runtime_call_scope::runtime_call_scope() { ++t_runtime_calls; }
runtime_call_scope::~runtime_call_scope() { --t_runtime_calls; }

std::uint64_t thread_token()
{
  if (t_thread_token == 0) { t_thread_token = g_next_thread_token.fetch_add(1, std::memory_order_relaxed); }
  return t_thread_token;
}

int capture_mode() { return t_capture_mode; }
void set_capture_mode(int mode) { t_capture_mode = mode; }

void count_failure() noexcept
{
  if (t_runtime_calls != 0) {
    return;  // the runtime function counts it
  }
  // model() is built on first use; counting must not fail, so a model that
  // cannot be built (out of memory) is not counted in.
  try {
    model().counters.failed_calls.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
  }
}

model_state& model()
{
  static model_state* const m = new model_state(config());
  return *m;
}

model_state::model_state(configuration const& c)
    : devices_(static_cast<std::size_t>(c.devices)), contexts_(static_cast<std::size_t>(c.devices))
{
  if (c.simulate) { gpu.start(c.simulate_seed, c.simulate_lazy); }
  for (int d = 0; d < c.devices; ++d) {
    contexts_[static_cast<std::size_t>(d)].device = d;
    contexts_[static_cast<std::size_t>(d)].domain = d;
  }
  if (!c.no_pools && !c.no_driver) {
    for (int d = 0; d < c.devices; ++d) {
      device(d).default_pool = &create_pool(d, cudaMemHandleTypeNone, 0, /*is_default=*/true);
    }
  }
}

context_state* model_state::primary_context(int d) { return &contexts_[static_cast<std::size_t>(d)]; }

context_state* model_state::find_context(void const* handle)
{
  for (context_state& c : contexts_) {
    if (&c == handle) { return &c; }
  }
  std::lock_guard lock{made_contexts_mu_};
  for (context_state& c : made_contexts_) {
    if (&c == handle) { return c.destroyed ? nullptr : &c; }
  }
  return nullptr;
}

bool model_state::destroy_context(context_state* context)
{
  std::lock_guard lock{made_contexts_mu_};
  for (context_state& c : made_contexts_) {
    if (&c == context && !c.destroyed) {
      c.destroyed = true;
      return true;
    }
  }
  return false;
}

context_state* model_state::create_context(int d)
{
  std::lock_guard lock{made_contexts_mu_};
  context_state& c = made_contexts_.emplace_back();
  c.device = d;
  c.domain = max_devices + static_cast<int>(made_contexts_.size());
  return &c;
}

std::uint64_t model_state::free_bytes(int d)
{
  device_state const& dev = device(d);
  std::uint64_t const taken = dev.used + dev.reserved + shared_devices().taken_by_others(d);
  return taken >= config().memory ? 0 : config().memory - taken;
}

void model_state::taken_changed(int d)
{
  device_state const& dev = device(d);
  shared_devices().publish(d, dev.used + dev.reserved);
}

allocation_record const* model_state::find_allocation(void const* p) const
{
  auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(p));
  return it == allocations_.end() ? nullptr : &it->second;
}

std::pair<void*, allocation_record const*> model_state::allocation_containing(void const* p) const
{
  auto const addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = allocations_.upper_bound(addr);
  if (it == allocations_.begin()) { return {nullptr, nullptr}; }
  --it;
  if (addr - it->first >= it->second.size) { return {nullptr, nullptr}; }
  return {reinterpret_cast<void*>(it->first), &it->second};
}

bool model_state::range_ok(void const* p, std::size_t count) const
{
  auto [base, a] = allocation_containing(p);
  if (a == nullptr) { return true; }
  std::size_t const offset = static_cast<char const*>(p) - static_cast<char const*>(base);
  return count <= a->size - offset;
}

void* model_state::host_allocate(std::size_t size, std::size_t alignment)
{
  if (size > std::numeric_limits<std::size_t>::max() - alignment) { return nullptr; }
  std::size_t const rounded = (size + alignment - 1) / alignment * alignment;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, rounded) != 0) { return nullptr; }
  return p;
}

void model_state::insert_allocation(void* p, allocation_record const& a)
{
  try {
    auto const [it, inserted] = allocations_.emplace(reinterpret_cast<std::uintptr_t>(p), a);
    if (inserted) { it->second.serial = next_allocation_serial_++; }
  } catch (...) {
    free_memory(p, a);
    throw;
  }
}

void model_state::free_memory(void* p, allocation_record const& a)
{
  if (a.kind == allocation_kind::imported) {
    return;  // the imported pool's mapping, which stays until the pool goes
  }
  if (a.pool != nullptr && a.pool->arena.base != nullptr) {
    arena_free(a.pool->arena, p, a.size);
  } else {
    std::free(p);
  }
}

namespace {

std::uint64_t arena_length(std::size_t size)
{
  return (std::uint64_t{size} + allocation_alignment - 1) / allocation_alignment * allocation_alignment;
}

}  // namespace

bool model_state::create_arena(arena_state& arena, int device)
{
  std::uint64_t const size = config().memory;
  if (size == 0 || size > static_cast<std::uint64_t>(std::numeric_limits<off_t>::max())) { return false; }
  std::string const name = "cuda_double_arena." + std::to_string(device);
  int const fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0) { return false; }
  struct stat st {};
  if (ftruncate(fd, static_cast<off_t>(size)) != 0 || fstat(fd, &st) != 0) {
    close(fd);
    return false;
  }
  // MAP_NORESERVE: the arena is as large as the device, but only what is
  // written is ever backed.
  void* const base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) {
    close(fd);
    return false;
  }
  arena.fd = fd;
  arena.base = static_cast<char*>(base);
  arena.size = size;
  arena.file_device = static_cast<std::uint64_t>(st.st_dev);
  arena.file_inode = static_cast<std::uint64_t>(st.st_ino);
  arena.free.clear();
  arena.free.emplace(0, size);
  return true;
}

void model_state::close_arena(arena_state& arena)
{
  if (arena.base != nullptr) { munmap(arena.base, arena.size); }
  if (arena.fd >= 0) { close(arena.fd); }
  arena = arena_state{};
}

void* model_state::arena_allocate(arena_state& arena, std::size_t size)
{
  std::uint64_t const length = arena_length(size);
  // First fit: the lowest offset that has room, so freed ranges are reused.
  for (auto it = arena.free.begin(); it != arena.free.end(); ++it) {
    if (it->second < length) { continue; }
    std::uint64_t const offset = it->first;
    std::uint64_t const rest = it->second - length;
    arena.free.erase(it);
    if (rest != 0) { arena.free.emplace(offset + length, rest); }
    return arena.base + offset;
  }
  return nullptr;
}

void model_state::arena_free(arena_state& arena, void* p, std::size_t size)
{
  std::uint64_t offset = static_cast<std::uint64_t>(static_cast<char*>(p) - arena.base);
  std::uint64_t length = arena_length(size);
  // Coalesce with the free neighbours, so that alloc/free cycles never fragment it.
  auto next = arena.free.lower_bound(offset);
  if (next != arena.free.end() && next->first == offset + length) {
    length += next->second;
    next = arena.free.erase(next);
  }
  if (next != arena.free.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      length += prev->second;
      arena.free.erase(prev);
    }
  }
  arena.free.emplace(offset, length);
}

void model_state::arena_release_free_pages(arena_state& arena)
{
  if (arena.fd < 0) { return; }
  auto const page = static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
  for (auto const& [offset, length] : arena.free) {
    std::uint64_t const first = (offset + page - 1) / page * page;
    std::uint64_t const end = (offset + length) / page * page;
    if (end > first) {
      // Best effort: the bytes of free ranges are unspecified anyway.
      (void)fallocate(arena.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(first),
                      static_cast<off_t>(end - first));
    }
  }
}

operation_outcome model_state::allocate_native(int d, std::size_t size, allocation_kind kind, void** out,
                                               std::size_t alignment)
{
  if (size > free_bytes(d)) { return operation_outcome::out_of_memory; }
  void* p = host_allocate(size, alignment);
  if (p == nullptr) { return operation_outcome::out_of_memory; }
  insert_allocation(p, allocation_record{size, d, nullptr, kind, 0});
  device(d).used += size;
  taken_changed(d);
  *out = p;
  return operation_outcome::ok;
}

operation_outcome model_state::allocate_host(int d, std::size_t size, unsigned flags, void** out)
{
  void* p = host_allocate(size);
  if (p == nullptr) { return operation_outcome::out_of_memory; }
  allocation_record a{size, d, nullptr, allocation_kind::host, 0};
  a.host_flags = flags;
  insert_allocation(p, a);
  *out = p;
  return operation_outcome::ok;
}

operation_outcome model_state::allocate_from_pool(pool_state& pool, std::size_t size, void** out, std::uint64_t capture,
                                                  void* reuse)
{
  if (size > max64 - pool.used - pool.kept) { return operation_outcome::out_of_memory; }
  // A reused kept block brings its own bytes; any other allocation needs room beside the kept ones.
  bool const reuses_kept = reuse != nullptr && pool.kept >= size;
  std::uint64_t const needed = pool.used + size;
  std::uint64_t const taken = reuses_kept ? pool.used + pool.kept : needed + pool.kept;
  std::uint64_t new_reserved = pool.reserved;
  if (taken > pool.reserved) {
    if (pool.max_size != 0 && taken > pool.max_size) { return operation_outcome::out_of_memory; }
    if (!round_up(taken, pool_granularity, new_reserved)) { return operation_outcome::out_of_memory; }
    if (pool.max_size != 0) { new_reserved = std::min(new_reserved, pool.max_size); }
    if (!pool.on_host && new_reserved - pool.reserved > free_bytes(pool.device)) {
      return operation_outcome::out_of_memory;
    }
  }
  void* p = reuse != nullptr             ? reuse
            : pool.arena.base != nullptr ? arena_allocate(pool.arena, size)
                                         : host_allocate(size);
  if (p == nullptr) { return operation_outcome::out_of_memory; }
  insert_allocation(p, allocation_record{size, pool.device, &pool, allocation_kind::pool, capture});
  set_reserved(pool, new_reserved);
  if (reuses_kept) { pool.kept -= size; }
  pool.used = needed;
  pool.used_high = std::max(pool.used_high, pool.used);
  *out = p;
  return operation_outcome::ok;
}

void model_state::release(void* p)
{
  auto it = allocations_.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == allocations_.end()) { return; }
  allocation_record const a = it->second;
  allocations_.erase(it);
  if (a.kind == allocation_kind::imported) {
    // Never counted: the exporting process's pool holds these bytes.
  } else if (a.pool != nullptr) {
    a.pool->used -= a.size;
  } else if (a.kind == allocation_kind::host) {
    // Host memory: no device's.
  } else {
    device(a.device).used -= a.size;
    taken_changed(a.device);
  }
  if (gpu.on() && a.kind == allocation_kind::pool) {
    if (config().tight_pool) { a.pool->kept += a.size; }
    gpu.keep({reinterpret_cast<std::uintptr_t>(p), a.size, a.pool, freeing_on, freeing_task});
    return;
  }
  free_memory(p, a);
}

void model_state::release_kept(pool_state& pool, bool only_finished)
{
  gpu.release_kept(&pool, only_finished, [&](virtual_gpu::kept_block const& b) {
    allocation_record a;
    a.size = b.size;
    a.pool = &pool;
    a.kind = allocation_kind::pool;
    pool.kept -= std::min<std::uint64_t>(pool.kept, b.size);
    free_memory(reinterpret_cast<void*>(b.address), a);
  });
}

void model_state::release_captured(std::uint64_t capture)
{
  std::vector<void*> doomed;
  for (auto const& [address, a] : allocations_) {
    if (a.capture == capture) { doomed.push_back(reinterpret_cast<void*>(address)); }
  }
  for (void* p : doomed) {
    release(p);
  }
}

pool_state* model_state::find_pool(void const* handle)
{
  auto* pool = static_cast<pool_state*>(const_cast<void*>(handle));
  return live_pools_.count(pool) != 0 ? pool : nullptr;
}

pool_state& model_state::create_pool(int d, unsigned handle_types, std::uint64_t max_size, bool is_default)
{
  auto pool = std::make_unique<pool_state>();
  pool->id = all_pools_.size() + 1;
  pool->device = d;
  pool->handle_types = handle_types;
  pool->max_size = max_size;
  pool->is_default = is_default;
  pool->alive = false;  // until it is in live_pools_
  // Memory another process can map: the POSIX file descriptor it exports
  // names this arena (export_pool).
  if ((handle_types & cudaMemHandleTypePosixFileDescriptor) != 0 && !create_arena(pool->arena, d)) {
    throw std::bad_alloc();
  }
  pool_state* raw = pool.get();
  try {
    all_pools_.push_back(std::move(pool));
    live_pools_.insert(raw);
  } catch (...) {
    close_arena(raw->arena);
    throw;
  }
  raw->alive = true;
  return *raw;
}

pool_state* model_state::find_imported_pool(std::uint64_t file_device, std::uint64_t file_inode)
{
  for (pool_state* pool : live_pools_) {
    if (pool->imported && pool->arena.file_device == file_device && pool->arena.file_inode == file_inode) {
      return pool;
    }
  }
  return nullptr;
}

operation_outcome model_state::import_pool(int d, int fd, std::uint64_t file_device, std::uint64_t file_inode,
                                           std::uint64_t size, pool_state*& out)
{
  // The mapping keeps the file alive: the caller may close its descriptor at once.
  void* const base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (base == MAP_FAILED) { return operation_outcome::out_of_memory; }
  auto pool = std::make_unique<pool_state>();
  pool->id = all_pools_.size() + 1;
  pool->device = d;
  pool->handle_types = cudaMemHandleTypePosixFileDescriptor;
  pool->imported = true;
  pool->arena.base = static_cast<char*>(base);
  pool->arena.size = size;
  pool->arena.file_device = file_device;
  pool->arena.file_inode = file_inode;
  pool_state* raw = pool.get();
  try {
    all_pools_.push_back(std::move(pool));
    live_pools_.insert(raw);
  } catch (...) {
    munmap(base, size);
    throw;
  }
  out = raw;
  return operation_outcome::ok;
}

void* model_state::import_allocation(pool_state& pool, std::uint64_t offset, std::uint64_t size)
{
  char* const p = pool.arena.base + offset;
  auto const start = reinterpret_cast<std::uintptr_t>(p);
  auto same = allocations_.find(start);
  if (same != allocations_.end() && same->second.size == size) {
    return p;  // no reference count: one free ends it (as measured)
  }
  // Earlier imports whose bytes this block overlaps are stale (the exporter
  // freed them and reused the bytes): they are forgotten.
  auto it = allocations_.lower_bound(start);
  if (it != allocations_.begin()) {
    auto before = std::prev(it);
    if (before->first + before->second.size > start) { it = before; }
  }
  while (it != allocations_.end() && it->first < start + size) {
    it = it->second.pool == &pool ? allocations_.erase(it) : std::next(it);
  }
  insert_allocation(
    p, allocation_record{static_cast<std::size_t>(size), pool.device, &pool, allocation_kind::imported, 0});
  return p;
}

int model_state::imported_allocations() const
{
  int n = 0;
  for (auto const& [address, a] : allocations_) {
    if (a.kind == allocation_kind::imported) { ++n; }
  }
  return n;
}

void model_state::destroy_pool(pool_state& pool)
{
  release_kept(pool, /*only_finished=*/false);
  for (auto it = allocations_.begin(); it != allocations_.end();) {
    if (it->second.pool == &pool) {
      if (it->second.kind != allocation_kind::imported && pool.arena.base == nullptr) {
        std::free(reinterpret_cast<void*>(it->first));
      }
      it = allocations_.erase(it);
    } else {
      ++it;
    }
  }
  if (!pool.on_host) {
    device(pool.device).reserved -= pool.reserved;
    taken_changed(pool.device);
  }
  close_arena(pool.arena);
  pool.reserved = 0;
  pool.used = 0;
  pool.alive = false;
  live_pools_.erase(&pool);
}

void model_state::set_reserved(pool_state& pool, std::uint64_t reserved)
{
  if (reserved < pool.reserved) { arena_release_free_pages(pool.arena); }
  if (!pool.on_host) {
    device_state& dev = device(pool.device);
    dev.reserved = dev.reserved - pool.reserved + reserved;
  }
  pool.reserved = reserved;
  pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
  if (!pool.on_host) { taken_changed(pool.device); }
}

access_level model_state::pool_access(pool_state const& pool, int d)
{
  if (d == pool.device) { return access_level::read_write; }
  auto const i = static_cast<std::size_t>(d);
  return d >= 0 && i < pool.access.size() ? pool.access[i] : access_level::none;
}

void model_state::set_pool_access(pool_state& pool, int d, access_level access)
{
  auto const i = static_cast<std::size_t>(d);
  if (pool.access.size() <= i) { pool.access.resize(static_cast<std::size_t>(device_count()), access_level::none); }
  pool.access[i] = access;
}

bool model_state::can_access(int d, allocation_record const& a)
{
  if (!valid_device(d)) { return false; }
  if (a.pool != nullptr) { return pool_access(*a.pool, d) != access_level::none; }
  if (a.kind == allocation_kind::host) { return true; }  // pinned host memory: every device
  return d == a.device || peer_enabled(*primary_context(d), *primary_context(a.device));
}

void model_state::trim_pool(pool_state& pool, std::uint64_t keep)
{
  release_kept(pool, /*only_finished=*/true);
  std::uint64_t const target = std::max(pool.used + pool.kept, std::min(pool.reserved, keep));
  if (pool.reserved > target) { set_reserved(pool, target); }
}

void model_state::trim_pools(int d)
{
  for (pool_state* pool : live_pools_) {
    if (pool->device != d) { continue; }
    // A tight pool under its release threshold keeps its pieces as they are.
    if (config().tight_pool && pool->reserved <= pool->release_threshold) { continue; }
    release_kept(*pool, /*only_finished=*/true);
    std::uint64_t const keep = std::max(pool->used + pool->kept, pool->release_threshold);
    if (pool->reserved > keep) { set_reserved(*pool, keep); }
  }
}

operation_outcome model_state::set_pool_attribute(pool_state& pool, int attr, void const* value)
{
  auto const as_int = [value] { return *static_cast<int const*>(value); };
  auto const as_u64 = [value] { return *static_cast<std::uint64_t const*>(value); };
  switch (static_cast<cudaMemPoolAttr>(attr)) {
    case cudaMemPoolReuseFollowEventDependencies: pool.reuse_follow_event_dependencies = as_int() != 0; break;
    case cudaMemPoolReuseAllowOpportunistic: pool.reuse_allow_opportunistic = as_int() != 0; break;
    case cudaMemPoolReuseAllowInternalDependencies: pool.reuse_allow_internal_dependencies = as_int() != 0; break;
    case cudaMemPoolAttrReleaseThreshold: pool.release_threshold = as_u64(); break;
    case cudaMemPoolAttrReservedMemHigh:  // only a reset (to the current value) is allowed
      if (as_u64() != 0) { return operation_outcome::invalid_value; }
      pool.reserved_high = pool.reserved;
      break;
    case cudaMemPoolAttrUsedMemHigh:
      if (as_u64() != 0) { return operation_outcome::invalid_value; }
      pool.used_high = pool.used;
      break;
    default: return operation_outcome::invalid_value;  // the *Current ones are read-only
  }
  return operation_outcome::ok;
}

operation_outcome model_state::get_pool_attribute(pool_state const& pool, int attr, void* value)
{
  auto const as_int = [value] { return static_cast<int*>(value); };
  auto const as_u64 = [value] { return static_cast<std::uint64_t*>(value); };
  switch (static_cast<cudaMemPoolAttr>(attr)) {
    case cudaMemPoolReuseFollowEventDependencies: *as_int() = pool.reuse_follow_event_dependencies; break;
    case cudaMemPoolReuseAllowOpportunistic: *as_int() = pool.reuse_allow_opportunistic; break;
    case cudaMemPoolReuseAllowInternalDependencies: *as_int() = pool.reuse_allow_internal_dependencies; break;
    case cudaMemPoolAttrReleaseThreshold: *as_u64() = pool.release_threshold; break;
    case cudaMemPoolAttrReservedMemCurrent: *as_u64() = pool.reserved; break;
    case cudaMemPoolAttrReservedMemHigh: *as_u64() = pool.reserved_high; break;
    case cudaMemPoolAttrUsedMemCurrent: *as_u64() = pool.used; break;
    case cudaMemPoolAttrUsedMemHigh: *as_u64() = pool.used_high; break;
    default: return operation_outcome::invalid_value;
  }
  return operation_outcome::ok;
}

bool model_state::is_special_stream(cudaStream_t s)
{
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

bool model_state::valid_stream(cudaStream_t s) const
{
  return is_special_stream(s) || live_streams_.count(reinterpret_cast<stream_state*>(s)) != 0;
}

int model_state::stream_device(cudaStream_t s, int current_device) const
{
  return is_special_stream(s) ? current_device : reinterpret_cast<stream_state const*>(s)->device;
}

stream_state* model_state::find_stream(cudaStream_t s)
{
  auto* stream = reinterpret_cast<stream_state*>(s);
  return !is_special_stream(s) && live_streams_.count(stream) != 0 ? stream : nullptr;
}

stream_state* model_state::find_stream_ever(cudaStream_t s)
{
  auto const found =
    std::find_if(all_streams_.begin(), all_streams_.end(),
                 [&](std::unique_ptr<stream_state> const& t) { return t.get() == reinterpret_cast<stream_state*>(s); });
  return found == all_streams_.end() ? nullptr : found->get();
}

cudaStream_t model_state::create_stream(int d, unsigned flags, int priority)
{
  auto stream = std::make_unique<stream_state>();
  stream->device = d;
  context_state const* const current = current_context();
  stream->domain = current != nullptr && current->device == d ? current->domain : d;
  stream->flags = flags;
  stream->priority = std::clamp(priority, greatest_stream_priority, least_stream_priority);
  stream_state* raw = stream.get();
  all_streams_.push_back(std::move(stream));
  live_streams_.insert(raw);
  return reinterpret_cast<cudaStream_t>(raw);
}

bool model_state::destroy_stream(cudaStream_t s)
{
  stream_state* stream = find_stream(s);
  if (stream == nullptr) { return false; }
  if (capture_state* c = find_capture(stream->capture)) { end_capture(*c, /*release_allocations=*/true); }
  live_streams_.erase(stream);
  return true;
}

event_state* model_state::find_event(void const* handle)
{
  auto* event = static_cast<event_state*>(const_cast<void*>(handle));
  return live_events_.count(event) != 0 ? event : nullptr;
}

void* model_state::create_event(int d, unsigned flags)
{
  auto event = std::make_unique<event_state>();
  event->device = d;
  event->flags = flags;
  event_state* raw = event.get();
  all_events_.push_back(std::move(event));
  live_events_.insert(raw);
  return raw;
}

bool model_state::destroy_event(void const* handle)
{
  return live_events_.erase(static_cast<event_state*>(const_cast<void*>(handle))) != 0;
}

capture_state* model_state::capture_of(cudaStream_t s, int d)
{
  if (is_legacy_stream(s)) { return nullptr; }
  if (s == cudaStreamPerThread) {
    std::uint64_t const me = thread_token();
    for (auto& [id, c] : captures_) {
      if (c.stream == nullptr && c.thread == me && c.device == d) { return &c; }
    }
    return nullptr;
  }
  stream_state* stream = find_stream(s);
  return stream == nullptr ? nullptr : find_capture(stream->capture);
}

capture_state* model_state::find_capture(std::uint64_t id)
{
  auto it = captures_.find(id);
  return it == captures_.end() ? nullptr : &it->second;
}

capture_state& model_state::begin_capture(cudaStream_t s, int d, int mode)
{
  std::uint64_t const id = next_capture_id_++;
  capture_state& c = captures_[id];
  c.id = id;
  c.device = d;
  c.thread = thread_token();
  c.mode = mode;
  if (s != cudaStreamPerThread) {
    c.stream = find_stream(s);
    c.stream->capture = id;
    c.blocking = (c.stream->flags & cudaStreamNonBlocking) == 0;
  }
  return c;
}

void model_state::end_capture(capture_state& capture, bool release_allocations)
{
  std::uint64_t const id = capture.id;
  if (capture.stream != nullptr) { capture.stream->capture = 0; }
  captures_.erase(id);
  if (release_allocations) { release_captured(id); }
}

void model_state::invalidate(capture_state& capture)
{
  if (capture.invalidated) { return; }
  capture.invalidated = true;
  counters.captures_invalidated.fetch_add(1, std::memory_order_relaxed);
}

void* model_state::create_graph(capture_state const& capture)
{
  auto graph = std::make_unique<graph_state>();
  graph->capture = capture.id;
  graph->nodes.resize(static_cast<std::size_t>(capture.nodes));
  graph->touched = capture.touched;
  graph_state* raw = graph.get();
  all_graphs_.push_back(std::move(graph));
  live_graphs_.insert(raw);
  return raw;
}

void* model_state::instantiate_graph(graph_state const& graph)
{
  auto exec = std::make_unique<graph_state>();
  exec->nodes = graph.nodes;
  exec->touched = graph.touched;
  exec->executable = true;
  graph_state* raw = exec.get();
  all_graphs_.push_back(std::move(exec));
  live_graphs_.insert(raw);
  return raw;
}

graph_state* model_state::find_graph(void const* handle)
{
  auto* graph = static_cast<graph_state*>(const_cast<void*>(handle));
  return live_graphs_.count(graph) != 0 ? graph : nullptr;
}

void model_state::destroy_graph(graph_state& graph)
{
  if (graph.capture != 0) { release_captured(graph.capture); }  // an executable graph has none
  live_graphs_.erase(&graph);
  std::vector<char>().swap(graph.nodes);
}

void model_state::reset_device(int d)
{
  gpu.wait_device(d);  // the device's work finishes before its memory goes
  // Captures first (they point at streams), then streams and events.
  std::vector<std::uint64_t> doomed_captures;
  for (auto const& [id, c] : captures_) {
    if (c.device == d) { doomed_captures.push_back(id); }
  }
  for (std::uint64_t id : doomed_captures) {
    end_capture(captures_.at(id), /*release_allocations=*/false);
  }
  for (auto it = live_streams_.begin(); it != live_streams_.end();) {
    it = (*it)->device == d ? live_streams_.erase(it) : std::next(it);
  }
  for (auto it = live_events_.begin(); it != live_events_.end();) {
    it = (*it)->device == d ? live_events_.erase(it) : std::next(it);
  }
  // Every allocation of the device, whatever made it.
  std::vector<void*> doomed;
  for (auto const& [address, a] : allocations_) {
    if (a.device == d) { doomed.push_back(reinterpret_cast<void*>(address)); }
  }
  for (void* p : doomed) {
    release(p);
  }
  // Peer access from its context, and to it.
  context_state& context = *primary_context(d);
  context.peers.clear();
  for (context_state& c : contexts_) {
    c.peers.erase(&context);
  }
  // Its pools: the created ones are destroyed, the default one starts over.
  std::vector<pool_state*> pools;
  for (pool_state* pool : live_pools_) {
    if (pool->device == d && !pool->is_default) { pools.push_back(pool); }
  }
  for (pool_state* pool : pools) {
    destroy_pool(*pool);
  }
  if (pool_state* pool = device(d).default_pool) {
    release_kept(*pool, /*only_finished=*/false);
    set_reserved(*pool, 0);
    pool_state fresh;  // access: none but its own device's
    fresh.id = pool->id;
    fresh.device = pool->device;
    fresh.handle_types = pool->handle_types;
    fresh.is_default = true;
    *pool = fresh;
  }
}

}  // namespace cuda_double
