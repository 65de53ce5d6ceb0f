// describe(): one line with every effective setting.

#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "asyncshim/config/settings.hpp"

namespace {

namespace cfg = asyncshim::config;

TEST(Describe, Defaults)
{
  EXPECT_EQ(
    cfg::describe(cfg::settings{}),
    "initial_pool_size=0 (default) release_threshold=total device memory (default) memory_limit=off (default) "
    "idle_release=1s (default) "
    "reuse_cache=256MiB (default) host_pool=no free_backlog=off (default) in_order_frees=yes export_handle_type=auto "
    "stream=legacy mode=pool "
    "intercept=all ordering=device "
    "log_level=warn "
    "log_file=stderr stats_file=none show_stats=no leak_report=no leak_report_file=none leak_stack_depth=0 "
    "event_log=none metrics_file=none metrics_interval=10s (default) "
    "disabled=no");
}

TEST(Describe, ExplicitValues)
{
  cfg::settings s;
  s.initial_pool_size = cfg::size_spec{cfg::size_spec::kind::bytes, std::uint64_t{1536} << 20, 0.0};
  s.release_threshold = cfg::size_spec{cfg::size_spec::kind::percent_of_total, 0, 12.5};
  s.export_handle_type = cfg::handle_type::posix_file_descriptor;
  s.stream = cfg::stream_choice::per_thread;
  s.level = cfg::log_level::debug;
  s.log_file = "/var/log/asyncshim.log";
  s.mode = cfg::shim_mode::observe;
  s.stats_file = "/tmp/stats-%p.json";
  s.show_stats = true;
  s.disabled = true;
  s.idle_release_ms = 250;
  s.reuse_cache = cfg::size_spec{cfg::size_spec::kind::bytes, 0, 0.0};
  s.free_backlog = cfg::size_spec{cfg::size_spec::kind::bytes, std::uint64_t{2} << 30, 0.0};
  s.in_order_frees = false;
  s.host_pool = true;
  EXPECT_EQ(
    cfg::describe(s),
    "initial_pool_size=1536MiB release_threshold=12.5% memory_limit=off (default) idle_release=250ms reuse_cache=0B "
    "host_pool=yes free_backlog=2GiB "
    "in_order_frees=no export_handle_type=posix_file_descriptor "
    "stream=per-thread mode=observe intercept=all ordering=device log_level=debug log_file=/var/log/asyncshim.log "
    "stats_file=/tmp/stats-%p.json "
    "show_stats=yes leak_report=no leak_report_file=none leak_stack_depth=0 event_log=none metrics_file=none "
    "metrics_interval=10s (default) disabled=yes");
}

TEST(Describe, FromTheEnvironment)
{
  char const* env[] = {"ASYNCSHIM_RELEASE_THRESHOLD=2GiB", "ASYNCSHIM_INITIAL_POOL_SIZE=half-free",
                       "ASYNCSHIM_EXPORT_HANDLE_TYPE=fabric", "ASYNCSHIM_IDLE_RELEASE=off", nullptr};
  auto const result = cfg::parse_environment(env);
  std::string const line = cfg::describe(result.values);
  EXPECT_EQ(line, "initial_pool_size=half-free release_threshold=2GiB memory_limit=off (default) idle_release=off "
                  "reuse_cache=256MiB (default) "
                  "host_pool=no free_backlog=off (default) in_order_frees=yes export_handle_type=fabric "
                  "stream=legacy mode=pool intercept=all "
                  "ordering=device log_level=warn log_file=stderr stats_file=none show_stats=no leak_report=no "
                  "leak_report_file=none leak_stack_depth=0 event_log=none metrics_file=none metrics_interval=10s "
                  "(default) disabled=no");
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(Describe, DefaultReleaseThresholdWithExplicitInitialSize)
{
  cfg::settings s;
  s.initial_pool_size = cfg::size_spec{cfg::size_spec::kind::percent_of_total, 0, 25.0};
  std::string const line = cfg::describe(s);
  EXPECT_NE(line.find("initial_pool_size=25% "), std::string::npos) << line;
  EXPECT_NE(line.find("release_threshold=total device memory (default) "), std::string::npos) << line;
}

}  // namespace
