#include "state/deferred_frees.hpp"

#include "state/thread_stashes.hpp"

#include <algorithm>

namespace asyncshim::shim {

free_queue::add_result free_queue::add(entry const& e, bool urgent) noexcept
{
  int const device = e.record.device;
  if (device < 0 || device >= max_devices) { return {}; }
  queue& q = queues_[static_cast<std::size_t>(device)];
  std::lock_guard lock{q.mutex};
  try {
    // The first push reserves a whole batch: from then on the queue reuses
    // its buffer and a free allocates nothing.
    if (q.entries.capacity() < batch_frees) { q.entries.reserve(batch_frees); }
    q.entries.push_back(e);
  } catch (...) {
    return {};
  }
  q.bytes += e.record.bytes;
  std::uint64_t const bit = std::uint64_t{1} << device;
  if (q.entries.size() == 1) { queued_devices_.fetch_or(bit, std::memory_order_acq_rel); }
  if (urgent) { urgent_devices_.fetch_or(bit, std::memory_order_acq_rel); }
  bool const is_urgent = urgent || (urgent_devices_.load(std::memory_order_acquire) & bit) != 0;
  return {true, is_urgent || q.entries.size() >= batch_frees || q.bytes >= batch_bytes};
}

std::size_t free_queue::take(int device, entry* out, std::size_t capacity) noexcept
{
  if (device < 0 || device >= max_devices) { return 0; }
  queue& q = queues_[static_cast<std::size_t>(device)];
  std::lock_guard lock{q.mutex};
  std::size_t taken = 0;
  // From the back: a long queue (frees put off by a capture) is taken in
  // chunks without moving the rest.
  while (taken < capacity && !q.entries.empty()) {
    out[taken++] = q.entries.back();
    q.bytes -= q.entries.back().record.bytes;
    q.entries.pop_back();
  }
  if (q.entries.empty()) { mark_empty(device, q); }
  return taken;
}

std::size_t free_queue::queued_bytes(int device) noexcept
{
  if (device < 0 || device >= max_devices) { return 0; }
  queue& q = queues_[static_cast<std::size_t>(device)];
  std::lock_guard lock{q.mutex};
  return q.bytes;
}

void free_queue::drop(int device) noexcept
{
  if (device < 0 || device >= max_devices) { return; }
  queue& q = queues_[static_cast<std::size_t>(device)];
  std::lock_guard lock{q.mutex};
  q.entries.clear();
  mark_empty(device, q);
}

void free_queue::mark_empty(int device, queue& q) noexcept
{
  q.bytes = 0;
  std::uint64_t const others = ~(std::uint64_t{1} << device);
  queued_devices_.fetch_and(others, std::memory_order_acq_rel);
  urgent_devices_.fetch_and(others, std::memory_order_acq_rel);
}

namespace {
std::atomic<std::uint64_t> next_cache_serial{1};
}  // namespace

reuse_cache::reuse_cache() noexcept : serial_(next_cache_serial.fetch_add(1, std::memory_order_relaxed)) {}

reuse_cache::~reuse_cache()
{
  // No stash may keep blocks or credit of a cache that is gone (only tests
  // destroy one: the process's lives until the end), so each stash is waited for.
  auto const drop = [](thread_stashes::entry const&, void*) noexcept { return true; };
  for (cache& c : caches_) {
    (void)thread_stashes::take_all(serial_, static_cast<int>(&c - caches_.data()), drop, nullptr, c.stashed,
                                   /*wait=*/true);
  }
}

reuse_cache::cache* reuse_cache::of(int device) noexcept
{
  if (device < 0 || device >= max_devices) { return nullptr; }
  return &caches_[static_cast<std::size_t>(device)];
}

reuse_cache::cache const* reuse_cache::of(int device) const noexcept
{
  if (device < 0 || device >= max_devices) { return nullptr; }
  return &caches_[static_cast<std::size_t>(device)];
}

void reuse_cache::cache::update_held() noexcept { held.store(idle_bytes + in_flight_bytes, std::memory_order_relaxed); }

bool reuse_cache::add_in_flight(int device, CUevent done, block const* blocks, std::size_t count) noexcept
{
  cache* c = of(device);
  if (c == nullptr) { return false; }
#ifdef ASYNCSHIM_TESTING_REUSE_SKIPS_FENCE
  // Broken on purpose (the simulation's positive control): the blocks are
  // idle at once, before the work their fence waits for has finished.
  try {
    std::lock_guard lock{c->mutex};
    if (!c->in_flight.keep_spare_event(done)) { return false; }
    for (std::size_t i = 0; i < count; ++i) {
      c->idle[blocks[i].bytes].push_back({blocks[i].ptr, false});
      c->idle_bytes += blocks[i].bytes;
    }
    c->update_held();
  } catch (...) {
    return false;
  }
  return true;
#endif
  try {
    std::vector<block> batch(blocks, blocks + count);
    std::uint64_t bytes = 0;
    for (block const& x : batch) {
      bytes += x.bytes;
    }
    std::lock_guard lock{c->mutex};
    c->in_flight.add(done, std::move(batch));
    c->in_flight_bytes += bytes;
    c->update_held();
  } catch (...) {
    return false;
  }
  return true;
}

reuse_cache::in_flight_batch reuse_cache::oldest_in_flight(int device) noexcept
{
  cache* c = of(device);
  if (c == nullptr || c->held.load(std::memory_order_relaxed) == 0) { return {}; }
  std::lock_guard lock{c->mutex};
  auto const oldest = c->in_flight.oldest();
  return {oldest.done, oldest.serial};
}

bool reuse_cache::completed(int device, std::uint64_t serial, std::uint64_t limit,
                            std::vector<block>& for_the_pool) noexcept
{
  cache* c = of(device);
  if (c == nullptr) { return false; }
  std::lock_guard lock{c->mutex};
  // Another thread may have moved it already (state/event_batches.hpp).
  auto const batch = c->in_flight.complete(serial);
  if (!batch) { return false; }
  for (block const& x : batch->payload) {
    c->in_flight_bytes -= x.bytes;
    bool kept = false;
    if (c->idle_bytes + c->stashed.load(std::memory_order_relaxed) + x.bytes <= limit) {
      try {
        c->idle[x.bytes].push_back({x.ptr, false});
        c->idle_bytes += x.bytes;
        kept = true;
      } catch (...) {  // no host memory to keep it: the pool has it
      }
    }
    if (!kept && for_the_pool.size() < for_the_pool.capacity()) { for_the_pool.push_back(x); }
    // (A block that fits neither stays the pool's allocation until the pool
    // goes: the caller reserves room for a whole batch, so this does not happen.)
  }
  c->update_held();
  return true;
}

bool reuse_cache::keep_in_legacy_order(int device, block b, std::uint64_t limit) noexcept
{
  cache* c = of(device);
  if (c == nullptr) { return false; }
  if (thread_stashes::put_on_credit({b.ptr, b.bytes, serial_, device}, c->stashed)) { return true; }
  // Counted before it is in the stash, so that the limit holds across threads;
  // the thread's own credit, counted already, covers part of it (else a block
  // as large as the limit would never fit beside it).
  std::uint64_t const rest = b.bytes - thread_stashes::spend_credit(c->stashed, b.bytes);
  std::uint64_t const stashed = c->stashed.fetch_add(rest, std::memory_order_relaxed) + rest;
  if (stashed + c->held.load(std::memory_order_relaxed) <= limit &&
      thread_stashes::put({b.ptr, b.bytes, serial_, device})) {
    return true;
  }
  c->stashed.fetch_sub(b.bytes, std::memory_order_relaxed);  // the credit spent goes too
  std::lock_guard lock{c->mutex};
  if (c->idle_bytes + c->stashed.load(std::memory_order_relaxed) + b.bytes > limit) { return false; }
  try {
    c->idle[b.bytes].push_back({b.ptr, true});
  } catch (...) {  // no host memory to keep it
    return false;
  }
  c->idle_bytes += b.bytes;
  c->update_held();
  return true;
}

std::size_t reuse_cache::make_room(int device, std::size_t bytes, std::uint64_t limit, block* out,
                                   std::size_t capacity) noexcept
{
  cache* c = of(device);
  if (c == nullptr || bytes > limit || capacity == 0) { return 0; }
  std::uint64_t const counted = c->stashed.load(std::memory_order_relaxed) + c->held.load(std::memory_order_relaxed);
  if (counted + bytes <= limit) { return 0; }  // room already (another thread's blocks went meanwhile)
  std::array<thread_stashes::entry, thread_stashes::slots> taken{};
  std::size_t const n = thread_stashes::take_for_room(serial_, device, bytes, counted + bytes - limit, taken.data(),
                                                      std::min(capacity, taken.size()));
  std::uint64_t taken_bytes = 0;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = {taken[i].ptr, taken[i].bytes, true};
    taken_bytes += taken[i].bytes;
  }
  c->stashed.fetch_sub(taken_bytes, std::memory_order_relaxed);
  return n;
}

CUevent reuse_cache::spare_event(int device) noexcept
{
  cache* c = of(device);
  if (c == nullptr) { return nullptr; }
  std::lock_guard lock{c->mutex};
  return c->in_flight.spare_event();
}

bool reuse_cache::keep_spare_event(int device, CUevent event) noexcept
{
  cache* c = of(device);
  if (c == nullptr) { return false; }
  std::lock_guard lock{c->mutex};
  return c->in_flight.keep_spare_event(event);
}

void* reuse_cache::take(int device, std::size_t bytes) noexcept
{
  cache* c = of(device);
  if (c == nullptr) { return nullptr; }
  if (c->stashed.load(std::memory_order_relaxed) != 0) {
    if (void* const ptr = thread_stashes::take(serial_, device, bytes, c->stashed)) { return ptr; }
  }
  if (c->held.load(std::memory_order_relaxed) == 0) { return nullptr; }
  std::lock_guard lock{c->mutex};
  auto const found = c->idle.find(bytes);
  if (found == c->idle.end() || found->second.empty()) { return nullptr; }
  void* const ptr = found->second.back().ptr;
  found->second.pop_back();  // the vector keeps its buffer for the next free of this size
  c->idle_bytes -= bytes;
  c->update_held();
  return ptr;
}

namespace {
struct stash_drain {
  std::vector<reuse_cache::block>* blocks = nullptr;  ///< null: forgotten
  std::uint64_t bytes = 0;
};

bool drain_stashed(thread_stashes::entry const& e, void* context) noexcept
{
  auto& drain = *static_cast<stash_drain*>(context);
  if (drain.blocks != nullptr) {
    try {
      drain.blocks->push_back({e.ptr, e.bytes, true});
    } catch (...) {  // no host memory for the list: it stays stashed
      return false;
    }
  }
  drain.bytes += e.bytes;
  return true;
}
}  // namespace

void reuse_cache::take_all(int device, std::vector<block>& blocks, std::vector<CUevent>* events) noexcept
{
  cache* c = of(device);
  if (c == nullptr) { return; }
  if (c->stashed.load(std::memory_order_relaxed) != 0) {
    stash_drain drain{&blocks};
    drain.bytes += thread_stashes::take_all(serial_, device, drain_stashed, &drain, c->stashed);
    c->stashed.fetch_sub(drain.bytes, std::memory_order_relaxed);
  }
  std::lock_guard lock{c->mutex};
  std::size_t count = blocks.size();
  c->in_flight.for_each_payload([&](std::vector<block> const& batch) { count += batch.size(); });
  for (auto const& [bytes, idle_blocks] : c->idle) {
    count += idle_blocks.size();
  }
  try {
    blocks.reserve(count);  // so that nothing below allocates
    c->in_flight.take_all([&](std::vector<block>&& batch) { blocks.insert(blocks.end(), batch.begin(), batch.end()); },
                          events);
  } catch (...) {  // no host memory for the lists: everything stays cached
    return;
  }
  for (auto const& [bytes, idle_blocks] : c->idle) {
    for (cache::idle_block const& b : idle_blocks) {
      blocks.push_back({b.ptr, bytes, b.in_legacy_order});
    }
  }
  c->idle.clear();
  c->in_flight_bytes = 0;
  c->idle_bytes = 0;
  c->update_held();
}

void reuse_cache::forget(int device) noexcept
{
  cache* c = of(device);
  if (c == nullptr) { return; }
  stash_drain drain;
  drain.bytes += thread_stashes::take_all(serial_, device, drain_stashed, &drain, c->stashed);
  c->stashed.fetch_sub(drain.bytes, std::memory_order_relaxed);
  std::lock_guard lock{c->mutex};
  c->in_flight.forget();
  c->idle.clear();
  c->in_flight_bytes = 0;
  c->idle_bytes = 0;
  c->update_held();
}

std::uint64_t reuse_cache::counted_bytes(int device) const noexcept
{
  cache const* c = of(device);
  return c == nullptr ? 0 : c->held.load(std::memory_order_relaxed) + c->stashed.load(std::memory_order_relaxed);
}

std::uint64_t reuse_cache::held_bytes(int device) const noexcept
{
  cache const* c = of(device);
  if (c == nullptr) { return 0; }
  std::uint64_t const counted = c->stashed.load(std::memory_order_relaxed);
  // Credit is counted but holds nothing (a snapshot: never below zero).
  std::uint64_t const credit = counted == 0 ? 0 : thread_stashes::credit_for(c->stashed);
  return c->held.load(std::memory_order_relaxed) + (counted > credit ? counted - credit : 0);
}

issued_frees::device_batches* issued_frees::of(int device) noexcept
{
  if (device < 0 || device >= max_devices) { return nullptr; }
  return &devices_[static_cast<std::size_t>(device)];
}

bool issued_frees::add(int device, CUevent done, std::uint64_t bytes) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr) { return false; }
  std::lock_guard lock{d->mutex};
  try {
    d->batches.add(done, bytes);
  } catch (...) {
    return false;
  }
  d->bytes.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

issued_frees::batch_name issued_frees::oldest(int device) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr || d->bytes.load(std::memory_order_relaxed) == 0) { return {}; }
  std::lock_guard lock{d->mutex};
  auto const oldest = d->batches.oldest();
  return {oldest.done, oldest.serial};
}

bool issued_frees::completed(int device, std::uint64_t serial) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr) { return false; }
  std::lock_guard lock{d->mutex};
  auto const batch = d->batches.complete(serial);
  if (!batch) { return false; }
  d->bytes.fetch_sub(batch->payload, std::memory_order_relaxed);
  // Without room to keep it, left alone, not destroyed (another thread may
  // have read it as the oldest and be waiting for it); its context frees it.
  (void)d->batches.keep_spare_event(batch->done);
  return true;
}

CUevent issued_frees::spare_event(int device) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr) { return nullptr; }
  std::lock_guard lock{d->mutex};
  return d->batches.spare_event();
}

void issued_frees::keep_spare_event(int device, CUevent event) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr) { return; }
  std::lock_guard lock{d->mutex};
  (void)d->batches.keep_spare_event(event);  // no room: its context frees it
}

std::uint64_t issued_frees::bytes(int device) const noexcept
{
  if (device < 0 || device >= max_devices) { return 0; }
  return devices_[static_cast<std::size_t>(device)].bytes.load(std::memory_order_relaxed);
}

void issued_frees::take_all(int device, std::vector<CUevent>& events) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr) { return; }
  std::lock_guard lock{d->mutex};
  try {
    d->batches.take_all([](std::uint64_t) noexcept {}, &events);
  } catch (...) {  // no host memory for the list: forgotten with their context
    d->batches.forget();
  }
  d->bytes.store(0, std::memory_order_relaxed);
}

}  // namespace asyncshim::shim
