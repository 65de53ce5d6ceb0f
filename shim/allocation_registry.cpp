#include "allocation_registry.hpp"

namespace asyncshim::shim {

std::size_t allocation_registry::shard_of(std::uintptr_t address) noexcept
{
  // Pool pointers are at least 256-byte aligned: drop those bits, then mix.
  constexpr std::uint64_t golden = 0x9E3779B97F4A7C15ULL;
  static_assert(shard_count == 64, "the top 6 bits pick the shard");
  return static_cast<std::size_t>(((address >> 8) * golden) >> 58);
}

void allocation_registry::insert(void const* ptr, allocation_record record)
{
  auto const address = reinterpret_cast<std::uintptr_t>(ptr);
  shard& s = shards_[shard_of(address)];
  std::lock_guard lock{s.mutex};
  s.records.insert_or_assign(address, record);
}

std::optional<allocation_record> allocation_registry::take(void const* ptr) noexcept
{
  auto const address = reinterpret_cast<std::uintptr_t>(ptr);
  shard& s = shards_[shard_of(address)];
  std::lock_guard lock{s.mutex};
  auto const found = s.records.find(address);
  if (found == s.records.end()) { return std::nullopt; }
  allocation_record const record = found->second;
  s.records.erase(found);
  return record;
}

bool allocation_registry::contains(void const* ptr) noexcept
{
  auto const address = reinterpret_cast<std::uintptr_t>(ptr);
  shard& s = shards_[shard_of(address)];
  std::lock_guard lock{s.mutex};
  return s.records.find(address) != s.records.end();
}

std::vector<std::pair<void*, allocation_record>> allocation_registry::take_device(int device) noexcept
{
  std::vector<std::pair<void*, allocation_record>> taken;
  for (shard& s : shards_) {
    std::lock_guard lock{s.mutex};
    for (auto it = s.records.begin(); it != s.records.end();) {
      if (it->second.device != device) {
        ++it;
        continue;
      }
      try {
        taken.emplace_back(reinterpret_cast<void*>(it->first), it->second);
      } catch (...) {  // no host memory: the record is dropped all the same
      }
      it = s.records.erase(it);
    }
  }
  return taken;
}

}  // namespace asyncshim::shim
