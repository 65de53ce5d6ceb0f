// The ownership registry on its own: lookups, growth, removal from the middle
// of probe chains, device resets, threads, and the claim that a steady state
// (as many frees as allocations) allocates no host memory. This program
// replaces the global operator new/delete with counting ones for that; the
// registry is linked in statically (the shim's internals), so they see all of its allocations.
#include "state/allocation_registry.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

// Every operator new of this program counts here; while `fail_allocations`
// is set, every one fails instead (std::bad_alloc, or null from nothrow).
std::atomic<std::size_t> allocations{0};
std::atomic<bool> fail_allocations{false};

void* counted_allocation(std::size_t bytes, std::size_t alignment) noexcept
{
  if (fail_allocations.load(std::memory_order_relaxed)) { return nullptr; }
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (bytes == 0) { bytes = 1; }
  if (alignment <= alignof(std::max_align_t)) { return std::malloc(bytes); }
  return std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
}

void* counted_allocation_or_throw(std::size_t bytes, std::size_t alignment)
{
  void* const p = counted_allocation(bytes, alignment);
  if (p == nullptr) { throw std::bad_alloc{}; }
  return p;
}

}  // namespace

// The nothrow forms of libstdc++ call these, so they are counted too.
void* operator new(std::size_t bytes) { return counted_allocation_or_throw(bytes, 0); }
void* operator new[](std::size_t bytes) { return counted_allocation_or_throw(bytes, 0); }
void* operator new(std::size_t bytes, std::align_val_t alignment)
{
  return counted_allocation_or_throw(bytes, static_cast<std::size_t>(alignment));
}
void* operator new[](std::size_t bytes, std::align_val_t alignment)
{
  return counted_allocation_or_throw(bytes, static_cast<std::size_t>(alignment));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

using asyncshim::shim::allocation_record;
using asyncshim::shim::allocation_registry;

// Where the registry puts an address, to build addresses that share a shard
// and a home slot.
std::size_t shard_of(std::uintptr_t address) { return allocation_registry::shard_of(address); }
std::size_t home_slot(std::uintptr_t address, std::size_t mask)
{
  return allocation_registry::home_slot(address, mask);
}
constexpr std::size_t first_table_mask = allocation_registry::initial_capacity - 1;

void* pointer(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

// 256-byte aligned addresses, as the pool hands out, in a plausible range.
constexpr std::uintptr_t base = 0x7F00'0000'0000;
std::uintptr_t aligned_address(std::size_t n) { return base + n * 256; }

// `count` aligned addresses that all fall into `shard`.
std::vector<std::uintptr_t> addresses_in_shard(std::size_t shard, std::size_t count)
{
  std::vector<std::uintptr_t> found;
  for (std::size_t n = 0; found.size() < count; ++n) {
    if (shard_of(aligned_address(n)) == shard) { found.push_back(aligned_address(n)); }
  }
  return found;
}

bool same(std::optional<allocation_record> const& got, allocation_record want)
{
  return got && got->bytes == want.bytes && got->device == want.device;
}

// Runs `f` with every operator new failing; whether it threw std::bad_alloc.
template <class F>
bool throws_bad_alloc_without_host_memory(F&& f)
{
  bool threw = false;
  fail_allocations = true;
  try {
    f();
  } catch (std::bad_alloc const&) {
    threw = true;
  }
  fail_allocations = false;
  return threw;
}

TEST(AllocationRegistry, InsertContainsTakeRoundTrip)
{
  allocation_registry registry;
  void* const p = pointer(aligned_address(1));
  EXPECT_FALSE(registry.contains(p));
  registry.insert(p, allocation_record{4096, 3});
  EXPECT_TRUE(registry.contains(p));
  EXPECT_TRUE(same(registry.take(p), {4096, 3}));
  EXPECT_FALSE(registry.contains(p));
  EXPECT_FALSE(registry.take(p).has_value());
}

TEST(AllocationRegistry, TakeOfAnUnknownPointerIsNothing)
{
  allocation_registry registry;
  EXPECT_FALSE(registry.take(pointer(aligned_address(7))).has_value());  // before any table exists
  registry.insert(pointer(aligned_address(7)), allocation_record{1, 0});
  EXPECT_FALSE(registry.take(pointer(aligned_address(8))).has_value());
  EXPECT_FALSE(registry.take(pointer(aligned_address(7) + 1)).has_value());  // inside the block, not its start
  EXPECT_FALSE(registry.contains(pointer(aligned_address(7) + 16)));
  EXPECT_TRUE(same(registry.take(pointer(aligned_address(7))), {1, 0}));
}

TEST(AllocationRegistry, InsertReplacesTheRecordOfTheSamePointer)
{
  allocation_registry registry;
  void* const p = pointer(aligned_address(42));
  registry.insert(p, allocation_record{100, 0});
  registry.insert(p, allocation_record{200, 1});
  EXPECT_TRUE(registry.take_device(0).empty());  // the first record is gone, not kept beside the second
  EXPECT_TRUE(same(registry.take(p), {200, 1}));
  EXPECT_FALSE(registry.take(p).has_value());
}

TEST(AllocationRegistry, NullIsNeverStored)
{
  allocation_registry registry;
  registry.insert(pointer(aligned_address(3)), allocation_record{8, 0});
  registry.insert(nullptr, allocation_record{16, 0});
  EXPECT_FALSE(registry.contains(nullptr));
  EXPECT_FALSE(registry.take(nullptr).has_value());
  auto const taken = registry.take_device(0);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].first, pointer(aligned_address(3)));
}

TEST(AllocationRegistry, GrowsToManyRecordsAndGivesEveryOneBack)
{
  constexpr std::size_t count = 200'000;
  allocation_registry registry;
  for (std::size_t n = 0; n < count; ++n) {
    registry.insert(pointer(aligned_address(n)), allocation_record{n * 7, static_cast<int>(n % 4)});
  }
  for (std::size_t n = 0; n < count; ++n) {
    ASSERT_TRUE(registry.contains(pointer(aligned_address(n)))) << n;
  }
  // Taken in an order unrelated to the insertion order.
  std::vector<std::size_t> order(count);
  for (std::size_t n = 0; n < count; ++n) {
    order[n] = n;
  }
  std::shuffle(order.begin(), order.end(), std::mt19937_64{1});
  for (std::size_t n : order) {
    ASSERT_TRUE(same(registry.take(pointer(aligned_address(n))), {n * 7, static_cast<int>(n % 4)})) << n;
  }
  for (std::size_t n = 0; n < count; ++n) {
    ASSERT_FALSE(registry.contains(pointer(aligned_address(n)))) << n;
  }
  for (int device = 0; device < 4; ++device) {
    EXPECT_TRUE(registry.take_device(device).empty()) << device;
  }
}

// Random inserts, takes and lookups, against std::unordered_map. Half the
// addresses crowd into two shards, whose tables then grow and hold long
// probe chains; the other half spread over all shards.
TEST(AllocationRegistry, MatchesAReferenceModel)
{
  std::vector<std::uintptr_t> keys = addresses_in_shard(17, 1500);
  for (std::uintptr_t a : addresses_in_shard(18, 500)) {
    keys.push_back(a);
  }
  std::mt19937_64 random{20240611};
  for (std::size_t n = 0; n < 2000; ++n) {
    keys.push_back(base + (random() % (std::uintptr_t{1} << 36)) * 256);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());

  allocation_registry registry;
  std::unordered_map<std::uintptr_t, allocation_record> model;
  auto const check_every_key = [&](std::size_t step) {
    for (std::uintptr_t a : keys) {
      ASSERT_EQ(registry.contains(pointer(a)), model.count(a) == 1) << step;
    }
  };
  for (std::size_t step = 0; step < 300'000; ++step) {
    std::uintptr_t const a = keys[random() % keys.size()];
    switch (random() % 3) {
      case 0: {
        allocation_record const record{random() % 100'000, static_cast<int>(random() % 4)};
        registry.insert(pointer(a), record);
        model.insert_or_assign(a, record);
        break;
      }
      case 1: {
        auto const found = model.find(a);
        auto const got = registry.take(pointer(a));
        if (found == model.end()) {
          ASSERT_FALSE(got.has_value()) << step;
        } else {
          ASSERT_TRUE(same(got, found->second)) << step;
          model.erase(found);
        }
        break;
      }
      default: ASSERT_EQ(registry.contains(pointer(a)), model.count(a) == 1) << step; break;
    }
    if (step % 5'000 == 0) { check_every_key(step); }
  }
  check_every_key(0);
  ASSERT_FALSE(model.empty());
  // What is left, device by device.
  for (int device = 0; device < 4; ++device) {
    std::map<std::uintptr_t, std::size_t> want;
    for (auto const& [a, record] : model) {
      if (record.device == device) { want.emplace(a, record.bytes); }
    }
    std::map<std::uintptr_t, std::size_t> got;
    for (auto const& [p, record] : registry.take_device(device)) {
      EXPECT_EQ(record.device, device);
      got.emplace(reinterpret_cast<std::uintptr_t>(p), record.bytes);
    }
    EXPECT_EQ(got, want) << device;
  }
  for (std::uintptr_t a : keys) {
    ASSERT_FALSE(registry.contains(pointer(a)));
  }
}

// One cluster of records in one shard, all with home slots near the end of a
// new table, so that their probe chain wraps round to its start: slots 253,
// 254, 255, 0 and 2 are homes of several records each.
std::vector<std::uintptr_t> wrapping_cluster()
{
  constexpr std::size_t shard = 5;
  std::vector<std::pair<std::size_t, std::size_t>> const wanted{{253, 3}, {254, 4}, {255, 2}, {0, 3}, {2, 2}};
  std::map<std::size_t, std::vector<std::uintptr_t>> by_home;
  std::size_t missing = 0;
  for (auto const& [home, count] : wanted) {
    missing += count;
  }
  for (std::size_t n = 0; missing > 0; ++n) {
    std::uintptr_t const a = aligned_address(n);
    if (shard_of(a) != shard) { continue; }
    std::size_t const home = home_slot(a, first_table_mask);
    for (auto const& [wanted_home, count] : wanted) {
      if (home == wanted_home && by_home[home].size() < count) {
        by_home[home].push_back(a);
        --missing;
      }
    }
  }
  // Interleaved, so that records of one home are not next to each other.
  std::vector<std::uintptr_t> cluster;
  for (std::size_t i = 0; i < 4; ++i) {
    for (auto const& [home, count] : wanted) {
      if (i < by_home[home].size()) { cluster.push_back(by_home[home][i]); }
    }
  }
  return cluster;
}

// Removing a record from the middle of a probe chain must leave every other
// record of the chain reachable (backward-shift deletion).
TEST(AllocationRegistry, RemovalInTheMiddleOfAProbeChainKeepsTheRest)
{
  std::vector<std::uintptr_t> const cluster = wrapping_cluster();
  ASSERT_EQ(cluster.size(), 14u);
  auto const record_of = [](std::uintptr_t a) { return allocation_record{a / 256 % 1000, 0}; };

  // Each record taken alone, the others then all still there.
  for (std::size_t removed = 0; removed < cluster.size(); ++removed) {
    allocation_registry registry;
    for (std::uintptr_t a : cluster) {
      registry.insert(pointer(a), record_of(a));
    }
    ASSERT_TRUE(same(registry.take(pointer(cluster[removed])), record_of(cluster[removed]))) << removed;
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      ASSERT_EQ(registry.contains(pointer(cluster[i])), i != removed) << removed << " " << i;
    }
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      if (i != removed) { ASSERT_TRUE(same(registry.take(pointer(cluster[i])), record_of(cluster[i]))); }
    }
  }

  // Takes in many orders, with inserts in between, on one registry.
  allocation_registry registry;
  std::mt19937_64 random{7};
  std::vector<bool> present(cluster.size(), false);
  for (std::size_t step = 0; step < 20'000; ++step) {
    std::size_t const i = random() % cluster.size();
    if (present[i]) {
      ASSERT_TRUE(same(registry.take(pointer(cluster[i])), record_of(cluster[i]))) << step;
    } else {
      registry.insert(pointer(cluster[i]), record_of(cluster[i]));
    }
    present[i] = !present[i];
    for (std::size_t j = 0; j < cluster.size(); ++j) {
      ASSERT_EQ(registry.contains(pointer(cluster[j])), present[j]) << step << " " << j;
    }
  }
}

TEST(AllocationRegistry, TakeDeviceTakesExactlyThatDevice)
{
  allocation_registry registry;
  std::map<std::uintptr_t, std::size_t> device_one;
  for (std::size_t n = 0; n < 3000; ++n) {
    int const device = static_cast<int>(n % 3);
    registry.insert(pointer(aligned_address(n)), allocation_record{n, device});
    if (device == 1) { device_one.emplace(aligned_address(n), n); }
  }
  std::map<std::uintptr_t, std::size_t> got;
  for (auto const& [p, record] : registry.take_device(1)) {
    EXPECT_EQ(record.device, 1);
    EXPECT_TRUE(got.emplace(reinterpret_cast<std::uintptr_t>(p), record.bytes).second) << p << " taken twice";
  }
  EXPECT_EQ(got, device_one);
  EXPECT_TRUE(registry.take_device(1).empty());
  for (std::size_t n = 0; n < 3000; ++n) {
    int const device = static_cast<int>(n % 3);
    if (device == 1) {
      EXPECT_FALSE(registry.contains(pointer(aligned_address(n)))) << n;
    } else {
      EXPECT_TRUE(same(registry.take(pointer(aligned_address(n))), {n, device})) << n;
    }
  }
}

// take_device removes records while it walks a table: also when the removal
// shifts records round the table's end.
TEST(AllocationRegistry, TakeDeviceAcrossAWrappingProbeChain)
{
  std::vector<std::uintptr_t> const cluster = wrapping_cluster();
  for (int device = 0; device < 2; ++device) {
    allocation_registry registry;
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      registry.insert(pointer(cluster[i]), allocation_record{i, static_cast<int>(i % 3 == 0)});
    }
    std::vector<std::uintptr_t> got;
    for (auto const& [p, record] : registry.take_device(device)) {
      EXPECT_EQ(record.device, device);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p), cluster[record.bytes]);
      got.push_back(reinterpret_cast<std::uintptr_t>(p));
    }
    std::vector<std::uintptr_t> want;
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      if (static_cast<int>(i % 3 == 0) == device) { want.push_back(cluster[i]); }
    }
    std::sort(got.begin(), got.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(got, want) << device;
    for (std::size_t i = 0; i < cluster.size(); ++i) {
      bool const others = static_cast<int>(i % 3 == 0) != device;
      EXPECT_EQ(registry.contains(pointer(cluster[i])), others) << device << " " << i;
    }
  }
}

TEST(AllocationRegistry, TakeDeviceDropsTheRecordsWhenThereIsNoHostMemoryForTheResult)
{
  allocation_registry registry;
  for (std::size_t n = 0; n < 1000; ++n) {
    registry.insert(pointer(aligned_address(n)), allocation_record{n, static_cast<int>(n % 2)});
  }
  std::vector<std::pair<void*, allocation_record>> taken;
  EXPECT_FALSE(throws_bad_alloc_without_host_memory([&] { taken = registry.take_device(0); }));
  EXPECT_TRUE(taken.empty());
  for (std::size_t n = 0; n < 1000; ++n) {
    EXPECT_EQ(registry.contains(pointer(aligned_address(n))), n % 2 == 1) << n;
  }
}

TEST(AllocationRegistry, FirstInsertWithoutHostMemoryThrowsAndStoresNothing)
{
  allocation_registry registry;
  void* const p = pointer(aligned_address(5));
  EXPECT_TRUE(throws_bad_alloc_without_host_memory([&] { registry.insert(p, allocation_record{1, 0}); }));
  EXPECT_FALSE(registry.contains(p));
  registry.insert(p, allocation_record{2, 0});
  EXPECT_TRUE(same(registry.take(p), {2, 0}));
}

// A shard that must grow and cannot: the insert throws, and the shard keeps
// exactly what it had.
TEST(AllocationRegistry, InsertThatCannotGrowThrowsAndChangesNothing)
{
  allocation_registry registry;
  std::vector<std::uintptr_t> const same_shard = addresses_in_shard(9, 100'000);
  registry.insert(pointer(same_shard[0]), allocation_record{0, 0});  // the shard now has a table
  std::size_t stored = 1;
  bool threw = false;
  while (!threw && stored < same_shard.size()) {
    std::uintptr_t const a = same_shard[stored];
    threw = throws_bad_alloc_without_host_memory([&] { registry.insert(pointer(a), allocation_record{stored, 0}); });
    if (!threw) { ++stored; }
  }
  ASSERT_TRUE(threw) << "inserted " << stored << " records into one shard without any host memory";
  EXPECT_FALSE(registry.contains(pointer(same_shard[stored])));
  // Replacing a record never needs memory.
  EXPECT_FALSE(throws_bad_alloc_without_host_memory([&] {
    registry.insert(pointer(same_shard[0]), allocation_record{12345, 0});
  }));
  EXPECT_TRUE(same(registry.take(pointer(same_shard[0])), {12345, 0}));
  for (std::size_t i = 1; i < stored; ++i) {
    ASSERT_TRUE(same(registry.take(pointer(same_shard[i])), {i, 0})) << i;
  }
  // With memory again, the shard grows.
  for (std::size_t i = 0; i <= stored; ++i) {
    registry.insert(pointer(same_shard[i]), allocation_record{i, 1});
  }
  EXPECT_EQ(registry.take_device(1).size(), stored + 1);
}

// The point of the design: once the tables have grown to a program's peak,
// allocations and frees (insert + take) allocate no host memory at all.
TEST(AllocationRegistry, SteadyStateAllocatesNoHostMemory)
{
  constexpr std::size_t working_set = 20'000;
  constexpr std::size_t live = 1'000;
  constexpr std::size_t pairs = 100'000;
  allocation_registry registry;
  // Warm-up: every address of the working set live at once, so each shard
  // grows to hold more than its share of any `live` of them.
  for (std::size_t n = 0; n < working_set; ++n) {
    registry.insert(pointer(aligned_address(n)), {n, 0});
  }
  for (std::size_t n = 0; n < working_set; ++n) {
    ASSERT_TRUE(registry.take(pointer(aligned_address(n))));
  }

  std::size_t wrong = 0;
  std::size_t const before = allocations.load();
  for (std::size_t i = 0; i < pairs + live; ++i) {
    if (i < pairs) { registry.insert(pointer(aligned_address(i % working_set)), allocation_record{i, 0}); }
    if (i >= live) {
      std::size_t const j = i - live;
      if (!same(registry.take(pointer(aligned_address(j % working_set))), {j, 0})) { ++wrong; }
      if (registry.contains(pointer(aligned_address(j % working_set)))) { ++wrong; }
    }
  }
  std::size_t const after = allocations.load();
  EXPECT_EQ(after - before, 0u) << "host allocations during " << pairs << " insert + take pairs";
  EXPECT_EQ(wrong, 0u);
  EXPECT_TRUE(registry.take_device(0).empty());
}

// Threads with their own addresses, which share shards: each finds exactly
// its own records, while the tables grow under them.
TEST(AllocationRegistry, ThreadsKeepTheirOwnRecords)
{
  constexpr int threads = 8;
  constexpr std::size_t rounds = 50'000;
  constexpr std::size_t live = 2'000;  // per thread: enough for the shards to grow meanwhile
  allocation_registry registry;
  std::atomic<std::size_t> wrong{0};
  auto const address = [](int thread, std::size_t i) { return aligned_address(i * threads + thread); };
  auto const work = [&](int thread) {
    std::size_t mistakes = 0;
    for (std::size_t i = 0; i < rounds + live; ++i) {
      if (i < rounds) {
        registry.insert(pointer(address(thread, i)), allocation_record{i, thread});
        if (!registry.contains(pointer(address(thread, i)))) { ++mistakes; }
      }
      if (i >= live) {
        std::size_t const j = i - live;
        if (!same(registry.take(pointer(address(thread, j))), {j, thread})) { ++mistakes; }
        if (registry.take(pointer(address(thread, j))).has_value()) { ++mistakes; }
      }
    }
    wrong += mistakes;
  };
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t) {
    running.emplace_back(work, t);
  }
  for (std::thread& t : running) {
    t.join();
  }
  EXPECT_EQ(wrong.load(), 0u);
  for (int t = 0; t < threads; ++t) {
    EXPECT_TRUE(registry.take_device(t).empty()) << t;
  }
  for (int t = 0; t < threads; ++t) {
    for (std::size_t i = 0; i < rounds; ++i) {
      ASSERT_FALSE(registry.contains(pointer(address(t, i)))) << t << " " << i;
    }
  }
}

}  // namespace
