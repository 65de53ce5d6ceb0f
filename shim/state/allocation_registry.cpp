#include "state/allocation_registry.hpp"

#include <type_traits>

namespace asyncshim::shim {

namespace {

// A shard's table starts with initial_capacity slots: 128 records before it
// first grows, a few KiB, and only in shards that are used. The slot counts
// are 32-bit (so that a shard's lock, table and activity count share one
// cache line): 2^31 slots, a billion records, per shard.
constexpr std::size_t max_capacity = std::size_t{1} << 31;

}  // namespace

// Where `address` starts probing in a table of mask + 1 slots. The shard was
// picked from the top bits of one product of the address; this is a full mix
// of the address (MurmurHash3's 64-bit finalizer), unrelated to that choice,
// so that the addresses of one shard spread over all of its slots, also when
// they are all 256-byte aligned.
std::size_t allocation_registry::home_slot(std::uintptr_t address, std::size_t mask) noexcept
{
  std::uint64_t h = address;
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDULL;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ULL;
  h ^= h >> 33;
  return static_cast<std::size_t>(h) & mask;
}

// The slot holding `address`, else the empty slot that ends its probe chain
// (where it would go). Needs slots and a nonzero address.
std::size_t allocation_registry::record_table::probe(std::uintptr_t address) const noexcept
{
  std::size_t const mask = capacity_ - 1;
  std::size_t i = home_slot(address, mask);
  while (slots_[i].address != address && slots_[i].address != 0) {
    i = (i + 1) & mask;
  }
  return i;
}

allocation_record* allocation_registry::record_table::find(std::uintptr_t address) noexcept
{
  if (capacity_ == 0) { return nullptr; }
  slot& s = slots_[probe(address)];
  return s.address == address ? &s.record : nullptr;
}

void allocation_registry::record_table::insert_or_assign(std::uintptr_t address, allocation_record record)
{
  std::size_t i = 0;
  if (capacity_ != 0) {
    i = probe(address);
    if (slots_[i].address == address) {
      slots_[i].record = record;
      return;
    }
  }
  // A new record: keep the load at most one half, so probes stay short and
  // always end at an empty slot.
  if ((size_ + 1) * 2 > capacity_) {
    grow();
    i = probe(address);
  }
  slots_[i] = slot{address, record};
  ++size_;
}

std::optional<allocation_record> allocation_registry::record_table::take(std::uintptr_t address) noexcept
{
  if (capacity_ == 0) { return std::nullopt; }
  std::size_t const i = probe(address);
  if (slots_[i].address != address) { return std::nullopt; }
  allocation_record const record = slots_[i].record;
  erase_at(i);
  return record;
}

void allocation_registry::record_table::take_device(int device,
                                                    std::vector<std::pair<void*, allocation_record>>& taken) noexcept
{
  for (std::size_t i = 0; i < capacity_;) {
    slot const& s = slots_[i];
    if (s.address == 0 || s.record.device != device) {
      ++i;
      continue;
    }
    try {
      taken.emplace_back(reinterpret_cast<void*>(s.address), s.record);
    } catch (...) {  // no host memory: the record is dropped all the same
    }
    // Removing shifts later records of the chain back, possibly into slot i:
    // look at it again. Records shifted from the start of the table to its end
    // (a chain that wraps) were looked at already and are of other devices.
    erase_at(i);
  }
}

// Backward-shift deletion: empties slot `hole`, then walks the rest of its
// probe chain and moves back into the hole every record whose probe passed
// over it (its home slot is at or before the hole, counting along the probe
// direction); the slot it leaves is the new hole. Afterwards every record is
// again reachable from its home slot without crossing an empty slot.
void allocation_registry::record_table::erase_at(std::size_t hole) noexcept
{
  std::size_t const mask = capacity_ - 1;
  for (std::size_t i = (hole + 1) & mask; slots_[i].address != 0; i = (i + 1) & mask) {
    std::size_t const home = home_slot(slots_[i].address, mask);
    // Distances from home to i and from the hole to i, modulo the capacity.
    if (((i - home) & mask) >= ((i - hole) & mask)) {
      slots_[hole] = slots_[i];
      hole = i;
    }
  }
  slots_[hole] = slot{};
  --size_;
}

// The only host allocation here: the first slot array, then one twice as big
// each time the load would pass one half.
void allocation_registry::record_table::grow()
{
  std::size_t const capacity = capacity_ == 0 ? initial_capacity : std::size_t{capacity_} * 2;
  if (capacity > max_capacity) { throw std::bad_alloc{}; }
  // Allocated before anything changes, so that std::bad_alloc leaves the table as it was.
  auto slots = std::make_unique<slot[]>(capacity);
  std::size_t const mask = capacity - 1;
  for (std::size_t from = 0; from < capacity_; ++from) {
    if (slots_[from].address == 0) { continue; }
    std::size_t to = home_slot(slots_[from].address, mask);
    while (slots[to].address != 0) {
      to = (to + 1) & mask;
    }
    slots[to] = slots_[from];
  }
  slots_ = std::move(slots);
  capacity_ = static_cast<std::uint32_t>(capacity);
}

std::size_t allocation_registry::shard_of(std::uintptr_t address) noexcept
{
  // Pool pointers are at least 256-byte aligned: drop those bits, then mix.
  constexpr std::uint64_t golden = 0x9E3779B97F4A7C15ULL;
  static_assert(shard_count == 64, "the top 6 bits pick the shard");
  return static_cast<std::size_t>(((address >> 8) * golden) >> 58);
}

// The steps every operation on one pointer shares: f(records, address) runs
// with the pointer's shard locked, and nothing else runs under that lock (but
// the activity count, for an allocation or a free of the program's).
// Address 0 marks an empty slot and no allocation is null, so a null pointer
// locks nothing and gets a value-initialized result: what the operations
// answer for an address they do not hold.
template <class F>
auto allocation_registry::with_shard(void const* ptr, F&& f, bool program_operation)
{
  using result = std::invoke_result_t<F&, record_table&, std::uintptr_t>;
  auto const address = reinterpret_cast<std::uintptr_t>(ptr);
  if (address == 0) { return result(); }
  shard& s = shards_[shard_of(address)];
  std::lock_guard held{s.lock};
  if (program_operation) { s.count_change(); }
  return f(s.records, address);
}

// with_shard's answer to a null pointer.
static_assert(free_claim{} == free_claim::not_found);

void allocation_registry::insert(void const* ptr, allocation_record record)
{
  with_shard(
    ptr, [&](record_table& records, std::uintptr_t address) { records.insert_or_assign(address, record); }, true);
}

std::optional<allocation_record> allocation_registry::take(void const* ptr) noexcept
{
  return with_shard(ptr, [](record_table& records, std::uintptr_t address) { return records.take(address); });
}

free_claim allocation_registry::claim_for_free(void const* ptr, allocation_record& record) noexcept
{
  return with_shard(
    ptr,
    [&](record_table& records, std::uintptr_t address) {
      allocation_record* found = records.find(address);
      if (found == nullptr) { return free_claim::not_found; }
      if (found->freed) { return free_claim::already_freed; }
      found->freed = true;
      record = *found;
      return free_claim::claimed;
    },
    true);
}

void allocation_registry::unclaim(void const* ptr) noexcept
{
  with_shard(ptr, [](record_table& records, std::uintptr_t address) {
    if (allocation_record* found = records.find(address)) { found->freed = false; }
  });
}

std::optional<allocation_record> allocation_registry::take_freed(void const* ptr) noexcept
{
  return with_shard(ptr, [](record_table& records, std::uintptr_t address) -> std::optional<allocation_record> {
    allocation_record const* found = records.find(address);
    if (found == nullptr || !found->freed) { return std::nullopt; }
    return records.take(address);
  });
}

bool allocation_registry::claimed(void const* ptr) noexcept
{
  return with_shard(ptr, [](record_table& records, std::uintptr_t address) {
    allocation_record const* found = records.find(address);
    return found != nullptr && found->freed;
  });
}

bool allocation_registry::put_back(void const* ptr, allocation_record record) noexcept
{
  try {
    insert(ptr, record);
    return true;
  } catch (...) {
    return false;
  }
}

bool allocation_registry::contains(void const* ptr) noexcept
{
  return with_shard(ptr, [](record_table& records, std::uintptr_t address) {
    allocation_record const* found = records.find(address);
    return found != nullptr && !found->freed;
  });
}

std::optional<allocation_record> allocation_registry::find(void const* ptr) noexcept
{
  return with_shard(ptr, [](record_table& records, std::uintptr_t address) -> std::optional<allocation_record> {
    allocation_record const* found = records.find(address);
    if (found == nullptr || found->freed) { return std::nullopt; }
    return *found;
  });
}

std::uint64_t allocation_registry::activity() const noexcept
{
  std::uint64_t total = 0;
  for (shard const& s : shards_) {
    total += s.changes.load(std::memory_order_relaxed);
  }
  return total;
}

std::vector<std::pair<void*, allocation_record>> allocation_registry::take_device(int device) noexcept
{
  std::vector<std::pair<void*, allocation_record>> taken;
  for (shard& s : shards_) {
    std::lock_guard held{s.lock};
    s.records.take_device(device, taken);
  }
  return taken;
}

}  // namespace asyncshim::shim
