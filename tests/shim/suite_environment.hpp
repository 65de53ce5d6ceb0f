// suite_environment.hpp: the environment each test suite runs in, and the
// check that the process is in it.
//
// A suite's environment (besides LD_PRELOAD) is stated once, in
// tests/shim/CMakeLists.txt (shim_case, sharing_case): CMake sets it for the
// suite's ctest run and writes it into the test program as a table
// (suite_environments.hpp, generated; one entry per ctest run, so a suite run
// in two environments has two). Each test starts by checking that the process
// environment is exactly one of its suite's entries, so that a run in another
// environment (a variable left in the caller's shell, a setting added to the
// ctest run elsewhere, the program run by hand) fails instead of testing
// something else.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>  // environ

namespace shim_test {

struct suite_environment {
  std::string_view suite;
  std::vector<std::string_view> settings;  // NAME=value, as CMake set them
};

// Whether NAME=value is about the environment a suite states: every ASYNCSHIM_*
// and CUDA_DOUBLE_* variable, and any other variable a table entry names.
inline bool relevant_variable(std::string_view setting, std::vector<std::string_view> const& named)
{
  std::string_view const name = setting.substr(0, setting.find('='));
  if (name.starts_with("ASYNCSHIM_") || name.starts_with("CUDA_DOUBLE_")) { return true; }
  return std::find(named.begin(), named.end(), name) != named.end();
}

inline std::string describe(std::vector<std::string> const& settings)
{
  if (settings.empty()) { return "(none)"; }
  std::string text;
  for (auto const& setting : settings) {
    text += (text.empty() ? "" : " ") + setting;
  }
  return text;
}

// Empty when the process environment is exactly one of the table's entries
// for `suite`; else what is wrong.
inline std::string environment_mismatch(std::string_view suite, std::vector<suite_environment> const& table)
{
  std::vector<std::vector<std::string>> expected;
  std::vector<std::string_view> named;
  for (auto const& entry : table) {
    if (entry.suite != suite) { continue; }
    std::vector<std::string> settings(entry.settings.begin(), entry.settings.end());
    std::sort(settings.begin(), settings.end());
    expected.push_back(settings);
    for (std::string_view setting : entry.settings) {
      named.push_back(setting.substr(0, setting.find('=')));
    }
  }
  if (expected.empty()) {
    return "suite " + std::string{suite} + " states no environment in tests/shim/CMakeLists.txt";
  }
  std::vector<std::string> actual;
  for (char** e = environ; *e != nullptr; ++e) {
    if (relevant_variable(*e, named)) { actual.emplace_back(*e); }
  }
  std::sort(actual.begin(), actual.end());
  if (std::find(expected.begin(), expected.end(), actual) != expected.end()) { return {}; }
  std::string text = "suite " + std::string{suite} + " runs in " + describe(actual) + ", but expects";
  for (std::size_t i = 0; i < expected.size(); ++i) {
    text += (i == 0 ? " " : " or ") + describe(expected[i]);
  }
  return text + " (tests/shim/CMakeLists.txt; run it through ctest)";
}

}  // namespace shim_test
