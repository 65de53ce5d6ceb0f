// The statistics on their own (state/statistics.hpp) and the report made of
// them (the same header): counters, the peak, devices outside the
// limit, the JSON document and the table. No CUDA: there is no pool, so the
// pool's high-water mark is null.
#include "state/statistics.hpp"
#include "state/device_pools.hpp"

#include <gtest/gtest.h>
#include <asyncshim/config/settings.hpp>

#include <string>

namespace {

using asyncshim::shim::device_pools;
using asyncshim::shim::interposed_call;
using asyncshim::shim::passthrough_reason;
using asyncshim::shim::report_sources;
using asyncshim::shim::statistics;

std::uint64_t value(std::atomic<std::uint64_t> const& counter) { return counter.load(); }

TEST(Statistics, CountsBytesInUseAndTheirPeak)
{
  statistics stats;
  stats.allocation_served(1, 1000, interposed_call::malloc);
  stats.allocation_served(1, 500, interposed_call::driver_malloc);
  stats.free_served(1, 1000);
  stats.allocation_served(1, 200, interposed_call::malloc);
  auto const& c = *stats.device(1);
  EXPECT_EQ(value(c.allocations), 3U);
  EXPECT_EQ(value(c.frees), 1U);
  EXPECT_EQ(value(c.bytes_requested), 1700U);
  EXPECT_EQ(value(c.bytes_in_use), 700U);
  EXPECT_EQ(value(c.peak_bytes_in_use), 1500U);
  EXPECT_EQ(value(c.allocations_by_call[static_cast<std::size_t>(interposed_call::malloc)]), 2U);
  EXPECT_EQ(value(c.allocations_by_call[static_cast<std::size_t>(interposed_call::driver_malloc)]), 1U);
  EXPECT_TRUE(c.used.load());
  EXPECT_FALSE(stats.device(0)->used.load());
}

TEST(Statistics, PassThroughsFailuresAndUnattributedCalls)
{
  statistics stats;
  stats.allocation_passed_through(0, passthrough_reason::capture);
  stats.allocation_passed_through(statistics::unattributed, passthrough_reason::no_current_device);
  stats.allocation_failed(0);
  stats.free_passed_through();
  stats.free_passed_through();
  EXPECT_EQ(value(stats.device(0)->passed_through[static_cast<std::size_t>(passthrough_reason::capture)]), 1U);
  EXPECT_EQ(value(stats.device(0)->failed_allocations), 1U);
  EXPECT_EQ(
    value(
      stats.unattributed_counters().passed_through[static_cast<std::size_t>(passthrough_reason::no_current_device)]),
    1U);
  EXPECT_EQ(stats.frees_passed_through(), 2U);
}

TEST(Statistics, ADeviceOutsideTheLimitHasNoCounters)
{
  statistics stats;
  EXPECT_EQ(stats.device(statistics::max_devices), nullptr);
  EXPECT_EQ(stats.device(-2), nullptr);
  stats.allocation_served(statistics::max_devices, 10, interposed_call::malloc);  // counted as unattributed, or dropped
  for (int d = 0; d < statistics::max_devices; ++d) {
    EXPECT_FALSE(stats.device(d)->used.load()) << d;
  }
}

struct report : ::testing::Test {
  asyncshim::config::settings settings;
  statistics stats;
  device_pools pools{settings};
  report_sources sources{settings, stats, pools};
};

TEST_F(report, TheJsonDocumentHasTheCountsOfEachUsedDevice)
{
  stats.allocation_served(2, 4096, interposed_call::malloc);
  stats.allocation_served(2, 4096, interposed_call::malloc);
  stats.free_served(2, 4096);
  std::string const json = stats_json(sources, 4242);
  EXPECT_NE(json.find("\"format\": \"asyncshim-stats\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"format_version\": 1"), std::string::npos) << json;
  EXPECT_NE(json.find("\"pid\": 4242"), std::string::npos) << json;
  EXPECT_NE(
    json.find("{\"device\": 2, \"allocations\": 2, \"frees\": 1, \"bytes_requested\": 8192, "
              "\"bytes_in_use\": 4096, \"peak_bytes_in_use\": 8192, \"live_allocations\": 1, "
              "\"allocations_by_entry_point\": {\"cudaMalloc\": 2, \"cuMemAlloc_v2\": 0, \"cudaMallocPitch\": 0, "
              "\"cudaMalloc3D\": 0, \"cuMemAllocPitch_v2\": 0}, "
              "\"pool_reserved_high_water\": null"),
    std::string::npos)
    << json;
  EXPECT_EQ(json.find("\"device\": 0"), std::string::npos) << "an unused device is not reported:\n" << json;
  EXPECT_EQ(json.back(), '\n');
}

TEST_F(report, TheTableHasOneRowPerUsedDevice)
{
  stats.allocation_served(0, 3 << 20, interposed_call::malloc);
  std::string const table = stats_table(sources);
  EXPECT_NE(table.find("statistics (mode pool):"), std::string::npos) << table;
  EXPECT_NE(table.find("3.0 MiB"), std::string::npos) << table;
}

TEST(StatsPath, PercentPIsTheProcessId)
{
  EXPECT_EQ(asyncshim::shim::expand_stats_path("/tmp/stats-%p.json", 77), "/tmp/stats-77.json");
  EXPECT_EQ(asyncshim::shim::expand_stats_path("%p-%p", 5), "5-5");
  EXPECT_EQ(asyncshim::shim::expand_stats_path("plain%", 5), "plain%");
  EXPECT_EQ(asyncshim::shim::expand_stats_path("%q", 5), "%q");
}

}  // namespace
