#include "state/issued_frees.hpp"

namespace asyncshim::shim {

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
    d->batches.push_back({done, d->next_serial, bytes});
  } catch (...) {
    return false;
  }
  ++d->next_serial;
  d->bytes.fetch_add(bytes, std::memory_order_relaxed);
  return true;
}

issued_frees::batch_name issued_frees::oldest(int device) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr || d->bytes.load(std::memory_order_relaxed) == 0) { return {}; }
  std::lock_guard lock{d->mutex};
  if (d->batches.empty()) { return {}; }
  return {d->batches.front().done, d->batches.front().serial};
}

bool issued_frees::completed(int device, std::uint64_t serial) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr) { return false; }
  std::lock_guard lock{d->mutex};
  if (d->batches.empty() || d->batches.front().serial != serial) { return false; }
  batch const b = d->batches.front();
  d->batches.pop_front();
  d->bytes.fetch_sub(b.bytes, std::memory_order_relaxed);
  try {
    d->spare_events.push_back(b.done);
  } catch (...) {
    // No room to keep it: left alone, not destroyed (another thread may have
    // read it as the oldest and be waiting for it); its context frees it.
  }
  return true;
}

CUevent issued_frees::spare_event(int device) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr) { return nullptr; }
  std::lock_guard lock{d->mutex};
  if (d->spare_events.empty()) { return nullptr; }
  CUevent const e = d->spare_events.back();
  d->spare_events.pop_back();
  return e;
}

void issued_frees::keep_spare_event(int device, CUevent event) noexcept
{
  device_batches* d = of(device);
  if (d == nullptr) { return; }
  std::lock_guard lock{d->mutex};
  try {
    d->spare_events.push_back(event);
  } catch (...) {  // no room: its context frees it
  }
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
    for (batch const& b : d->batches) {
      events.push_back(b.done);
    }
    events.insert(events.end(), d->spare_events.begin(), d->spare_events.end());
  } catch (...) {  // no host memory for the list: forgotten with their context
  }
  d->batches.clear();
  d->spare_events.clear();
  d->bytes.store(0, std::memory_order_relaxed);
}

}  // namespace asyncshim::shim
