// asyncshim-settings: checks the ASYNCSHIM_* variables of its environment with
// exactly the shim's rules and messages, and lists the variables, for the
// launcher (scripts/asyncshim). `asyncshim-settings --help` says how.
#include <asyncshim/config/settings.hpp>

#include <unistd.h>  // environ

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace cfg = asyncshim::config;

constexpr char const* help_text = "usage: asyncshim-settings [--describe | --list | --closest WORD CANDIDATE... |\n"
                                  "                          --version | --help]\n"
                                  "\n"
                                  "Checks the ASYNCSHIM_* variables of the environment with the shim's own rules\n"
                                  "and prints the shim's messages, one a line as LEVEL: TEXT. The exit status is 1\n"
                                  "when any of them is an error (the shim would then be disabled, or a value is\n"
                                  "not used), else 0.\n"
                                  "\n"
                                  "  --describe  also print the effective settings as one line, settings: ...\n"
                                  "  --list      print the variables this version understands and exit, one a\n"
                                  "              line, five fields separated by a tab (no field holds a tab or a\n"
                                  "              line break; fields may be added at the end of a line):\n"
                                  "                NAME      the variable, ASYNCSHIM_...\n"
                                  "                DEFAULT   what is used when it is unset or empty: a value, or\n"
                                  "                          words in parentheses where no value says it\n"
                                  "                ACCEPTED  the values it accepts, in words\n"
                                  "                INVALID   what an invalid value does: disables (the shim is\n"
                                  "                          disabled for the process), uses-default (it is\n"
                                  "                          reported and the default is used), - (every value\n"
                                  "                          is accepted)\n"
                                  "                SUMMARY   what it sets, in words\n"
                                  "  --closest   print the CANDIDATE that WORD most likely stands for, by the\n"
                                  "              rules of the shim's \"did you mean\" (words separated by _,\n"
                                  "              then spelling); print nothing and exit 1 when none is close\n"
                                  "  --version   print the version and exit\n"
                                  "  --help      print this help and exit\n";

void print_list()
{
  for (cfg::variable_info const& v : cfg::variables()) {
    std::printf("%.*s\t%.*s\t%.*s\t%s\t%.*s\n", static_cast<int>(v.name.size()), v.name.data(),
                static_cast<int>(v.default_text.size()), v.default_text.data(), static_cast<int>(v.accepted.size()),
                v.accepted.data(), cfg::to_string(v.invalid), static_cast<int>(v.summary.size()), v.summary.data());
  }
}

}  // namespace

int main(int argc, char** argv)
{
  char const* const option = argc > 1 ? argv[1] : "";
  if (std::strcmp(option, "--version") == 0) {
    std::printf("%s\n", ASYNCSHIM_VERSION);
    return 0;
  }
  if (std::strcmp(option, "--help") == 0 || std::strcmp(option, "-h") == 0) {
    std::fputs(help_text, stdout);
    return 0;
  }
  if (std::strcmp(option, "--list") == 0) {
    print_list();
    return 0;
  }
  if (std::strcmp(option, "--closest") == 0) {
    if (argc < 3) {
      std::fputs(help_text, stderr);
      return 2;
    }
    std::vector<std::string> const candidates(argv + 3, argv + argc);
    auto const found = cfg::closest_of(argv[2], candidates);
    if (!found) { return 1; }
    std::printf("%s\n", found->c_str());
    return 0;
  }
  bool const describe = std::strcmp(option, "--describe") == 0;
  auto const result = cfg::parse_environment(environ);
  bool errors = false;
  for (auto const& d : result.diagnostics) {
    errors = errors || d.level == cfg::log_level::error;
    std::printf("%s: %s\n", cfg::to_string(d.level), d.text.c_str());
  }
  if (describe) { std::printf("settings: %s\n", cfg::describe(result.values).c_str()); }
  return errors ? 1 : 0;
}
