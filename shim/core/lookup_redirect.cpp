#include "core/lookup_redirect.hpp"

#include "core/hooks.hpp"
#include "cuda/driver.hpp"
#include "cuda/error_text.hpp"
#include "cuda/loader.hpp"
#include "state/shim_state.hpp"
#include "state/stream_tracker.hpp"
#include "support/log.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <string_view>

namespace asyncshim::shim {
namespace {

// Why a function is replaced, which decides when (cuda/api_table.def).
enum class purpose { allocation, following, lookup, following_or_limit };
// Which real addresses mean a replaced function (cuda/api_table.def).
enum class lookups {
  every_stream,
  every_stream_and_older,
  legacy_stream,
  per_thread_stream,
  cuda_11,
  cuda_2,
  cuda_3_2,
  cuda_11_4
};
enum class need { required, optional };

// The older versions a runtime may ask for, where their ABI is the same as
// the current one's (the runtime fetches cuDevicePrimaryCtxReset as of CUDA
// 7.0, whose entry point is not the _v2 one).
constexpr int older_versions[] = {2000, 4000, 7000, 11000};
// The version a CUDA 11 runtime asks cuGetProcAddress for.
constexpr int cuda_11_version = 11030;
// The first ABI of the oldest functions.
constexpr int cuda_2_version = 2000;
// The ABIs of functions that changed twice (cuCtxCreate_v2 and _v3).
constexpr int cuda_3_2_version = 3020;
constexpr int cuda_11_4_version = 11040;

// The CUDA version of an ABI, from its cudaTypedefs.h name
// (PFN_<name>_v<version>[_ptsz]): the version a lookup hands it out at.
constexpr int abi_version(std::string_view pfn) noexcept
{
  if (pfn.ends_with("_ptsz")) { pfn.remove_suffix(5); }
  std::size_t const v = pfn.rfind("_v");
  if (v == std::string_view::npos) { return 0; }
  int version = 0;
  for (char const c : pfn.substr(v + 2)) {
    if (c < '0' || c > '9') { return 0; }
    version = version * 10 + (c - '0');
  }
  return version;
}

// How many addresses can mean one replaced function: its export, and what
// cuGetProcAddress returns for it.
constexpr std::size_t addresses_for(lookups kind) noexcept
{
  switch (kind) {
    case lookups::every_stream:
    case lookups::cuda_2: return 3;
    case lookups::every_stream_and_older: return 3 + std::size(older_versions);
    case lookups::legacy_stream:
    case lookups::per_thread_stream:
    case lookups::cuda_11:
    case lookups::cuda_3_2:
    case lookups::cuda_11_4: return 2;
  }
  return 0;
}

constexpr std::size_t max_replacements = 0
#define ASYNCSHIM_DRIVER_HOOK(purpose_, lookups_, need_, field, symbol, lookup_name, abi, params, args) \
  +addresses_for(lookups::lookups_)
#include "cuda/api_table.def"
  ;

// One address that means a replaced driver function: what the driver
// exports under its name, or what its own cuGetProcAddress returns for it
// (which need not be the export), with or without per-thread streams.
struct replacement {
  void* real = nullptr;
  void* ours = nullptr;
  purpose why = purpose::allocation;
};

struct replacement_table {
  std::array<replacement, max_replacements> entries{};
  std::size_t size = 0;
  bool complete = true;

  void add(void* real, void* ours, purpose why) noexcept
  {
    if (real != nullptr && size < entries.size()) { entries[size++] = {real, ours, why}; }
  }

  // Complete only when the driver answered every lookup that matters; a
  // partial table (a lookup failing at a bad moment) is not kept.
  [[nodiscard]] bool found() const noexcept { return complete; }
};

void* looked_up(char const* name, int version, cuuint64_t flags) noexcept
{
  auto const lookup = driver().get_proc_address_v2;
  void* found = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (lookup == nullptr || lookup(name, &found, version, flags, &status) != CUDA_SUCCESS) { return nullptr; }
  return found;
}

template <class Fn>
void* address(Fn fn) noexcept
{
  return reinterpret_cast<void*>(fn);
}

// Every address that means one replaced function, for its hook `ours`.
void add_addresses(replacement_table& t, purpose why, lookups kind, need needed, void* exported, char const* name,
                   void* ours, int version) noexcept
{
  constexpr cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  int const lookup_version = kind == lookups::cuda_11     ? cuda_11_version
                             : kind == lookups::cuda_2    ? cuda_2_version
                             : kind == lookups::cuda_3_2  ? cuda_3_2_version
                             : kind == lookups::cuda_11_4 ? cuda_11_4_version
                                                          : version;
  void* const legacy_lookup =
    kind == lookups::per_thread_stream || exported == nullptr ? nullptr : looked_up(name, lookup_version, 0);
  if (needed == need::required && (exported == nullptr || legacy_lookup == nullptr)) { t.complete = false; }
  // Without its symbol the hook would have nothing to call: the driver's
  // answers stay the driver's.
  if (exported == nullptr) { return; }
  t.add(exported, ours, why);
  t.add(legacy_lookup, ours, why);
  if (kind == lookups::every_stream || kind == lookups::every_stream_and_older || kind == lookups::per_thread_stream ||
      kind == lookups::cuda_2) {
    t.add(looked_up(name, lookup_version, per_thread), ours, why);
  }
  if (kind == lookups::every_stream_and_older) {
    for (int const old : older_versions) {
      t.add(looked_up(name, old, 0), ours, why);
    }
  }
}

// A required row is checked by its export and its legacy-stream lookup,
// which a per-thread-stream row does not have.
#define ASYNCSHIM_DRIVER_HOOK(purpose_, lookups_, need_, field, symbol, lookup_name, abi, params, args) \
  static_assert(!(lookups::lookups_ == lookups::per_thread_stream && need::need_ == need::required),    \
                #symbol ": a per-thread-stream row cannot be required");
#include "cuda/api_table.def"

replacement_table search() noexcept
{
  auto const& drv = driver();
  replacement_table t;
  if (!drv.found()) {
    t.complete = false;
    return t;
  }
  // Each row at its own ABI's version: on a driver newer than the headers,
  // the driver's version would hand out a newer ABI of the name, whose
  // parameters the hook does not have.
#define ASYNCSHIM_DRIVER_HOOK(purpose_, lookups_, need_, field, symbol, lookup_name, abi, params, args) \
  add_addresses(t, purpose::purpose_, lookups::lookups_, need::need_, address(drv.field), lookup_name,  \
                address(&asyncshim_hook_##field), abi_version(#abi));
#define ASYNCSHIM_DRIVER_SUBMISSION(lookups_, abi_version, field, symbol, lookup_name, abi, stream, params, args) \
  add_addresses(t, purpose::following, lookups::lookups_, need::optional, address(drv.field), lookup_name,        \
                address(&asyncshim_hook_##field), abi_version);
#include "cuda/api_table.def"
  return t;
}

// Set while this thread builds the table: the driver (or another
// interposer in between) may look things up meanwhile, and those nested
// lookups get the real answers.
thread_local bool searching = false;

replacement_table search_guarded() noexcept
{
  searching = true;
  replacement_table t = search();
  searching = false;
  return t;
}

replacement_table const& table() noexcept
{
  struct tag {};
  return bound_once<tag, replacement_table>(search_guarded);
}

bool wanted(purpose why) noexcept
{
  switch (why) {
    case purpose::allocation: return driver_interception_active();
    case purpose::following: return tracking_active();
    case purpose::lookup: return driver_interception_active() || tracking_active();
    // Memory info and device resets: a memory limit applies in observe mode too.
    case purpose::following_or_limit: return tracking_active() || memory_limit_active();
  }
  return false;
}

// The names under which dlsym() callers find a replaced function: its
// exported name, and for the functions that kept their ABI across versions
// the old name too (cuStreamDestroy, cuCtxDestroy, cuDevicePrimaryCtxReset).
constexpr char const* replaced_names[] = {
#define ASYNCSHIM_DRIVER_HOOK(purpose_, lookups_, need_, field, symbol, lookup_name, abi, params, args) #symbol,
#include "cuda/api_table.def"
#define ASYNCSHIM_DRIVER_HOOK(purpose_, lookups_, need_, field, symbol, lookup_name, abi, params, args) \
  lookups::lookups_ == lookups::every_stream_and_older ? lookup_name : nullptr,
#include "cuda/api_table.def"
};

// Every driver function name the toolkit's headers declare, sorted
// (scripts/driver-api.py names; shim.driver_api keeps it in step).
constexpr char const* known_driver_names[] = {
#include "cuda/driver_names.inc"
};
static_assert(ASYNCSHIM_DRIVER_NAMES_CUDA_VERSION == CUDA_VERSION,
              "shim/cuda/driver_names.inc was written from other CUDA headers: scripts/driver-api.py names");

// The names of the functions that put work on a stream (the submission rows).
constexpr char const* submission_names[] = {
#define ASYNCSHIM_DRIVER_SUBMISSION(lookups_, version, field, symbol, lookup_name, abi, stream, params, args) \
  lookup_name,
#include "cuda/api_table.def"
};

bool known_driver_name(std::string_view name) noexcept
{
  auto const* const end = std::end(known_driver_names);
  auto const* const found = std::lower_bound(std::begin(known_driver_names), end, name,
                                             [](char const* a, std::string_view b) { return a < b; });
  return found != end && *found == name;
}

bool submits_work(std::string_view name) noexcept
{
  return std::any_of(std::begin(submission_names), std::end(submission_names),
                     [&](char const* n) { return n == name; });
}

// The name a runtime looks a driver function up by, from an exported symbol
// (dlsym): without the _ptsz/_ptds and _v<N> suffixes of an ABI version.
std::string_view lookup_name_of(std::string_view symbol) noexcept
{
  for (std::string_view const suffix : {"_ptsz", "_ptds"}) {
    if (symbol.ends_with(suffix)) { symbol.remove_suffix(suffix.size()); }
  }
  if (known_driver_name(symbol)) { return symbol; }
  std::size_t const v = symbol.rfind("_v");
  if (v != std::string_view::npos && v + 2 < symbol.size() &&
      std::all_of(symbol.begin() + static_cast<std::ptrdiff_t>(v) + 2, symbol.end(),
                  [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
    symbol = symbol.substr(0, v);
  }
  return symbol;
}

// Whether `fn` is in the shim's own library (dlsym without a library handle
// finds the shim's exports first).
bool in_the_shim(void* fn) noexcept
{
  Dl_info theirs{};
  Dl_info ours{};
  return dladdr(fn, &theirs) != 0 && dladdr(reinterpret_cast<void*>(&in_the_shim), &ours) != 0 &&
         theirs.dli_fbase == ours.dli_fbase;
}

// A lookup of `name`: followed submissions end when the caller may now
// submit work the shim does not see (docs/design.md#followed-submissions, "Failing
// safe"): `name` is a driver function the shim does not know, or one that
// submits work and the caller got the driver's own (`driver_function`, for
// the reason `got_it`).
void check_followed(char const* name, bool driver_function, char const* got_it) noexcept
{
  // Driver functions are cu<Capital>...: cudaMalloc, cublasCreate and
  // cudnnCreate are not.
  if (name == nullptr || searching || name[0] != 'c' || name[1] != 'u' ||
      std::isupper(static_cast<unsigned char>(name[2])) == 0 || !tracking_active()) {
    return;
  }
  std::string_view const base = lookup_name_of(name);
  if (!known_driver_name(base)) {
    tracker().stop_following_submissions(name, "a driver function newer than the CUDA headers the shim was built with");
  } else if (driver_function && submits_work(base)) {
    tracker().stop_following_submissions(name, got_it);
  }
}

// The same for a lookup whose answer `answer` the shim has seen: `real`, what
// the real lookup found.
void check_followed(char const* name, void* real, void* answer) noexcept
{
  if (real == nullptr) { return; }
  check_followed(name, answer == real && !in_the_shim(real), "in a version of it the shim does not follow");
}

// Each replaced function's lookup name and the version of its ABI.
struct replaced_abi {
  char const* name;
  int version;
};
constexpr replaced_abi replaced_abis[] = {
#define ASYNCSHIM_DRIVER_HOOK(purpose_, lookups_, need_, field, symbol, lookup_name, abi, params, args) \
  {lookup_name, abi_version(#abi)},
#include "cuda/api_table.def"
};
#define ASYNCSHIM_DRIVER_HOOK(purpose_, lookups_, need_, field, symbol, lookup_name, abi, params, args) \
  static_assert(abi_version(#abi) > 0, #symbol ": no version in " #abi);
#include "cuda/api_table.def"

// A lookup of a replaced function's name, above the newest version the shim
// replaces, that found an address the shim does not know: a newer ABI,
// which the caller gets untouched. The shim no longer sees every call of
// it, so followed submissions end, as at an unknown name.
void check_newer_abi(char const* name, int version, cuuint64_t flags, void* real, void* answer) noexcept
{
  // (A per-thread-stream lookup may find a variant the table has no row for.)
  if (name == nullptr || searching || answer != real || (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0 ||
      !tracking_active()) {
    return;
  }
  int newest = 0;
  for (replaced_abi const& r : replaced_abis) {
    if (std::strcmp(r.name, name) == 0) { newest = std::max(newest, r.version); }
  }
  if (newest != 0 && version > newest && !in_the_shim(real)) {
    tracker().stop_following_submissions(name, "in an ABI newer than the one the shim replaces");
  }
}

// Replaces the answer when it is a replaced driver function; at trace level
// every lookup is logged (how the entry points a runtime uses were found).
CUresult substitute(char const* lookup, char const* symbol, int version, cuuint64_t flags, CUresult result,
                    void** pfn) noexcept
{
  void* const real = pfn != nullptr ? *pfn : nullptr;
  if (result == CUDA_SUCCESS && real != nullptr) {
    *pfn = replacement_for_pointer(real);
    check_followed(symbol, real, *pfn);
    check_newer_abi(symbol, version, flags, real, *pfn);
  }
  if (log::enabled(log::log_level::trace)) {
    log::trace("{}(\"{}\", version {}, flags {}) = {}{}", lookup, symbol != nullptr ? symbol : "(null)", version, flags,
               cuda_status{result}, pfn != nullptr && *pfn != real ? ": replaced by asyncshim" : "");
  }
  return result;
}

}  // namespace

void global_lookup(char const* name, bool next) noexcept
{
  // RTLD_NEXT searches past the shim: it finds the driver's own function.
  check_followed(name, next, "with dlsym(RTLD_NEXT), which finds the driver's function, not the shim's");
}

// The first entry for an address wins: rows come in the table's order, each
// with its export first.
void* replacement_for_pointer(void* found) noexcept
{
  if (found == nullptr || searching || !(driver_interception_active() || tracking_active())) { return found; }
  replacement_table const& t = table();
  for (std::size_t i = 0; i < t.size; ++i) {
    replacement const& r = t.entries[i];
    if (r.real == found) { return wanted(r.why) ? r.ours : found; }
  }
  return found;
}

void* replacement_for_lookup(char const* name, void* found) noexcept
{
  // Most lookups in a process have nothing to do with CUDA: a few string
  // comparisons, and nothing else, for them.
  if (name == nullptr || found == nullptr || name[0] != 'c' || name[1] != 'u') { return found; }
  void* answer = found;
  for (char const* r : replaced_names) {
    if (r != nullptr && std::strcmp(name, r) == 0) {
      answer = replacement_for_pointer(found);
      break;
    }
  }
  check_followed(name, found, answer);
  return answer;
}

bool tracking_active() noexcept
{
  if (in_forked_child()) { return false; }
  config::settings const& settings = process_settings();
  return !settings.disabled && settings.mode == config::shim_mode::pool;
}

bool memory_limit_active() noexcept
{
  if (in_forked_child()) { return false; }
  config::settings const& settings = process_settings();
  return !settings.disabled && settings.memory_limit.any();
}

bool driver_interception_active() noexcept
{
  if (in_forked_child()) { return false; }
  config::settings const& settings = process_settings();
  return !settings.disabled && settings.intercepts_driver();
}

}  // namespace asyncshim::shim

// The real lookup always runs, with the caller's own symbolStatus, so the
// status is always filled as the driver fills it.
CUresult asyncshim_hook_get_proc_address_v2(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                            CUdriverProcAddressQueryResult* symbolStatus) noexcept
{
  auto const real = asyncshim::shim::driver().get_proc_address_v2;
  if (real == nullptr) {  // no driver loaded: answer as a lookup that found nothing
    if (pfn != nullptr) { *pfn = nullptr; }
    if (symbolStatus != nullptr) { *symbolStatus = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND; }
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return asyncshim::shim::substitute("cuGetProcAddress_v2", symbol, cudaVersion, flags,
                                     real(symbol, pfn, cudaVersion, flags, symbolStatus), pfn);
}

CUresult asyncshim_hook_get_proc_address_v1(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags) noexcept
{
  auto const real = asyncshim::shim::driver().get_proc_address_v1;
  if (real == nullptr) {
    if (pfn != nullptr) { *pfn = nullptr; }
    return CUDA_ERROR_NOT_INITIALIZED;
  }
  return asyncshim::shim::substitute("cuGetProcAddress", symbol, cudaVersion, flags,
                                     real(symbol, pfn, cudaVersion, flags), pfn);
}
