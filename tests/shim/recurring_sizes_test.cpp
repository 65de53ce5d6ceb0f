// The table of sizes the reuse cache keeps (state/recurring_sizes.hpp): a size
// counts once two allocations of it have missed, each size on its own; a
// stream of one-off sizes does not push out the sizes that recur, nor do
// sizes of one bucket push out each other.
#include "state/recurring_sizes.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <random>
#include <vector>

namespace {

using asyncshim::shim::recurring_sizes;

TEST(RecurringSizes, ASizeRecursOnceTwoAllocationsOfItMissed)
{
  auto sizes = std::make_unique<recurring_sizes>();
  EXPECT_FALSE(sizes->recurring(4096));
  sizes->missed(4096);
  EXPECT_FALSE(sizes->recurring(4096));
  sizes->missed(4096);
  EXPECT_TRUE(sizes->recurring(4096));
  sizes->missed(4096);
  EXPECT_TRUE(sizes->recurring(4096));
  EXPECT_FALSE(sizes->recurring(4097));  // only that size
  EXPECT_FALSE(sizes->recurring(0));     // an empty slot is no size's
}

TEST(RecurringSizes, OneOffSizesDoNotPushOutTheSizesThatRecur)
{
  auto sizes = std::make_unique<recurring_sizes>();
  for (std::size_t bytes : {std::size_t{256}, std::size_t{4096}, std::size_t{1} << 20}) {
    sizes->missed(bytes);
    sizes->missed(bytes);
  }
  for (std::size_t i = 1; i <= 200000; ++i) {  // each once: a churn of random sizes
    sizes->missed((std::size_t{1} << 21) + 4 * i);
  }
  EXPECT_TRUE(sizes->recurring(256));
  EXPECT_TRUE(sizes->recurring(4096));
  EXPECT_TRUE(sizes->recurring(std::size_t{1} << 20));
  EXPECT_FALSE(sizes->recurring((std::size_t{1} << 21) + 4));
}

TEST(RecurringSizes, ManyRecurringSizesAreAllRemembered)
{
  auto sizes = std::make_unique<recurring_sizes>();
  std::mt19937_64 random{42};
  std::uniform_int_distribution<std::size_t> any{1, std::size_t{1} << 20};
  std::vector<std::size_t> model(2000);  // a large model's distinct sizes, each allocated once a step
  for (std::size_t& bytes : model) {
    bytes = 512 * any(random);
  }
  for (int step = 0; step < 2; ++step) {
    for (std::size_t bytes : model) {
      sizes->missed(bytes);
    }
  }
  std::size_t remembered = 0;
  for (std::size_t bytes : model) {
    remembered += sizes->recurring(bytes) ? 1 : 0;
  }
  EXPECT_GE(remembered, model.size() * 99 / 100);
}

// Sizes that share a bucket, allocated in turn, do not take each other's slot.
TEST(RecurringSizes, SizesOfOneBucketAllocatedInTurnAllRecur)
{
  std::vector<std::size_t> same_bucket;
  for (std::size_t bytes = 256; same_bucket.size() < recurring_sizes::ways; bytes += 256) {
    if (recurring_sizes::bucket(bytes) == recurring_sizes::bucket(4096)) { same_bucket.push_back(bytes); }
  }
  auto sizes = std::make_unique<recurring_sizes>();
  for (int step = 0; step < 2; ++step) {
    for (std::size_t bytes : same_bucket) {
      sizes->missed(bytes);
    }
  }
  for (std::size_t bytes : same_bucket) {
    EXPECT_TRUE(sizes->recurring(bytes)) << bytes;
  }
}

}  // namespace
