// parse_environment: values, outcomes and the exact diagnostics.

#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "asyncshim/config/settings.hpp"
#include "byte_literals.hpp"
#include "parse_env.hpp"

namespace {

namespace cfg = asyncshim::config;
using cfg::diagnostic;
using cfg::log_level;

using byte_literals::GiB;

constexpr char const* size_forms =
  "expected a number of bytes with an optional unit B, K/KiB, M/MiB, G/GiB or T/TiB (powers of 1024; e.g. "
  "4GiB, 1.5G, 1048576) or a percentage of the device's total memory (e.g. 25%)";
// What ASYNCSHIM_INITIAL_POOL_SIZE accepts besides the forms of every size.
constexpr char const* half_free_form = ", or half-free (half of the device's free memory)";
constexpr char const* disabled_one =
  "asyncshim is disabled for this process because of the invalid setting above: cudaMalloc and cudaFree go to "
  "the native allocator unchanged";
constexpr char const* disabled_many =
  "asyncshim is disabled for this process because of the invalid settings above: cudaMalloc and cudaFree go to "
  "the native allocator unchanged";
constexpr char const* known_list =
  "ASYNCSHIM_INITIAL_POOL_SIZE, ASYNCSHIM_RELEASE_THRESHOLD, ASYNCSHIM_MEMORY_LIMIT, ASYNCSHIM_IDLE_RELEASE, "
  "ASYNCSHIM_REUSE_CACHE, ASYNCSHIM_HOST_POOL, "
  "ASYNCSHIM_FREE_BACKLOG, ASYNCSHIM_IN_ORDER_FREES, ASYNCSHIM_EXPORT_HANDLE_TYPE, "
  "ASYNCSHIM_STREAM, "
  "ASYNCSHIM_MODE, ASYNCSHIM_INTERCEPT, ASYNCSHIM_ORDERING, ASYNCSHIM_LOG_LEVEL, ASYNCSHIM_LOG_FILE, "
  "ASYNCSHIM_STATS_FILE, "
  "ASYNCSHIM_SHOW_STATS, ASYNCSHIM_LEAK_REPORT, ASYNCSHIM_LEAK_REPORT_FILE, ASYNCSHIM_LEAK_STACK_DEPTH, "
  "ASYNCSHIM_EVENT_LOG, ASYNCSHIM_METRICS_FILE, ASYNCSHIM_METRICS_INTERVAL, "
  "ASYNCSHIM_DISABLE";

using asyncshim::config::testing::parse;

cfg::size_spec bytes(std::uint64_t n) { return {cfg::size_spec::kind::bytes, n, 0.0}; }
cfg::size_spec percent(double p) { return {cfg::size_spec::kind::percent_of_total, 0, p}; }

void expect_defaults_except_disabled(cfg::settings const& s)
{
  EXPECT_FALSE(s.initial_pool_size.has_value());
  EXPECT_FALSE(s.release_threshold.has_value());
  EXPECT_EQ(s.export_handle_type, cfg::handle_type::automatic);
  EXPECT_EQ(s.stream, cfg::stream_choice::legacy);
  EXPECT_EQ(s.level, log_level::warn);
  EXPECT_EQ(s.idle_release_ms, 1000u);
  EXPECT_EQ(s.log_file, "");
}

TEST(KnownVariables, FixedOrder)
{
  std::vector<std::string> const expected{"ASYNCSHIM_INITIAL_POOL_SIZE",
                                          "ASYNCSHIM_RELEASE_THRESHOLD",
                                          "ASYNCSHIM_MEMORY_LIMIT",
                                          "ASYNCSHIM_IDLE_RELEASE",
                                          "ASYNCSHIM_REUSE_CACHE",
                                          "ASYNCSHIM_HOST_POOL",
                                          "ASYNCSHIM_FREE_BACKLOG",
                                          "ASYNCSHIM_IN_ORDER_FREES",
                                          "ASYNCSHIM_EXPORT_HANDLE_TYPE",
                                          "ASYNCSHIM_STREAM",
                                          "ASYNCSHIM_MODE",
                                          "ASYNCSHIM_INTERCEPT",
                                          "ASYNCSHIM_ORDERING",
                                          "ASYNCSHIM_LOG_LEVEL",
                                          "ASYNCSHIM_LOG_FILE",
                                          "ASYNCSHIM_STATS_FILE",
                                          "ASYNCSHIM_SHOW_STATS",
                                          "ASYNCSHIM_LEAK_REPORT",
                                          "ASYNCSHIM_LEAK_REPORT_FILE",
                                          "ASYNCSHIM_LEAK_STACK_DEPTH",
                                          "ASYNCSHIM_EVENT_LOG",
                                          "ASYNCSHIM_METRICS_FILE",
                                          "ASYNCSHIM_METRICS_INTERVAL",
                                          "ASYNCSHIM_DISABLE"};
  EXPECT_EQ(cfg::known_variables(), expected);
}

TEST(ParseEnvironment, EmptyEnvironmentGivesDefaults)
{
  auto const result = parse({});
  expect_defaults_except_disabled(result.values);
  EXPECT_FALSE(result.values.disabled);
  EXPECT_TRUE(result.diagnostics.empty());
}

TEST(ParseEnvironment, NullEnvironmentGivesDefaults)
{
  auto const result = cfg::parse_environment(nullptr);
  expect_defaults_except_disabled(result.values);
  EXPECT_FALSE(result.values.disabled);
  EXPECT_TRUE(result.diagnostics.empty());
}

TEST(ParseEnvironment, UnrelatedVariablesAreIgnored)
{
  auto const result = parse({"PATH=/usr/bin", "HOME=/root", "ASYNCSHIMX=1", "ASYNCSHIM=1", "MY_ASYNCSHIM_DISABLE=1",
                             "NOEQUALSSIGN", "=weird", "CUDA_VISIBLE_DEVICES=0"});
  expect_defaults_except_disabled(result.values);
  EXPECT_FALSE(result.values.disabled);
  EXPECT_TRUE(result.diagnostics.empty());
}

TEST(ParseEnvironment, EveryVariableValid)
{
  auto const result = parse({"ASYNCSHIM_INITIAL_POOL_SIZE=4GiB", "ASYNCSHIM_RELEASE_THRESHOLD=25%",
                             "ASYNCSHIM_EXPORT_HANDLE_TYPE=posix_fd", "ASYNCSHIM_STREAM=per-thread",
                             "ASYNCSHIM_LOG_LEVEL=debug", "ASYNCSHIM_LOG_FILE=/tmp/a shim.log", "ASYNCSHIM_DISABLE=0"});
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_FALSE(result.values.disabled);
  EXPECT_EQ(result.values.initial_pool_size, bytes(4 * GiB));
  EXPECT_EQ(result.values.release_threshold, percent(25));
  EXPECT_EQ(result.values.export_handle_type, cfg::handle_type::posix_file_descriptor);
  EXPECT_EQ(result.values.stream, cfg::stream_choice::per_thread);
  EXPECT_EQ(result.values.level, log_level::debug);
  EXPECT_EQ(result.values.log_file, "/tmp/a shim.log");
}

TEST(ParseEnvironment, ZeroInitialSizeIsValid)
{
  auto const result = parse({"ASYNCSHIM_INITIAL_POOL_SIZE=0"});
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_FALSE(result.values.disabled);
  EXPECT_EQ(result.values.initial_pool_size, bytes(0));
}

TEST(ParseEnvironment, ValueMayContainEqualsSign)
{
  auto const result = parse({"ASYNCSHIM_LOG_FILE=/tmp/a=b.log"});
  EXPECT_EQ(result.values.log_file, "/tmp/a=b.log");
  EXPECT_TRUE(result.diagnostics.empty());
}

TEST(ParseEnvironment, LogFileIsStoredAsGiven)
{
  auto const result = parse({"ASYNCSHIM_LOG_FILE= relative/dir/with space "});
  EXPECT_EQ(result.values.log_file, " relative/dir/with space ");
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_FALSE(result.values.disabled);
}

TEST(ParseEnvironment, EmptyValuesAreUnset)
{
  auto const result =
    parse({"ASYNCSHIM_INITIAL_POOL_SIZE=", "ASYNCSHIM_RELEASE_THRESHOLD=", "ASYNCSHIM_EXPORT_HANDLE_TYPE=",
           "ASYNCSHIM_STREAM=", "ASYNCSHIM_LOG_LEVEL=", "ASYNCSHIM_LOG_FILE=", "ASYNCSHIM_DISABLE="});
  expect_defaults_except_disabled(result.values);
  EXPECT_FALSE(result.values.disabled);
  EXPECT_TRUE(result.diagnostics.empty());
}

TEST(ParseEnvironment, WhiteSpaceOnlySizeIsInvalidNotUnset)
{
  auto const result = parse({"ASYNCSHIM_INITIAL_POOL_SIZE=  "});
  EXPECT_TRUE(result.values.disabled);
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_EQ(result.diagnostics[0].text,
            std::string("ASYNCSHIM_INITIAL_POOL_SIZE='  ' is not a valid size: ") + size_forms + half_free_form);
}

TEST(ParseEnvironment, HalfFreeIsAnInitialPoolSize)
{
  for (char const* value : {"half-free", "HALF-FREE", " half_free "}) {
    auto const result = parse({std::string("ASYNCSHIM_INITIAL_POOL_SIZE=") + value});
    EXPECT_FALSE(result.values.disabled) << value;
    EXPECT_TRUE(result.diagnostics.empty()) << value;
    ASSERT_TRUE(result.values.initial_pool_size) << value;
    EXPECT_EQ(result.values.initial_pool_size->unit, cfg::size_spec::kind::half_of_free) << value;
    EXPECT_EQ(result.values.initial_pool_size->resolve(100 * GiB, 40 * GiB), 20 * GiB) << value;
  }
}

TEST(ParseEnvironment, HalfFreeIsNoReleaseThreshold)
{
  auto const result = parse({"ASYNCSHIM_RELEASE_THRESHOLD=half-free"});
  EXPECT_TRUE(result.values.disabled);
  EXPECT_FALSE(result.values.release_threshold);
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_EQ(result.diagnostics[0].level, log_level::error);
  EXPECT_EQ(result.diagnostics[0].text,
            std::string("ASYNCSHIM_RELEASE_THRESHOLD='half-free' is not a valid size: half-free (half of the device's "
                        "free memory) is accepted only by ASYNCSHIM_INITIAL_POOL_SIZE; ") +
              size_forms);
}

constexpr char const* free_backlog_retired =
  "still works but is retired: ASYNCSHIM_ORDERING=sync makes every cudaFree wait for the device, as native "
  "cudaFree does";

// A retired variable keeps working; its one warning comes first.
void expect_only_retired_warning(cfg::parse_result const& result, std::string const& setting, char const* replacement)
{
  ASSERT_EQ(result.diagnostics.size(), 1u) << setting;
  EXPECT_EQ(result.diagnostics[0], (diagnostic{log_level::warn, setting + " " + replacement}));
}

TEST(ParseEnvironment, FreeBacklogIsASizeOrOff)
{
  auto result = parse({"ASYNCSHIM_FREE_BACKLOG=256MiB"});
  EXPECT_FALSE(result.values.disabled);
  expect_only_retired_warning(result, "ASYNCSHIM_FREE_BACKLOG=256MiB", free_backlog_retired);
  EXPECT_EQ(result.values.free_backlog, bytes(std::uint64_t{256} << 20));
  EXPECT_EQ(parse({"ASYNCSHIM_FREE_BACKLOG=2%"}).values.free_backlog, percent(2.0));
  for (char const* off : {"off", " OFF ", "Off", "0", "0B", "0%"}) {
    result = parse({std::string("ASYNCSHIM_FREE_BACKLOG=") + off});
    EXPECT_FALSE(result.values.disabled) << off;
    expect_only_retired_warning(result, std::string("ASYNCSHIM_FREE_BACKLOG=") + off, free_backlog_retired);
    EXPECT_FALSE(result.values.free_backlog.has_value()) << off;
  }
  EXPECT_FALSE(parse({}).values.free_backlog.has_value());
}

TEST(ParseEnvironment, InOrderFreesIsRetiredButStillWorks)
{
  auto const result = parse({"ASYNCSHIM_IN_ORDER_FREES=off"});
  EXPECT_FALSE(result.values.disabled);
  EXPECT_FALSE(result.values.in_order_frees);
  expect_only_retired_warning(result, "ASYNCSHIM_IN_ORDER_FREES=off",
                              "still works but is retired: device ordering (ASYNCSHIM_ORDERING=device, the default) "
                              "decides by itself when a free may go in order; ASYNCSHIM_ORDERING=sync or stream for "
                              "another ordering");
  EXPECT_TRUE(parse({}).values.in_order_frees);
}

TEST(ParseEnvironment, ReuseCacheIsOnByDefaultAndZeroTurnsItOff)
{
  EXPECT_FALSE(parse({}).values.reuse_cache.has_value());
  EXPECT_EQ(cfg::default_reuse_cache_bytes, std::uint64_t{256} << 20);
  auto const result = parse({"ASYNCSHIM_REUSE_CACHE=0"});
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_EQ(result.values.reuse_cache, bytes(0));
}

// An invalid value of a retired variable is an error, not "still works".
TEST(ParseEnvironment, BadFreeBacklogNamesTheFormsAndDisables)
{
  auto result = parse({"ASYNCSHIM_FREE_BACKLOG=lots"});
  EXPECT_TRUE(result.values.disabled);
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_EQ(result.diagnostics[0].text,
            "ASYNCSHIM_FREE_BACKLOG='lots' is not a valid size: expected a number of bytes with an optional unit B, "
            "K/KiB, M/MiB, G/GiB or T/TiB (powers of 1024; e.g. 4GiB, 1.5G, 1048576) or a percentage of the "
            "device's total memory (e.g. 25%), or off (or 0)");
  EXPECT_EQ(result.diagnostics[1], (diagnostic{log_level::error, disabled_one}));
  result = parse({"ASYNCSHIM_FREE_BACKLOG=half-free"});
  EXPECT_TRUE(result.values.disabled);
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_NE(result.diagnostics[0].text.find("is accepted only by ASYNCSHIM_INITIAL_POOL_SIZE"), std::string::npos)
    << result.diagnostics[0].text;
}

TEST(ParseEnvironment, IdleReleaseDurations)
{
  struct case_t {
    char const* text;
    std::uint64_t ms;
  };
  for (auto const& c : {case_t{"1s", 1000}, case_t{"250ms", 250}, case_t{"1.5s", 1500}, case_t{" 2 S ", 2000},
                        case_t{"0.0015s", 1}, case_t{"10.9ms", 10}, case_t{"off", 0}, case_t{"OFF", 0}, case_t{"0", 0},
                        case_t{"0s", 0}, case_t{"0.000ms", 0}, case_t{"86400s", 86400000}, case_t{"1ms", 1}}) {
    auto const result = parse({std::string("ASYNCSHIM_IDLE_RELEASE=") + c.text});
    EXPECT_FALSE(result.values.disabled) << c.text;
    EXPECT_TRUE(result.diagnostics.empty()) << c.text;
    EXPECT_EQ(result.values.idle_release_ms, c.ms) << c.text;
  }
  EXPECT_EQ(parse({}).values.idle_release_ms, 1000u);
}

TEST(ParseEnvironment, BadIdleReleaseIsOneErrorAndDisables)
{
  for (char const* value : {"1", "soon", "-1s", "1m", "1.s", ".5s", "1 h", "99999999999999999999s", "1e3ms",
                            "10000000000s", "86401s", "0.4ms", "0.0001s"}) {
    auto const result = parse({std::string("ASYNCSHIM_IDLE_RELEASE=") + value});
    EXPECT_TRUE(result.values.disabled) << value;
    ASSERT_EQ(result.diagnostics.size(), 2u) << value;
    EXPECT_EQ(result.diagnostics[0].level, log_level::error) << value;
    EXPECT_EQ(result.diagnostics[0].text,
              std::string("ASYNCSHIM_IDLE_RELEASE='") + value +
                "' is not a valid duration: expected a number with the unit ms or s from 1ms to 24h (e.g. 500ms, "
                "2s, 1.5s), or off (or 0) for never")
      << value;
    EXPECT_EQ(result.diagnostics[1].text, disabled_one) << value;
  }
}

TEST(ParseEnvironment, FirstOccurrenceWins)
{
  auto const result = parse({"ASYNCSHIM_INITIAL_POOL_SIZE=1GiB", "ASYNCSHIM_STREAM=per_thread",
                             "ASYNCSHIM_INITIAL_POOL_SIZE=2GiB", "ASYNCSHIM_STREAM=bogus"});
  EXPECT_EQ(result.values.initial_pool_size, bytes(GiB));
  EXPECT_EQ(result.values.stream, cfg::stream_choice::per_thread);
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_FALSE(result.values.disabled);
}

TEST(ParseEnvironment, FirstOccurrenceWinsEvenWhenInvalid)
{
  auto const result = parse({"ASYNCSHIM_RELEASE_THRESHOLD=lots", "ASYNCSHIM_RELEASE_THRESHOLD=1GiB"});
  EXPECT_FALSE(result.values.release_threshold.has_value());
  EXPECT_TRUE(result.values.disabled);
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_NE(result.diagnostics[0].text.find("'lots'"), std::string::npos);
}

TEST(ParseEnvironment, FirstOccurrenceWinsEvenWhenEmpty)
{
  auto const result = parse({"ASYNCSHIM_DISABLE=", "ASYNCSHIM_DISABLE=1"});
  EXPECT_FALSE(result.values.disabled);
  EXPECT_TRUE(result.diagnostics.empty());
}

TEST(ParseEnvironment, InvalidReleaseThresholdExactTextAndDisabled)
{
  auto const result = parse({"ASYNCSHIM_RELEASE_THRESHOLD=lots"});
  EXPECT_TRUE(result.values.disabled);
  EXPECT_FALSE(result.values.release_threshold.has_value());
  std::vector<diagnostic> const expected{
    {log_level::error,
     "ASYNCSHIM_RELEASE_THRESHOLD='lots' is not a valid size: expected a number of bytes with an optional unit B, "
     "K/KiB, M/MiB, G/GiB or T/TiB (powers of 1024; e.g. 4GiB, 1.5G, 1048576) or a percentage of the device's "
     "total memory (e.g. 25%)"},
    {log_level::error,
     "asyncshim is disabled for this process because of the invalid setting above: cudaMalloc and cudaFree go to "
     "the native allocator unchanged"},
  };
  EXPECT_EQ(result.diagnostics, expected);
}

TEST(ParseEnvironment, InvalidValueKeepsOtherValidSettings)
{
  auto const result =
    parse({"ASYNCSHIM_INITIAL_POOL_SIZE=2GiB", "ASYNCSHIM_RELEASE_THRESHOLD=lots", "ASYNCSHIM_LOG_LEVEL=info"});
  EXPECT_TRUE(result.values.disabled);
  EXPECT_EQ(result.values.initial_pool_size, bytes(2 * GiB));
  EXPECT_FALSE(result.values.release_threshold.has_value());
  EXPECT_EQ(result.values.level, log_level::info);
}

TEST(ParseEnvironment, AmbiguousDecimalUnitMessages)
{
  struct example {
    char const* value;
    char const* text;
  };
  for (auto const& [value, text] : {
         example{"4GB", "ASYNCSHIM_INITIAL_POOL_SIZE='4GB' is ambiguous: write 4GiB (4 x 1024^3 bytes) or give "
                        "the number of bytes"},
         example{"4gb", "ASYNCSHIM_INITIAL_POOL_SIZE='4gb' is ambiguous: write 4GiB (4 x 1024^3 bytes) or give "
                        "the number of bytes"},
         example{"1.5 GB", "ASYNCSHIM_INITIAL_POOL_SIZE='1.5 GB' is ambiguous: write 1.5GiB (1.5 x 1024^3 bytes) "
                           "or give the number of bytes"},
         example{"512KB", "ASYNCSHIM_INITIAL_POOL_SIZE='512KB' is ambiguous: write 512KiB (512 x 1024 bytes) or "
                          "give the number of bytes"},
         example{"256MB", "ASYNCSHIM_INITIAL_POOL_SIZE='256MB' is ambiguous: write 256MiB (256 x 1024^2 bytes) "
                          "or give the number of bytes"},
         example{"2TB", "ASYNCSHIM_INITIAL_POOL_SIZE='2TB' is ambiguous: write 2TiB (2 x 1024^4 bytes) or give "
                        "the number of bytes"},
       }) {
    auto const result = parse({std::string("ASYNCSHIM_INITIAL_POOL_SIZE=") + value});
    EXPECT_TRUE(result.values.disabled) << value;
    EXPECT_FALSE(result.values.initial_pool_size.has_value()) << value;
    ASSERT_EQ(result.diagnostics.size(), 2u) << value;
    EXPECT_EQ(result.diagnostics[0], (diagnostic{log_level::error, text}));
    EXPECT_EQ(result.diagnostics[1], (diagnostic{log_level::error, disabled_one}));
  }
}

TEST(ParseEnvironment, PercentOverHundredMessage)
{
  auto const result = parse({"ASYNCSHIM_RELEASE_THRESHOLD=150%"});
  EXPECT_TRUE(result.values.disabled);
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_EQ(result.diagnostics[0],
            (diagnostic{log_level::error,
                        "ASYNCSHIM_RELEASE_THRESHOLD='150%' is not a valid size: a percentage of the device's total "
                        "memory must be between 0% and 100%"}));
}

TEST(ParseEnvironment, OverflowAndFractionalBytesMessagesListTheForms)
{
  for (char const* value : {"99999999999999999999", "17179869184TiB", "1.5", "1.5B"}) {
    auto const result = parse({std::string("ASYNCSHIM_INITIAL_POOL_SIZE=") + value});
    EXPECT_TRUE(result.values.disabled) << value;
    ASSERT_EQ(result.diagnostics.size(), 2u) << value;
    auto const& text = result.diagnostics[0].text;
    EXPECT_EQ(result.diagnostics[0].level, log_level::error);
    EXPECT_EQ(text.rfind(std::string("ASYNCSHIM_INITIAL_POOL_SIZE='") + value + "' is not a valid size", 0), 0u)
      << text;
    EXPECT_NE(text.find(size_forms), std::string::npos) << text;
  }
}

TEST(ParseEnvironment, EveryBadSizeIsOneErrorAndDisables)
{
  for (char const* value : {"lots", "-1", "4 GiBs", "1e9", "0x10", "GiB", "--1", "1..5G", "%", "25 %%", "101%"}) {
    auto const result = parse({std::string("ASYNCSHIM_RELEASE_THRESHOLD=") + value});
    EXPECT_TRUE(result.values.disabled) << value;
    EXPECT_FALSE(result.values.release_threshold.has_value()) << value;
    ASSERT_EQ(result.diagnostics.size(), 2u) << value;
    EXPECT_EQ(result.diagnostics[0].level, log_level::error);
    EXPECT_EQ(result.diagnostics[0].text.rfind(std::string("ASYNCSHIM_RELEASE_THRESHOLD='") + value + "'", 0), 0u)
      << result.diagnostics[0].text;
    EXPECT_EQ(result.diagnostics[1], (diagnostic{log_level::error, disabled_one}));
  }
}

TEST(ParseEnvironment, InvalidHandleTypeDisables)
{
  auto const result = parse({"ASYNCSHIM_EXPORT_HANDLE_TYPE=posix"});
  EXPECT_TRUE(result.values.disabled);
  EXPECT_EQ(result.values.export_handle_type, cfg::handle_type::automatic);
  std::vector<diagnostic> const expected{
    {log_level::error, "ASYNCSHIM_EXPORT_HANDLE_TYPE='posix' is not a valid export handle type: expected one of auto, "
                       "none, posix_file_descriptor (or posix_fd), fabric, win32, win32_kmt"},
    {log_level::error, disabled_one},
  };
  EXPECT_EQ(result.diagnostics, expected);
}

TEST(ParseEnvironment, EveryHandleTypeFromTheEnvironment)
{
  struct example {
    char const* value;
    cfg::handle_type expected;
  };
  for (auto const& [value, expected] :
       {example{"auto", cfg::handle_type::automatic}, example{"none", cfg::handle_type::none},
        example{"posix_file_descriptor", cfg::handle_type::posix_file_descriptor},
        example{"POSIX_FD", cfg::handle_type::posix_file_descriptor}, example{"fabric", cfg::handle_type::fabric},
        example{"win32", cfg::handle_type::win32}, example{"Win32_Kmt", cfg::handle_type::win32_kmt}}) {
    auto const result = parse({std::string("ASYNCSHIM_EXPORT_HANDLE_TYPE=") + value});
    EXPECT_EQ(result.values.export_handle_type, expected) << value;
    EXPECT_TRUE(result.diagnostics.empty()) << value;
    EXPECT_FALSE(result.values.disabled) << value;
  }
}

TEST(ParseEnvironment, InvalidStreamDisables)
{
  auto const result = parse({"ASYNCSHIM_STREAM=perthread"});
  EXPECT_TRUE(result.values.disabled);
  EXPECT_EQ(result.values.stream, cfg::stream_choice::legacy);
  std::vector<diagnostic> const expected{
    {log_level::error,
     "ASYNCSHIM_STREAM='perthread' is not a valid stream: expected one of legacy, per-thread (or per_thread); "
     "did you mean per-thread?"},
    {log_level::error, disabled_one},
  };
  EXPECT_EQ(result.diagnostics, expected);
}

TEST(ParseEnvironment, AValueCloseToAnAcceptedOneGetsASuggestion)
{
  struct example {
    char const* setting;
    char const* guess;  // in the first message; null: none
  };
  for (auto const& [setting, guess] : {
         example{"ASYNCSHIM_ORDERING=devise", "expected one of device, stream, sync; did you mean device?"},
         example{"ASYNCSHIM_MODE=observer", "; did you mean observe?"},
         example{"ASYNCSHIM_LOG_LEVEL=warnings", "; did you mean warning?; using warn"},
         example{"ASYNCSHIM_EXPORT_HANDLE_TYPE=posixfd", "; did you mean posix_fd?"},
         example{"ASYNCSHIM_ORDERING=fast", nullptr},  // nothing close: no guess
       }) {
    auto const result = parse({setting});
    ASSERT_FALSE(result.diagnostics.empty()) << setting;
    std::string const& text = result.diagnostics[0].text;
    if (guess != nullptr) {
      EXPECT_NE(text.find(guess), std::string::npos) << text;
    } else {
      EXPECT_EQ(text.find("did you mean"), std::string::npos) << text;
    }
  }
}

TEST(ParseEnvironment, InvalidLogLevelKeepsWarnAndDoesNotDisable)
{
  auto const result = parse({"ASYNCSHIM_LOG_LEVEL=loud"});
  EXPECT_FALSE(result.values.disabled);
  EXPECT_EQ(result.values.level, log_level::warn);
  std::vector<diagnostic> const expected{
    {log_level::error,
     "ASYNCSHIM_LOG_LEVEL='loud' is not a valid log level: expected one of trace, debug, info, warn (or warning), "
     "error, critical, off; using warn"},
  };
  EXPECT_EQ(result.diagnostics, expected);
}

TEST(ParseEnvironment, InvalidLogLevelDoesNotCountTowardsTheSummary)
{
  auto const result = parse({"ASYNCSHIM_LOG_LEVEL=loud", "ASYNCSHIM_STREAM=x"});
  EXPECT_TRUE(result.values.disabled);
  ASSERT_EQ(result.diagnostics.size(), 3u);
  EXPECT_EQ(result.diagnostics[2], (diagnostic{log_level::error, disabled_one}));  // singular: one disabling value
}

TEST(ParseEnvironment, DisableTrue)
{
  for (char const* value : {"1", "true", "YES", "on"}) {
    auto const result = parse({std::string("ASYNCSHIM_DISABLE=") + value});
    EXPECT_TRUE(result.values.disabled) << value;
    std::vector<diagnostic> const expected{
      {log_level::info, std::string("disabled by ASYNCSHIM_DISABLE=") + value +
                          ": cudaMalloc and cudaFree go to the native allocator unchanged"}};
    EXPECT_EQ(result.diagnostics, expected);
  }
}

TEST(ParseEnvironment, DisableFalse)
{
  for (char const* value : {"0", "false", "No", "OFF"}) {
    auto const result = parse({std::string("ASYNCSHIM_DISABLE=") + value});
    EXPECT_FALSE(result.values.disabled) << value;
    EXPECT_TRUE(result.diagnostics.empty()) << value;
  }
}

TEST(ParseEnvironment, InvalidDisableDisables)
{
  auto const result = parse({"ASYNCSHIM_DISABLE=maybe"});
  EXPECT_TRUE(result.values.disabled);
  std::vector<diagnostic> const expected{
    {log_level::error,
     "ASYNCSHIM_DISABLE='maybe' is not a valid boolean: expected one of 1, true, yes, on, 0, false, no, off"},
    {log_level::error, disabled_one},
  };
  EXPECT_EQ(result.diagnostics, expected);
}

TEST(ParseEnvironment, SeveralInvalidValuesInKnownOrderThenPluralSummary)
{
  // Environment order differs from the known order on purpose.
  auto const result = parse({"ASYNCSHIM_DISABLE=maybe", "ASYNCSHIM_STREAM=sideways", "ASYNCSHIM_LOG_LEVEL=loud",
                             "ASYNCSHIM_INITIAL_POOL_SIZE=4GB", "ASYNCSHIM_EXPORT_HANDLE_TYPE=x"});
  EXPECT_TRUE(result.values.disabled);
  expect_defaults_except_disabled(result.values);
  ASSERT_EQ(result.diagnostics.size(), 6u);
  EXPECT_EQ(result.diagnostics[0].text.rfind("ASYNCSHIM_INITIAL_POOL_SIZE='4GB'", 0), 0u);
  EXPECT_EQ(result.diagnostics[1].text.rfind("ASYNCSHIM_EXPORT_HANDLE_TYPE='x'", 0), 0u);
  EXPECT_EQ(result.diagnostics[2].text.rfind("ASYNCSHIM_STREAM='sideways'", 0), 0u);
  EXPECT_EQ(result.diagnostics[3].text.rfind("ASYNCSHIM_LOG_LEVEL='loud'", 0), 0u);
  EXPECT_EQ(result.diagnostics[4].text.rfind("ASYNCSHIM_DISABLE='maybe'", 0), 0u);
  EXPECT_EQ(result.diagnostics[5], (diagnostic{log_level::error, disabled_many}));
  for (auto const& d : result.diagnostics) {
    EXPECT_EQ(d.level, log_level::error) << d.text;
  }
}

TEST(ParseEnvironment, ControlCharactersInValuesAreEscaped)
{
  auto const result = parse({"ASYNCSHIM_STREAM=a\nb"});
  ASSERT_FALSE(result.diagnostics.empty());
  EXPECT_EQ(result.diagnostics[0].text.rfind("ASYNCSHIM_STREAM='a\\nb' is not a valid stream", 0), 0u)
    << result.diagnostics[0].text;
  for (auto const& d : result.diagnostics) {
    EXPECT_EQ(d.text.find('\n'), std::string::npos);
  }
}

TEST(UnknownVariables, TypoGetsASuggestion)
{
  auto const result = parse({"ASYNCSHIM_INITAL_POOL_SIZE=4GiB"});
  EXPECT_FALSE(result.values.disabled);
  EXPECT_FALSE(result.values.initial_pool_size.has_value());
  std::vector<diagnostic> const expected{
    {log_level::warn,
     "unknown variable ASYNCSHIM_INITAL_POOL_SIZE (ignored); did you mean ASYNCSHIM_INITIAL_POOL_SIZE?"}};
  EXPECT_EQ(result.diagnostics, expected);
}

TEST(UnknownVariables, MoreTypos)
{
  struct example {
    char const* name;
    char const* suggestion;
  };
  for (auto const& [name, suggestion] : {
         example{"ASYNCSHIM_RELEASE_THRESHOLDS", "ASYNCSHIM_RELEASE_THRESHOLD"},
         example{"ASYNCSHIM_EXPORT_HANDLE", "ASYNCSHIM_EXPORT_HANDLE_TYPE"},
         example{"ASYNCSHIM_STRAEM", "ASYNCSHIM_STREAM"},
         example{"ASYNCSHIM_LOGLEVEL", "ASYNCSHIM_LOG_LEVEL"},
         example{"ASYNCSHIM_LOG_FIL", "ASYNCSHIM_LOG_FILE"},
         example{"ASYNCSHIM_DISABLED", "ASYNCSHIM_DISABLE"},
         // By words rather than by spelling alone:
         example{"ASYNCSHIM_POOL_SIZE", "ASYNCSHIM_INITIAL_POOL_SIZE"},
         example{"ASYNCSHIM_ORDER", "ASYNCSHIM_ORDERING"},
         example{"ASYNCSHIM_STATS", "ASYNCSHIM_STATS_FILE"},
         example{"ASYNCSHIM_THRESHOLD", "ASYNCSHIM_RELEASE_THRESHOLD"},
         example{"ASYNCSHIM_CACHE", "ASYNCSHIM_REUSE_CACHE"},
         example{"ASYNCSHIM_HANDLE_TYPE", "ASYNCSHIM_EXPORT_HANDLE_TYPE"},
       }) {
    auto const result = parse({std::string(name) + "=1"});
    ASSERT_EQ(result.diagnostics.size(), 1u) << name;
    EXPECT_EQ(result.diagnostics[0], (diagnostic{log_level::warn, std::string("unknown variable ") + name +
                                                                    " (ignored); did you mean " + suggestion + "?"}));
  }
}

TEST(UnknownVariables, LowerAndMixedCaseNamesSuggestTheUpperCaseName)
{
  auto const result = parse({"asyncshim_disable=1", "Asyncshim_Disable=1", "ASYNCSHIM_log_level=debug"});
  EXPECT_FALSE(result.values.disabled);
  EXPECT_EQ(result.values.level, log_level::warn);
  std::vector<diagnostic> const expected{
    {log_level::warn, "unknown variable asyncshim_disable (ignored); did you mean ASYNCSHIM_DISABLE?"},
    {log_level::warn, "unknown variable Asyncshim_Disable (ignored); did you mean ASYNCSHIM_DISABLE?"},
    {log_level::warn, "unknown variable ASYNCSHIM_log_level (ignored); did you mean ASYNCSHIM_LOG_LEVEL?"},
  };
  EXPECT_EQ(result.diagnostics, expected);
}

TEST(UnknownVariables, FarNamesListTheKnownVariables)
{
  auto const result = parse({"ASYNCSHIM_X=1", "ASYNCSHIM_COMPLETELY_UNRELATED_KNOB=1"});
  EXPECT_FALSE(result.values.disabled);
  std::vector<diagnostic> const expected{
    {log_level::warn, std::string("unknown variable ASYNCSHIM_X (ignored); known variables: ") + known_list},
    {log_level::warn,
     std::string("unknown variable ASYNCSHIM_COMPLETELY_UNRELATED_KNOB (ignored); known variables: ") + known_list},
  };
  EXPECT_EQ(result.diagnostics, expected);
}

TEST(UnknownVariables, ReportedOnceEachInEnvironmentOrder)
{
  auto const result = parse({"ASYNCSHIM_ZZZ=1", "ASYNCSHIM_STREEM=legacy", "ASYNCSHIM_ZZZ=2"});
  ASSERT_EQ(result.diagnostics.size(), 2u);
  EXPECT_EQ(result.diagnostics[0].text.rfind("unknown variable ASYNCSHIM_ZZZ (ignored)", 0), 0u);
  EXPECT_EQ(result.diagnostics[1].text, "unknown variable ASYNCSHIM_STREEM (ignored); did you mean ASYNCSHIM_STREAM?");
}

TEST(UnknownVariables, EmptyValueIsAsIfUnset)
{
  auto const result = parse({"ASYNCSHIM_INITAL_POOL_SIZE="});
  EXPECT_TRUE(result.diagnostics.empty());
}

TEST(Diagnostics, OrderIsPerVariableThenUnknownThenSummary)
{
  auto const result = parse(
    {"ASYNCSHIM_DISABEL=1", "ASYNCSHIM_RELEASE_THRESHOLD=lots", "ASYNCSHIM_FOO=1", "ASYNCSHIM_INITIAL_POOL_SIZE=1.5"});
  EXPECT_TRUE(result.values.disabled);
  ASSERT_EQ(result.diagnostics.size(), 5u);
  EXPECT_EQ(result.diagnostics[0].text.rfind("ASYNCSHIM_INITIAL_POOL_SIZE='1.5' is not a valid size", 0), 0u);
  EXPECT_EQ(result.diagnostics[1].text.rfind("ASYNCSHIM_RELEASE_THRESHOLD='lots' is not a valid size", 0), 0u);
  EXPECT_EQ(
    result.diagnostics[2],
    (diagnostic{log_level::warn, "unknown variable ASYNCSHIM_DISABEL (ignored); did you mean ASYNCSHIM_DISABLE?"}));
  EXPECT_EQ(result.diagnostics[3].level, log_level::warn);
  EXPECT_EQ(result.diagnostics[3].text.rfind("unknown variable ASYNCSHIM_FOO (ignored)", 0), 0u);
  EXPECT_EQ(result.diagnostics[4], (diagnostic{log_level::error, disabled_many}));
}

TEST(Diagnostics, ExplicitDisableWithAnInvalidValue)
{
  auto const result = parse({"ASYNCSHIM_DISABLE=1", "ASYNCSHIM_STREAM=x"});
  EXPECT_TRUE(result.values.disabled);
  ASSERT_EQ(result.diagnostics.size(), 3u);
  EXPECT_EQ(result.diagnostics[0].text.rfind("ASYNCSHIM_STREAM='x'", 0), 0u);
  EXPECT_EQ(result.diagnostics[1].level, log_level::info);
  EXPECT_EQ(result.diagnostics[1].text.rfind("disabled by ASYNCSHIM_DISABLE=1:", 0), 0u);
  EXPECT_EQ(result.diagnostics[2], (diagnostic{log_level::error, disabled_one}));
}

}  // namespace

namespace {

TEST(ParseEnvironment, ModeStatsFileAndShowStats)
{
  auto const result =
    parse({"ASYNCSHIM_MODE=Observe", "ASYNCSHIM_STATS_FILE=/tmp/s-%p.json", "ASYNCSHIM_SHOW_STATS=yes"});
  EXPECT_EQ(result.values.mode, cfg::shim_mode::observe);
  EXPECT_EQ(result.values.stats_file, "/tmp/s-%p.json");
  EXPECT_TRUE(result.values.show_stats);
  EXPECT_TRUE(result.values.wants_stats());
  EXPECT_FALSE(result.values.disabled);
  EXPECT_TRUE(result.diagnostics.empty());
  EXPECT_FALSE(parse({}).values.wants_stats());
  EXPECT_EQ(parse({"ASYNCSHIM_MODE=pool"}).values.mode, cfg::shim_mode::pool);
}

TEST(ParseEnvironment, BadModeDisables)
{
  auto const result = parse({"ASYNCSHIM_MODE=watch"});
  EXPECT_TRUE(result.values.disabled);
  ASSERT_EQ(result.diagnostics.size(), 2U);
  EXPECT_EQ(result.diagnostics[0].text, "ASYNCSHIM_MODE='watch' is not a valid mode: expected one of pool, observe");
  EXPECT_EQ(result.diagnostics[0].level, log_level::error);
}

TEST(ParseEnvironment, BadShowStatsOnlyReports)
{
  auto const result = parse({"ASYNCSHIM_SHOW_STATS=maybe"});
  EXPECT_FALSE(result.values.disabled);
  EXPECT_FALSE(result.values.show_stats);
  ASSERT_EQ(result.diagnostics.size(), 1U);
  EXPECT_EQ(result.diagnostics[0].text,
            "ASYNCSHIM_SHOW_STATS='maybe' is not a valid boolean: expected one of 1, true, yes, on, 0, false, no, off; "
            "no statistics table is printed");
}

}  // namespace

namespace {

TEST(ParseEnvironment, InterceptLevels)
{
  EXPECT_EQ(parse({}).values.intercept, cfg::intercept_level::all);
  EXPECT_EQ(parse({"ASYNCSHIM_INTERCEPT=runtime"}).values.intercept, cfg::intercept_level::runtime);
  EXPECT_EQ(parse({"ASYNCSHIM_INTERCEPT=Driver"}).values.intercept, cfg::intercept_level::driver);
  EXPECT_FALSE(parse({"ASYNCSHIM_INTERCEPT=driver"}).values.intercepts_runtime());
  EXPECT_TRUE(parse({"ASYNCSHIM_INTERCEPT=driver"}).values.intercepts_driver());
  EXPECT_FALSE(parse({"ASYNCSHIM_INTERCEPT=runtime"}).values.intercepts_driver());
  auto const bad = parse({"ASYNCSHIM_INTERCEPT=both"});
  EXPECT_TRUE(bad.values.disabled);
  ASSERT_FALSE(bad.diagnostics.empty());
  EXPECT_EQ(bad.diagnostics[0].text,
            "ASYNCSHIM_INTERCEPT='both' is not a valid interception level: expected one of runtime, driver, all");
}

TEST(ParseEnvironment, OrderingModes)
{
  EXPECT_EQ(parse({}).values.ordering, cfg::ordering_mode::device);
  EXPECT_EQ(parse({"ASYNCSHIM_ORDERING=device"}).values.ordering, cfg::ordering_mode::device);
  EXPECT_EQ(parse({"ASYNCSHIM_ORDERING=stream"}).values.ordering, cfg::ordering_mode::stream);
  EXPECT_EQ(parse({"ASYNCSHIM_ORDERING=SYNC"}).values.ordering, cfg::ordering_mode::sync);
  EXPECT_FALSE(parse({"ASYNCSHIM_ORDERING=sync"}).values.disabled);
  auto const bad = parse({"ASYNCSHIM_ORDERING=fast"});
  EXPECT_TRUE(bad.values.disabled);
  EXPECT_EQ(bad.values.ordering, cfg::ordering_mode::device);
  ASSERT_EQ(bad.diagnostics.size(), 2u);
  EXPECT_EQ(bad.diagnostics[0].text,
            "ASYNCSHIM_ORDERING='fast' is not a valid ordering: expected one of device, stream, sync");
  EXPECT_EQ(bad.diagnostics[1].text, disabled_one);
}

}  // namespace

TEST(ParseEnvironment, LeakStackDepthIsAWholeNumberUpToSixtyFour)
{
  EXPECT_EQ(parse({"ASYNCSHIM_LEAK_STACK_DEPTH=64"}).values.leak_stack_depth, 64u);
  EXPECT_EQ(parse({"ASYNCSHIM_LEAK_STACK_DEPTH= 5 "}).values.leak_stack_depth, 5u);
  for (char const* bad :
       {"ASYNCSHIM_LEAK_STACK_DEPTH=65", "ASYNCSHIM_LEAK_STACK_DEPTH=-1", "ASYNCSHIM_LEAK_STACK_DEPTH=8k"}) {
    auto const result = parse({bad});
    EXPECT_EQ(result.values.leak_stack_depth, 0u) << bad;
    EXPECT_FALSE(result.values.disabled) << bad;  // only the report is affected
    ASSERT_FALSE(result.diagnostics.empty()) << bad;
    EXPECT_NE(result.diagnostics[0].text.find("is not a valid number: expected a whole number from 0 to 64; the leak "
                                              "report shows no call stacks"),
              std::string::npos)
      << result.diagnostics[0].text;
  }
}

// The metrics file's interval: a duration; a bad one, or off (the file would
// never be written again), is reported and the default is used.
TEST(ParseEnvironment, MetricsIntervalBadValuesKeepTheDefault)
{
  auto const good = parse({"ASYNCSHIM_METRICS_FILE=/tmp/m-%p.prom", "ASYNCSHIM_METRICS_INTERVAL=250ms"});
  EXPECT_TRUE(good.diagnostics.empty());
  EXPECT_EQ(good.values.metrics_file, "/tmp/m-%p.prom");
  EXPECT_EQ(good.values.metrics_interval_ms, 250U);
  EXPECT_TRUE(good.values.wants_stats());
  for (char const* bad : {"off", "0", "10", "fast"}) {
    auto const result = parse({std::string("ASYNCSHIM_METRICS_INTERVAL=") + bad});
    EXPECT_FALSE(result.values.disabled) << bad;
    EXPECT_EQ(result.values.metrics_interval_ms, cfg::default_metrics_interval_ms) << bad;
    ASSERT_EQ(result.diagnostics.size(), 1U) << bad;
    EXPECT_EQ(result.diagnostics[0].text, std::string("ASYNCSHIM_METRICS_INTERVAL='") + bad +
                                            "' is not a valid duration: expected a number with the unit ms or s from "
                                            "1ms to 24h (e.g. 500ms, 10s, 1.5s); using 10s")
      << bad;
  }
}
