#include "state/shim_state.hpp"

#include "support/log.hpp"

#include <pthread.h>
#include <sys/auxv.h>
#include <unistd.h>  // environ

#include <atomic>
#include <new>

namespace asyncshim::shim {
namespace {

std::atomic<shim_state*> created_state{nullptr};

}  // namespace

shim_state* active_state() noexcept
{
  if (in_forked_child() || process_settings().disabled) { return nullptr; }
  static shim_state* const instance = []() noexcept {
    watch_for_fork();
    auto* made = new (std::nothrow) shim_state{process_settings()};
    created_state.store(made, std::memory_order_release);
    return made;
  }();
  return instance;
}

shim_state* existing_state() noexcept
{
  if (in_forked_child()) { return nullptr; }
  return created_state.load(std::memory_order_acquire);
}

namespace {

config::settings load() noexcept
{
  // A secure-execution process (set-user-ID or set-group-ID, or file
  // capabilities): its environment comes from a less privileged caller, so
  // the shim reads none of it, writes no file and serves nothing (SECURITY.md),
  // as glibc ignores its own tunables there.
  if (getauxval(AT_SECURE) != 0) {
    config::settings passthrough;
    passthrough.disabled = true;
    return passthrough;
  }
  try {
    config::parse_result parsed = config::parse_environment(environ);
    std::string const log_problem = log::setup(parsed.values.level, parsed.values.log_file);
    // At the level asked for, as every other message: ASYNCSHIM_LOG_LEVEL=off
    // says nothing at all, and ASYNCSHIM_DISABLE=1 says why only at info.
    for (auto const& d : parsed.diagnostics) {
      if (log::enabled(d.level)) { log::write(d.level, d.text); }
    }
    if (!log_problem.empty()) { log::warn("{}", log_problem); }
    log::info("settings: {}", config::describe(parsed.values));
    if (!parsed.values.disabled) {
      log::info("cudaMalloc and cudaFree are redirected to per-device stream-ordered pools, created on first use");
    }
    return parsed.values;
  } catch (...) {
    log::error("cannot read the settings; asyncshim is disabled for this process: cudaMalloc and cudaFree go to "
               "the native allocator unchanged");
    config::settings fallback;
    fallback.disabled = true;
    return fallback;
  }
}

// Constant-initialized: no load-time code.
std::atomic<bool> forked_child{false};
std::atomic<bool> watching{false};

void mark_forked_child() { forked_child.store(true, std::memory_order_relaxed); }

}  // namespace

config::settings const& process_settings() noexcept
{
  // Never destroyed: calls may come from static destructors and atexit handlers.
  static config::settings const* const settings = []() noexcept -> config::settings const* {
    try {
      return new config::settings(load());
    } catch (...) {  // no memory for the settings: pass everything through
      alignas(config::settings) static unsigned char storage[sizeof(config::settings)];
      auto* fallback = new (storage) config::settings{};
      fallback->disabled = true;
      return fallback;
    }
  }();
  return *settings;
}

bool in_forked_child() noexcept { return forked_child.load(std::memory_order_relaxed); }

void watch_for_fork() noexcept
{
  if (watching.load(std::memory_order_acquire)) { return; }
  bool expected = false;
  if (watching.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
    (void)pthread_atfork(nullptr, nullptr, mark_forked_child);
  }
}

}  // namespace asyncshim::shim
