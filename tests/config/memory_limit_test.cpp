// ASYNCSHIM_MEMORY_LIMIT: one limit for every device, per-device entries, and
// the values refused (each message naming the variable, the value and why).
#include <gtest/gtest.h>

#include <string>

#include "asyncshim/config/settings.hpp"
#include "parse_env.hpp"

namespace {

namespace cfg = asyncshim::config;
using cfg::testing::parse;

constexpr std::uint64_t GiB = std::uint64_t{1} << 30;

cfg::size_spec bytes(std::uint64_t n) { return cfg::size_spec{cfg::size_spec::kind::bytes, n, 0.0}; }
cfg::size_spec percent(double p) { return cfg::size_spec{cfg::size_spec::kind::percent_of_total, 0, p}; }

TEST(MemoryLimit, OffByDefault)
{
  auto const result = parse({});
  EXPECT_FALSE(result.values.memory_limit.any());
  EXPECT_EQ(result.values.memory_limit.of(0), std::nullopt);
  auto const off = parse({"ASYNCSHIM_MEMORY_LIMIT=off"});
  EXPECT_TRUE(off.diagnostics.empty());
  EXPECT_FALSE(off.values.memory_limit.any());
}

TEST(MemoryLimit, OneSizeForEveryDevice)
{
  auto const result = parse({"ASYNCSHIM_MEMORY_LIMIT=20GiB"});
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_FALSE(result.values.disabled);
  EXPECT_EQ(result.values.memory_limit.of(0), bytes(20 * GiB));
  EXPECT_EQ(result.values.memory_limit.of(7), bytes(20 * GiB));
  EXPECT_EQ(cfg::parse_memory_limit(" 40% ")->of(3), percent(40));
}

TEST(MemoryLimit, PerDeviceWithADefaultForTheOthers)
{
  auto const limits = cfg::parse_memory_limit("0:20GiB, 1 : 10% ,4G");
  ASSERT_TRUE(limits);
  EXPECT_EQ(limits->of(0), bytes(20 * GiB));
  EXPECT_EQ(limits->of(1), percent(10));
  EXPECT_EQ(limits->of(2), bytes(4 * GiB));
  EXPECT_EQ(limits->to_string(), "0:20GiB,1:10%,4GiB");
  auto const only_listed = cfg::parse_memory_limit("1:1G");
  ASSERT_TRUE(only_listed);
  EXPECT_EQ(only_listed->of(0), std::nullopt);
  EXPECT_EQ(only_listed->of(1), bytes(GiB));
  EXPECT_EQ(cfg::parse_memory_limit(only_listed->to_string()), only_listed);
}

struct refused {
  char const* value;
  char const* why;
};

class MemoryLimitRefused : public ::testing::TestWithParam<refused> {};

TEST_P(MemoryLimitRefused, DisablesTheShimAndSaysWhy)
{
  auto const [value, why] = GetParam();
  auto const result = parse({std::string("ASYNCSHIM_MEMORY_LIMIT=") + value});
  EXPECT_TRUE(result.values.disabled);
  EXPECT_FALSE(cfg::parse_memory_limit(value));
  ASSERT_FALSE(result.diagnostics.empty());
  std::string const& text = result.diagnostics.front().text;
  EXPECT_NE(text.find(std::string("ASYNCSHIM_MEMORY_LIMIT='") + value + "'"), std::string::npos) << text;
  EXPECT_NE(text.find(why), std::string::npos) << text;
  EXPECT_NE(text.find("expected off, or a size"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(
  Values, MemoryLimitRefused,
  ::testing::Values(refused{"0", "a limit of 0 would refuse every allocation"},
                    refused{"0%", "a limit of 0 would refuse every allocation"},
                    refused{"1:1G,1:2G", "device 1 is given twice"},
                    refused{"x:1G", "'x' is not a device index (0 to 63)"},
                    refused{"-1:1G", "'-1' is not a device index"}, refused{"64:1G", "'64' is not a device index"},
                    refused{"1G,2G", "more than one size without a device"},
                    refused{"half-free", "half-free is accepted only by ASYNCSHIM_INITIAL_POOL_SIZE"},
                    refused{"0:1G,,1:2G", "an entry between commas is empty"},
                    refused{"0:1G,", "an entry between commas is empty"}, refused{"5:abc", "'abc' is not a size"},
                    refused{"101%", "'101%' is not a size"}, refused{"1GB", "'1GB' is not a size"}));

// A message is one line, whatever the value holds.
TEST(MemoryLimit, ARefusedEntryIsQuotedOnOneLine)
{
  auto const result = parse({"ASYNCSHIM_MEMORY_LIMIT=2:1G\n3=x"});
  ASSERT_FALSE(result.diagnostics.empty());
  std::string const& text = result.diagnostics.front().text;
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  EXPECT_NE(text.find("ASYNCSHIM_MEMORY_LIMIT='2:1G\\n3=x' is not a valid limit: '1G\\n3=x' is not a size"),
            std::string::npos)
    << text;
}

}  // namespace
