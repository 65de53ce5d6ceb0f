// libFuzzer target for asyncshim::config::parse_environment (the shim reads the
// environment of every process it is preloaded into: no input may crash it,
// hang it, or trip AddressSanitizer/UndefinedBehaviorSanitizer).
//
// Input format (the starting corpus in corpus/ is written in it):
//   - The input is a list of environ entries separated by '\0'; an input with
//     no '\0' at all is split on '\n' instead, so seeds can be plain text
//     files with one NAME=VALUE per line, and the fuzzer can still put '\n'
//     (or any other byte) inside names and values.
//   - An entry whose name is a single byte (`c=VALUE`, or just `c`) stands for
//     a known variable: known_variables()[(c - '0') mod N], so "0=1GiB" is the
//     first known variable set to 1GiB. Two mutated bytes are enough for the
//     fuzzer to reach any value parser; a one-byte name is never an
//     ASYNCSHIM_* variable (the parser ignores it), so nothing is lost.
//   - Every other entry is passed as it is (full names, unknown ASYNCSHIM_*
//     names in any case, entries without '=', other variables).
//
// Besides not crashing, the target checks properties that hold for every
// input (a violation aborts, which libFuzzer reports as a crash):
//   - every diagnostic, and describe()'s text, is one line (no '\n');
//   - a size that parses prints (size_spec::to_string) as text that parses
//     back to the same size, and a percentage resolves to at most the total.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "asyncshim/config/settings.hpp"

namespace {

namespace cfg = asyncshim::config;

[[noreturn]] void fail(char const* what, std::string_view detail)
{
  std::fprintf(stderr, "environment_fuzzer: property violated: %s: '%.*s'\n", what, static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

void check_one_line(char const* what, std::string const& text)
{
  if (text.find('\n') != std::string::npos) { fail(what, text); }
}

// Totals a device could report: none, tiny, an H200, the largest possible.
constexpr std::uint64_t totals[] = {0, 1, 1000, 150754820096ull, std::numeric_limits<std::uint64_t>::max()};

void check_size(std::optional<cfg::size_spec> const& size)
{
  if (!size) { return; }
  std::string const text = size->to_string();
  auto const again = cfg::parse_size(text);
  if (!again || !(*again == *size)) { fail("size_spec::to_string does not parse back to the same size", text); }
  for (std::uint64_t const total : totals) {
    std::uint64_t const resolved = size->resolve(total, total);  // all of it free
    if (size->unit == cfg::size_spec::kind::percent_of_total && resolved > total) {
      fail("a percentage resolved to more than the total", text);
    }
    if (size->unit == cfg::size_spec::kind::bytes && resolved != size->bytes) {
      fail("a byte size resolved to something else", text);
    }
    if (size->unit == cfg::size_spec::kind::half_of_free && resolved != total / 2) {
      fail("half-free resolved to something other than half of the free memory", text);
    }
  }
}

// The single-value parsers on a value on its own (what the launcher does).
void parse_value(std::string_view value)
{
  check_size(cfg::parse_size(value));
  if (auto const v = cfg::parse_handle_type(value)) { (void)cfg::to_string(*v); }
  if (auto const v = cfg::parse_stream(value)) { (void)cfg::to_string(*v); }
  if (auto const v = cfg::parse_mode(value)) { (void)cfg::to_string(*v); }
  if (auto const v = cfg::parse_intercept(value)) { (void)cfg::to_string(*v); }
  if (auto const v = cfg::parse_ordering(value)) { (void)cfg::to_string(*v); }
  if (auto const v = cfg::parse_log_level(value)) { (void)cfg::to_string(*v); }
  (void)cfg::parse_bool(value);
}

std::vector<std::string> split_entries(std::string_view input)
{
  char const separator = input.find('\0') != std::string_view::npos ? '\0' : '\n';
  std::vector<std::string> entries;
  std::size_t start = 0;
  while (start <= input.size()) {
    std::size_t end = input.find(separator, start);
    if (end == std::string_view::npos) { end = input.size(); }
    entries.emplace_back(input.substr(start, end - start));
    start = end + 1;
  }
  return entries;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size)
{
  auto const& known = cfg::known_variables();
  if (known.empty()) { std::abort(); }

  std::vector<std::string> entries = split_entries(std::string_view(reinterpret_cast<char const*>(data), size));
  for (std::string& entry : entries) {
    if (!entry.empty() && (entry.size() == 1 || entry[1] == '=')) {
      auto const index = static_cast<unsigned char>(entry[0] - '0') % known.size();
      entry.replace(0, 1, known[index]);
    }
    if (auto const eq = entry.find('='); eq != std::string::npos) {
      parse_value(std::string_view(entry).substr(eq + 1));
    }
  }

  std::vector<char const*> envp;
  envp.reserve(entries.size() + 1);
  for (std::string const& entry : entries) {
    envp.push_back(entry.c_str());
  }
  envp.push_back(nullptr);

  cfg::parse_result const result = cfg::parse_environment(envp.data());

  for (cfg::diagnostic const& d : result.diagnostics) {
    (void)cfg::to_string(d.level);
    check_one_line("a diagnostic has more than one line", d.text);
  }
  cfg::settings const& values = result.values;
  check_one_line("describe() has more than one line", cfg::describe(values));
  check_size(values.initial_pool_size);
  check_size(values.release_threshold);
  (void)cfg::to_string(values.export_handle_type);
  (void)cfg::to_string(values.stream);
  (void)cfg::to_string(values.mode);
  (void)cfg::to_string(values.intercept);
  (void)cfg::to_string(values.ordering);
  (void)cfg::to_string(values.level);
  (void)values.wants_stats();
  (void)values.intercepts_runtime();
  (void)values.intercepts_driver();

  // An empty environment and a null one are valid too (once is enough).
  static bool const edge_cases_checked = [] {
    char const* const empty[] = {nullptr};
    if (!cfg::parse_environment(empty).diagnostics.empty()) { fail("the empty environment gives a diagnostic", ""); }
    if (!cfg::parse_environment(nullptr).diagnostics.empty()) { fail("a null environment gives a diagnostic", ""); }
    return true;
  }();
  (void)edge_cases_checked;
  return 0;
}
