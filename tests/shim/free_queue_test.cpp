// The free queue on its own (state/deferred_frees.hpp): batches, urgency, the
// device masks, taking in chunks, dropping a device. It needs no CUDA.
#include "state/deferred_frees.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

using asyncshim::shim::allocation_record;
using asyncshim::shim::free_queue;

free_queue::entry entry_of(std::uintptr_t address, std::size_t bytes, int device)
{
  free_queue::entry e;
  e.ptr = reinterpret_cast<void*>(address);
  e.record = allocation_record{bytes, device};
  return e;
}

TEST(FreeQueue, AQueueIsDueAtAFullBatchOfFrees)
{
  free_queue q;
  for (std::size_t i = 1; i < free_queue::batch_frees; ++i) {
    auto const r = q.add(entry_of(0x1000 * i, 256, 0), false);
    ASSERT_TRUE(r.added);
    ASSERT_FALSE(r.due) << "due after " << i << " frees";
  }
  EXPECT_TRUE(q.add(entry_of(0x999000, 256, 0), false).due);
  EXPECT_EQ(q.queued_bytes(0), free_queue::batch_frees * 256);
}

TEST(FreeQueue, AQueueIsDueAtABatchOfBytes)
{
  free_queue q;
  EXPECT_FALSE(q.add(entry_of(0x1000, free_queue::batch_bytes - 1, 1), false).due);
  EXPECT_TRUE(q.add(entry_of(0x2000, 1, 1), false).due);
}

TEST(FreeQueue, AnUrgentFreeMakesItsDeviceUrgentUntilTheQueueEmpties)
{
  free_queue q;
  EXPECT_EQ(q.urgent_devices(), 0U);
  EXPECT_TRUE(q.add(entry_of(0x1000, 8, 2), true).due);
  EXPECT_EQ(q.urgent_devices(), std::uint64_t{1} << 2);
  // A later ordinary free on that device is due too while the urgent one waits.
  EXPECT_TRUE(q.add(entry_of(0x2000, 8, 2), false).due);
  std::vector<free_queue::entry> out(1);
  EXPECT_EQ(q.take(2, out.data(), out.size()), 1U);
  EXPECT_EQ(q.urgent_devices(), std::uint64_t{1} << 2);
  EXPECT_EQ(q.take(2, out.data(), out.size()), 1U);
  EXPECT_EQ(q.urgent_devices(), 0U);
}

TEST(FreeQueue, TheQueuedMaskFollowsWhatIsQueued)
{
  free_queue q;
  ASSERT_TRUE(q.add(entry_of(0x1000, 8, 0), false).added);
  ASSERT_TRUE(q.add(entry_of(0x2000, 8, 3), false).added);
  EXPECT_EQ(q.queued_devices(), (std::uint64_t{1} << 0) | (std::uint64_t{1} << 3));
  q.drop(3);
  EXPECT_EQ(q.queued_devices(), std::uint64_t{1} << 0);
  EXPECT_EQ(q.queued_bytes(3), 0U);
  EXPECT_EQ(q.queued_bytes(0), 8U);
}

TEST(FreeQueue, TakingInChunksReturnsEveryEntryOnceWithItsRecord)
{
  free_queue q;
  constexpr std::size_t count = 10;
  for (std::size_t i = 1; i <= count; ++i) {
    ASSERT_TRUE(q.add(entry_of(0x100 * i, i, 1), false).added);
  }
  std::vector<free_queue::entry> out(4);
  std::vector<std::uintptr_t> seen;
  std::size_t bytes = 0;
  while (std::size_t const n = q.take(1, out.data(), out.size())) {
    for (std::size_t i = 0; i < n; ++i) {
      seen.push_back(reinterpret_cast<std::uintptr_t>(out[i].ptr));
      bytes += out[i].record.bytes;
      EXPECT_EQ(out[i].record.device, 1);
      EXPECT_EQ(out[i].record.bytes * 0x100, reinterpret_cast<std::uintptr_t>(out[i].ptr));
    }
  }
  EXPECT_EQ(seen.size(), count);
  EXPECT_EQ(bytes, count * (count + 1) / 2);
  EXPECT_EQ(q.queued_devices(), 0U);
  EXPECT_EQ(q.queued_bytes(1), 0U);
}

TEST(FreeQueue, ADeviceOutsideTheLimitIsRefused)
{
  free_queue q;
  EXPECT_FALSE(q.add(entry_of(0x1000, 8, free_queue::max_devices), false).added);
  EXPECT_FALSE(q.add(entry_of(0x1000, 8, -1), false).added);
  free_queue::entry out;
  EXPECT_EQ(q.take(free_queue::max_devices, &out, 1), 0U);
  EXPECT_EQ(q.queued_bytes(-1), 0U);
}

}  // namespace
