// The table of sizes the reuse cache keeps (state/recurring_sizes.hpp): a size
// counts once two allocations of it have missed, each size on its own, and a
// stream of one-off sizes does not push out the sizes that recur.
#include "state/recurring_sizes.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <memory>

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
  constexpr std::size_t count = 1000;  // a large model's distinct sizes
  for (int round = 0; round < 2; ++round) {
    for (std::size_t i = 1; i <= count; ++i) {
      sizes->missed(512 * i);
    }
  }
  std::size_t remembered = 0;
  for (std::size_t i = 1; i <= count; ++i) {
    remembered += sizes->recurring(512 * i) ? 1 : 0;
  }
  EXPECT_GE(remembered, count * 99 / 100);
}

}  // namespace
