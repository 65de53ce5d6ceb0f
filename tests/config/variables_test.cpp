// The table of variables (variables()): names, fields, defaults, what an
// invalid value does, and asyncshim-settings --list, which prints it.

#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "asyncshim/config/settings.hpp"
#include "parse_env.hpp"

namespace {

namespace cfg = asyncshim::config;

using asyncshim::config::testing::parse;

// The members of settings that differ between the two, by name; every member
// a variable can set is compared.
std::set<std::string> changed_members(cfg::settings const& a, cfg::settings const& b)
{
  std::set<std::string> changed;
  auto compare = [&](char const* name, auto const& x, auto const& y) {
    if (!(x == y)) { changed.insert(name); }
  };
  compare("disabled", a.disabled, b.disabled);
  compare("initial_pool_size", a.initial_pool_size, b.initial_pool_size);
  compare("release_threshold", a.release_threshold, b.release_threshold);
  compare("memory_limit", a.memory_limit, b.memory_limit);
  compare("idle_release_ms", a.idle_release_ms, b.idle_release_ms);
  compare("reuse_cache", a.reuse_cache, b.reuse_cache);
  compare("host_pool", a.host_pool, b.host_pool);
  compare("free_backlog", a.free_backlog, b.free_backlog);
  compare("in_order_frees", a.in_order_frees, b.in_order_frees);
  compare("export_handle_type", a.export_handle_type, b.export_handle_type);
  compare("stream", a.stream, b.stream);
  compare("mode", a.mode, b.mode);
  compare("intercept", a.intercept, b.intercept);
  compare("ordering", a.ordering, b.ordering);
  compare("level", a.level, b.level);
  compare("log_file", a.log_file, b.log_file);
  compare("stats_file", a.stats_file, b.stats_file);
  compare("show_stats", a.show_stats, b.show_stats);
  compare("leak_report", a.leak_report, b.leak_report);
  compare("leak_report_file", a.leak_report_file, b.leak_report_file);
  compare("event_log", a.event_log, b.event_log);
  compare("metrics_file", a.metrics_file, b.metrics_file);
  compare("metrics_interval_ms", a.metrics_interval_ms, b.metrics_interval_ms);
  compare("leak_stack_depth", a.leak_stack_depth, b.leak_stack_depth);
  return changed;
}

std::set<std::string> const all_members{"disabled",
                                        "initial_pool_size",
                                        "release_threshold",
                                        "memory_limit",
                                        "idle_release_ms",
                                        "reuse_cache",
                                        "host_pool",
                                        "free_backlog",
                                        "in_order_frees",
                                        "export_handle_type",
                                        "stream",
                                        "mode",
                                        "intercept",
                                        "ordering",
                                        "level",
                                        "log_file",
                                        "stats_file",
                                        "show_stats",
                                        "leak_report",
                                        "leak_report_file",
                                        "event_log",
                                        "metrics_file",
                                        "metrics_interval_ms",
                                        "leak_stack_depth"};

// A valid value other than the default, for each variable.
std::map<std::string, std::string> const example_values{
  {"ASYNCSHIM_INITIAL_POOL_SIZE", "1GiB"},
  {"ASYNCSHIM_RELEASE_THRESHOLD", "25%"},
  {"ASYNCSHIM_MEMORY_LIMIT", "0:20GiB,10%"},
  {"ASYNCSHIM_METRICS_FILE", "/tmp/asyncshim-%p.prom"},
  {"ASYNCSHIM_METRICS_INTERVAL", "2s"},
  {"ASYNCSHIM_IDLE_RELEASE", "500ms"},
  {"ASYNCSHIM_REUSE_CACHE", "64MiB"},
  {"ASYNCSHIM_HOST_POOL", "on"},
  {"ASYNCSHIM_FREE_BACKLOG", "256MiB"},
  {"ASYNCSHIM_IN_ORDER_FREES", "off"},
  {"ASYNCSHIM_EXPORT_HANDLE_TYPE", "fabric"},
  {"ASYNCSHIM_STREAM", "per-thread"},
  {"ASYNCSHIM_MODE", "observe"},
  {"ASYNCSHIM_INTERCEPT", "driver"},
  {"ASYNCSHIM_ORDERING", "sync"},
  {"ASYNCSHIM_LOG_LEVEL", "debug"},
  {"ASYNCSHIM_LOG_FILE", "/tmp/asyncshim.log"},
  {"ASYNCSHIM_STATS_FILE", "/tmp/s.json"},
  {"ASYNCSHIM_SHOW_STATS", "yes"},
  {"ASYNCSHIM_LEAK_REPORT", "1"},
  {"ASYNCSHIM_LEAK_REPORT_FILE", "/tmp/leaks-%p.json"},
  {"ASYNCSHIM_EVENT_LOG", "/tmp/events-%p.csv"},
  {"ASYNCSHIM_LEAK_STACK_DEPTH", "8"},
  {"ASYNCSHIM_DISABLE", "1"},
};

bool one_line(std::string_view text) { return text.find_first_of("\t\n\r") == std::string_view::npos; }

TEST(Variables, NamesStartWithThePrefixAndAreUnique)
{
  std::set<std::string_view> names;
  for (cfg::variable_info const& v : cfg::variables()) {
    EXPECT_TRUE(v.name.starts_with("ASYNCSHIM_")) << v.name;
    EXPECT_GT(v.name.size(), std::string_view("ASYNCSHIM_").size()) << v.name;
    EXPECT_EQ(v.name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_"), std::string_view::npos) << v.name;
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " twice";
  }
}

TEST(Variables, SameNamesAndOrderAsKnownVariables)
{
  std::vector<std::string> names;
  for (cfg::variable_info const& v : cfg::variables()) {
    names.emplace_back(v.name);
  }
  EXPECT_EQ(names, cfg::known_variables());
}

TEST(Variables, EveryTextIsOneNonEmptyLine)
{
  for (cfg::variable_info const& v : cfg::variables()) {
    for (std::string_view const text : {v.field, v.default_text, v.accepted, v.summary}) {
      EXPECT_FALSE(text.empty()) << v.name;
      EXPECT_TRUE(one_line(text)) << v.name << ": " << text;
    }
  }
}

// Each variable sets the field its entry names and nothing else, and each
// member of settings is set by exactly one variable.
TEST(Variables, EachFieldIsSetByExactlyOneVariable)
{
  std::set<std::string> fields;
  for (cfg::variable_info const& v : cfg::variables()) {
    std::string const name(v.name);
    ASSERT_TRUE(example_values.contains(name)) << "no example value for " << name;
    auto const result = parse({name + "=" + example_values.at(name)});
    EXPECT_EQ(changed_members(cfg::settings{}, result.values), std::set<std::string>{std::string(v.field)}) << name;
    EXPECT_TRUE(fields.insert(std::string(v.field)).second) << v.field << " is set by two variables";
  }
  EXPECT_EQ(fields, all_members);
}

// A default written as a value is accepted and means the default.
TEST(Variables, DefaultsWrittenAsValuesAreAccepted)
{
  for (cfg::variable_info const& v : cfg::variables()) {
    if (v.default_text.starts_with("(")) {
      EXPECT_TRUE(v.default_text.ends_with(")")) << v.name;
      continue;
    }
    std::string const name(v.name);
    auto const result = parse({name + "=" + std::string(v.default_text)});
    // A retired variable warns, whatever its value.
    EXPECT_EQ(result.diagnostics.size(), v.retired.empty() ? 0u : 1u) << name << "=" << v.default_text;
    auto const changed = changed_members(cfg::settings{}, result.values);
    if (v.field == "initial_pool_size") {
      // Written, 0 is a size of 0 bytes: the same pool as when unset.
      ASSERT_TRUE(result.values.initial_pool_size.has_value());
      EXPECT_EQ(result.values.initial_pool_size->resolve(std::uint64_t{1} << 40, std::uint64_t{1} << 39), 0u);
    } else if (v.field == "reuse_cache") {
      // Written, the default size: the same limit as when unset.
      ASSERT_TRUE(result.values.reuse_cache.has_value());
      EXPECT_EQ(result.values.reuse_cache->resolve(std::uint64_t{1} << 40, std::uint64_t{1} << 39),
                cfg::default_reuse_cache_bytes);
    } else {
      EXPECT_TRUE(changed.empty()) << name << "=" << v.default_text;
    }
  }
}

// A retired variable says what replaced it, naming a variable that is not retired.
TEST(Variables, RetiredVariablesNameWhatReplacedThem)
{
  std::size_t retired = 0;
  for (cfg::variable_info const& v : cfg::variables()) {
    if (v.retired.empty()) { continue; }
    ++retired;
    EXPECT_TRUE(v.summary.starts_with("retired: ")) << v.name;
    EXPECT_NE(v.retired.find("ASYNCSHIM_ORDERING="), std::string_view::npos) << v.name;
  }
  EXPECT_EQ(retired, 2u);  // ASYNCSHIM_FREE_BACKLOG and ASYNCSHIM_IN_ORDER_FREES
}

TEST(Variables, IdleReleaseDefaultIsTheDefaultDuration)
{
  for (cfg::variable_info const& v : cfg::variables()) {
    if (v.field == "idle_release_ms") { EXPECT_EQ(v.default_text, cfg::duration_text(cfg::default_idle_release_ms)); }
  }
}

// What the table says an invalid value does is what parsing does.
TEST(Variables, InvalidValuesDoWhatTheTableSays)
{
  for (cfg::variable_info const& v : cfg::variables()) {
    std::string const name(v.name);
    auto const result = parse({name + "=bogus"});
    if (v.invalid == cfg::on_invalid::none) {
      EXPECT_TRUE(result.diagnostics.empty()) << name;
      continue;
    }
    ASSERT_FALSE(result.diagnostics.empty()) << name;
    EXPECT_EQ(result.diagnostics[0].level, cfg::log_level::error) << name;
    EXPECT_TRUE(result.diagnostics[0].text.starts_with(name + "='bogus' is not a valid "))
      << result.diagnostics[0].text;
    EXPECT_NE(result.diagnostics[0].text.find(v.accepted), std::string::npos) << result.diagnostics[0].text;
    bool const disables = v.invalid == cfg::on_invalid::disables;
    EXPECT_EQ(result.values.disabled, disables) << name;
    EXPECT_EQ(result.diagnostics.size(), disables ? 2u : 1u) << name;
    auto changed = changed_members(cfg::settings{}, result.values);
    changed.erase("disabled");
    EXPECT_TRUE(changed.empty()) << name << ": the invalid value changed a setting";
  }
}

TEST(Variables, InvalidEffectNames)
{
  EXPECT_STREQ(cfg::to_string(cfg::on_invalid::disables), "disables");
  EXPECT_STREQ(cfg::to_string(cfg::on_invalid::uses_default), "uses-default");
  EXPECT_STREQ(cfg::to_string(cfg::on_invalid::none), "-");
}

std::vector<std::string> output_lines(std::string const& command)
{
  std::vector<std::string> lines;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return lines;
  }
  std::string text;
  char buffer[4096];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) {
    text.append(buffer, n);
  }
  EXPECT_EQ(::pclose(pipe), 0) << command;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t const end = text.find('\n', start);
    EXPECT_NE(end, std::string::npos) << "the last line has no line break";
    if (end == std::string::npos) { break; }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

TEST(SettingsTool, ListPrintsEveryVariableTabSeparated)
{
  std::vector<std::string> expected;
  for (cfg::variable_info const& v : cfg::variables()) {
    expected.push_back(std::string(v.name) + "\t" + std::string(v.default_text) + "\t" + std::string(v.accepted) +
                       "\t" + cfg::to_string(v.invalid) + "\t" + std::string(v.summary));
  }
  EXPECT_EQ(output_lines(std::string(ASYNCSHIM_SETTINGS_TOOL) + " --list"), expected);
}

TEST(SettingsTool, ListIgnoresTheEnvironment)
{
  auto const plain = output_lines(std::string(ASYNCSHIM_SETTINGS_TOOL) + " --list");
  auto const with_bad_values =
    output_lines("env ASYNCSHIM_STREAM=bogus ASYNCSHIM_STREEM=1 " + std::string(ASYNCSHIM_SETTINGS_TOOL) + " --list");
  EXPECT_EQ(plain, with_bad_values);
}

TEST(SettingsTool, HelpDocumentsTheListFormat)
{
  auto const lines = output_lines(std::string(ASYNCSHIM_SETTINGS_TOOL) + " --help");
  std::string text;
  for (auto const& line : lines) {
    text += line + "\n";
  }
  for (char const* field : {"NAME", "DEFAULT", "ACCEPTED", "INVALID", "SUMMARY", "--list", "--describe"}) {
    EXPECT_NE(text.find(field), std::string::npos) << field;
  }
}

}  // namespace
