// describe: every effective setting on one line, in the order of the table of
// variables (variables.hpp), each as "key=value".

#include <string>

#include "asyncshim/config/settings.hpp"
#include "variables.hpp"

namespace asyncshim::config {

std::string describe(settings const& values)
{
  std::string line;
  for (detail::variable const& entry : detail::variable_table()) {
    if (!line.empty()) { line += ' '; }
    line += entry.describe_key;
    line += '=';
    line += entry.show(values);
  }
  return line;
}

}  // namespace asyncshim::config
