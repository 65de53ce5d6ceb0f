// asyncshim-settings: checks the ASYNCSHIM_* variables of its environment with
// exactly the shim's rules and messages, for the launcher (scripts/asyncshim).
//   asyncshim-settings            print the diagnostics; exit 1 if any is an error
//   asyncshim-settings --describe also print the effective settings
//   asyncshim-settings --version  print the version
#include <asyncshim/config/settings.hpp>

#include <unistd.h>  // environ

#include <cstdio>
#include <cstring>

int main(int argc, char** argv)
{
  if (argc > 1 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("%s\n", ASYNCSHIM_VERSION);
    return 0;
  }
  bool const describe = argc > 1 && std::strcmp(argv[1], "--describe") == 0;
  auto const result = asyncshim::config::parse_environment(environ);
  bool errors = false;
  for (auto const& d : result.diagnostics) {
    errors = errors || d.level == asyncshim::config::log_level::error;
    std::printf("%s: %s\n", asyncshim::config::to_string(d.level), d.text.c_str());
  }
  if (describe) { std::printf("settings: %s\n", asyncshim::config::describe(result.values).c_str()); }
  return errors ? 1 : 0;
}
