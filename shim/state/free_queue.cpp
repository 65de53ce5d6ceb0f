#include "state/free_queue.hpp"

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

}  // namespace asyncshim::shim
