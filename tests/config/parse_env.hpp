// parse_environment() of a list of "NAME=value" strings, for the config tests.
#pragma once

#include <string>
#include <vector>

#include "asyncshim/config/settings.hpp"

namespace asyncshim::config::testing {

inline parse_result parse(std::vector<std::string> const& env)
{
  std::vector<char const*> pointers;
  for (auto const& entry : env) {
    pointers.push_back(entry.c_str());
  }
  pointers.push_back(nullptr);
  return parse_environment(pointers.data());
}

}  // namespace asyncshim::config::testing
