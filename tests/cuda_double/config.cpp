// config.cpp: the CUDA TEST DOUBLES' environment controls (see cuda_double.hpp),
// read once at first use. Part of the driver double, libcuda.so.1.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string_view>

#include "model.hpp"

namespace cuda_double {
namespace {

char const* env(char const* name)
{
  char const* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

void complain(char const* name, char const* value, char const* what)
{
  std::fprintf(stderr, "cuda_double: ignoring %s=\"%s\": %s\n", name, value, what);
}

// Unsigned decimal or 0x-hex, the whole string, within [0, max].
bool parse_number(char const* name, char const* text, std::uint64_t max, std::uint64_t& out)
{
  if (text[0] == '-' || text[0] == '+') {
    complain(name, text, "expected an unsigned number");
    return false;
  }
  errno = 0;
  char* end = nullptr;
  unsigned long long value = std::strtoull(text, &end, 0);
  if (errno != 0 || end == text || *end != '\0') {
    complain(name, text, "expected an unsigned number");
    return false;
  }
  if (value > max) {
    complain(name, text, "too large");
    return false;
  }
  out = value;
  return true;
}

bool parse_flag(char const* name, char const* text)
{
  for (char const* yes : {"1", "true", "yes", "on", "TRUE", "YES", "ON", "True", "Yes", "On"}) {
    if (std::strcmp(text, yes) == 0) { return true; }
  }
  for (char const* no : {"0", "false", "no", "off", "FALSE", "NO", "OFF", "False", "No", "Off"}) {
    if (std::strcmp(text, no) == 0) { return false; }
  }
  complain(name, text, "expected 1/true/yes/on or 0/false/no/off");
  return false;
}

configuration read_config()
{
  configuration c;
  std::uint64_t n = 0;
  if (char const* v = env("CUDA_DOUBLE_DEVICES"); v && parse_number("CUDA_DOUBLE_DEVICES", v, max_devices, n)) {
    c.devices = static_cast<int>(n);
  }
  if (char const* v = env("CUDA_DOUBLE_NO_DRIVER")) { c.no_driver = parse_flag("CUDA_DOUBLE_NO_DRIVER", v); }
  if (char const* v = env("CUDA_DOUBLE_MEMORY");
      v && parse_number("CUDA_DOUBLE_MEMORY", v, std::numeric_limits<std::uint64_t>::max(), n)) {
    c.memory = n;
  }
  if (char const* v = env("CUDA_DOUBLE_NO_POOLS")) { c.no_pools = parse_flag("CUDA_DOUBLE_NO_POOLS", v); }
  if (char const* v = env("CUDA_DOUBLE_NO_POOL_MAX_SIZE")) {
    c.no_pool_max_size = parse_flag("CUDA_DOUBLE_NO_POOL_MAX_SIZE", v);
  }
  if (char const* v = env("CUDA_DOUBLE_POOL_HANDLE_TYPES");
      v && parse_number("CUDA_DOUBLE_POOL_HANDLE_TYPES", v, std::numeric_limits<int>::max(), n)) {
    c.pool_handle_types = static_cast<unsigned>(n);
  }
  if (char const* v = env("CUDA_DOUBLE_NO_PEER")) { c.no_peer = parse_flag("CUDA_DOUBLE_NO_PEER", v); }
  if (char const* v = env("CUDA_DOUBLE_FABRIC_OK")) { c.fabric_ok = parse_flag("CUDA_DOUBLE_FABRIC_OK", v); }
  if (char const* v = env("CUDA_DOUBLE_SHARED_MEMORY")) { c.shared_memory = v; }
  if (char const* v = env("CUDA_DOUBLE_SIMULATE");
      v && parse_number("CUDA_DOUBLE_SIMULATE", v, std::numeric_limits<std::uint64_t>::max(), n)) {
    c.simulate = true;
    c.simulate_seed = n;
  }
  if (char const* v = env("CUDA_DOUBLE_SIMULATE_LAZY")) {
    c.simulate_lazy = parse_flag("CUDA_DOUBLE_SIMULATE_LAZY", v);
  }
  if (char const* v = env("CUDA_DOUBLE_TEXTURE_ALIGNMENT");
      v && parse_number("CUDA_DOUBLE_TEXTURE_ALIGNMENT", v, std::size_t{1} << 20, n) && n > 0) {
    c.texture_alignment = static_cast<std::size_t>(n);
  }
  if (char const* v = env("CUDA_DOUBLE_NO_HOST_POOLS")) {
    c.no_host_pools = parse_flag("CUDA_DOUBLE_NO_HOST_POOLS", v);
  }
  if (char const* v = env("CUDA_DOUBLE_TIGHT_POOL")) { c.tight_pool = parse_flag("CUDA_DOUBLE_TIGHT_POOL", v); }
  if (char const* v = env("CUDA_DOUBLE_RUNTIME_PRIVATE_SUBMISSIONS")) {
    c.runtime_private_submissions = parse_flag("CUDA_DOUBLE_RUNTIME_PRIVATE_SUBMISSIONS", v);
  }
  if (char const* v = env("CUDA_DOUBLE_NEWER_ABI")) {
    for (std::string_view names = v; !names.empty();) {
      std::size_t const comma = names.find(',');
      std::string_view const name = names.substr(0, comma);
      if (!name.empty()) { c.newer_abis.emplace_back(name); }
      names = comma == std::string_view::npos ? std::string_view{} : names.substr(comma + 1);
    }
  }
  return c;
}

}  // namespace

configuration const& config()
{
  static configuration const c = read_config();
  return c;
}

}  // namespace cuda_double
