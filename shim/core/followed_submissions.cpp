// The hooks of the driver functions that put work on a stream
// (cuda/api_table.def, ASYNCSHIM_DRIVER_SUBMISSION): each tells the stream
// tracker which stream gets work, before the real call, so that a free under
// `device` ordering knows which non-blocking streams may still be using a
// block (docs/design.md#followed-submissions). The real function always runs, with
// the caller's arguments, and its result is returned as it is. Nothing here
// throws.
#include "core/followed_submissions.hpp"

#include "core/hooks.hpp"
#include "core/lookup_redirect.hpp"
#include "cuda/driver.hpp"
#include "cuda/runtime.hpp"
#include "state/shim_state.hpp"
#include "state/stream_tracker.hpp"

#include <atomic>

namespace asyncshim::shim {
namespace {

// The start-up check's stream, and whether a hook saw work go to it.
std::atomic<CUstream> checked_stream{nullptr};
std::atomic<bool> checked_stream_seen{false};

// Every ordering that fences needs the streams the shim did not see made;
// what a submission notes beyond that, only frees in order read.
void note_submission(CUstream stream) noexcept
{
  if (stream != nullptr && stream == checked_stream.load(std::memory_order_relaxed)) {
    checked_stream_seen.store(true, std::memory_order_relaxed);
  }
  if (tracking_active()) { tracker().submitting(stream, process_settings().frees_in_order()); }
}

void CUDART_CB do_nothing(void* /*user_data*/) {}

// Why the runtime's submissions cannot be relied on; null when they can.
char const* why_runtime_submissions_unseen() noexcept
{
  auto const& rt = runtime();
  if (!rt.found()) { return nullptr; }  // the program reaches the driver itself: the hooks are what it calls
  if (rt.peek_at_last_error == nullptr || rt.get_last_error == nullptr || rt.stream_create_with_flags == nullptr ||
      rt.launch_host_func == nullptr || rt.stream_destroy == nullptr) {
    return "the runtime lacks a function the check needs";
  }
  // A failure below leaves an error of the shim's own to clear; the
  // program's pending one would go with it.
  if (rt.peek_at_last_error() != cudaSuccess) {
    return "the check was not made: an error of the program's was pending";
  }
  cudaStream_t stream = nullptr;
  if (rt.stream_create_with_flags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
    (void)rt.get_last_error();
    return "the check could not make a stream";
  }
  checked_stream.store(reinterpret_cast<CUstream>(stream), std::memory_order_relaxed);
  bool const launched = rt.launch_host_func(stream, do_nothing, nullptr) == cudaSuccess;
  checked_stream.store(nullptr, std::memory_order_relaxed);
  bool const seen = checked_stream_seen.load(std::memory_order_relaxed);
  (void)rt.stream_destroy(stream);  // the host function still runs
  if (!launched) {
    (void)rt.get_last_error();
    return "the check's launch failed";
  }
  return seen ? nullptr : "a host function launched through it went past the shim";
}

}  // namespace

void check_runtime_submissions_followed() noexcept
{
  static bool const checked = [] {
    if (tracker().following_submissions()) {
      if (char const* why = why_runtime_submissions_unseen()) { tracker().runtime_submissions_unseen(why); }
    }
    return true;
  }();
  (void)checked;
}

}  // namespace asyncshim::shim

using asyncshim::shim::call_real;
using asyncshim::shim::driver;
using asyncshim::shim::note_submission;

// The rows with the stream as a parameter: generated.
#define ASYNCSHIM_DRIVER_SUBMISSION(lookups, version, field, symbol, lookup_name, abi, stream, params, args) \
  ASYNCSHIM_SUBMISSION_HOOK_##stream(field, params, args)
#define ASYNCSHIM_SUBMISSION_HOOK_hStream(field, params, args)       \
  CUresult asyncshim_hook_##field params noexcept                    \
  {                                                                  \
    note_submission(hStream);                                        \
    return call_real(driver().field, ASYNCSHIM_UNPARENTHESIZE args); \
  }
#define ASYNCSHIM_SUBMISSION_HOOK_stream(field, params, args)        \
  CUresult asyncshim_hook_##field params noexcept                    \
  {                                                                  \
    note_submission(stream);                                         \
    return call_real(driver().field, ASYNCSHIM_UNPARENTHESIZE args); \
  }
#define ASYNCSHIM_SUBMISSION_HOOK_none(field, params, args)  // written below
#define ASYNCSHIM_UNPARENTHESIZE(...)                        __VA_ARGS__
#include "cuda/api_table.def"
#undef ASYNCSHIM_SUBMISSION_HOOK_hStream
#undef ASYNCSHIM_SUBMISSION_HOOK_stream
#undef ASYNCSHIM_SUBMISSION_HOOK_none
#undef ASYNCSHIM_UNPARENTHESIZE

// The stream is in the launch configuration.
CUresult asyncshim_hook_submit_cuLaunchKernelEx(CUlaunchConfig const* config, CUfunction f, void** kernelParams,
                                                void** extra) noexcept
{
  if (config != nullptr) { note_submission(config->hStream); }
  return call_real(driver().submit_cuLaunchKernelEx, config, f, kernelParams, extra);
}

CUresult asyncshim_hook_submit_cuLaunchKernelEx_ptsz(CUlaunchConfig const* config, CUfunction f, void** kernelParams,
                                                     void** extra) noexcept
{
  if (config != nullptr) { note_submission(config->hStream); }
  return call_real(driver().submit_cuLaunchKernelEx_ptsz, config, f, kernelParams, extra);
}

// One stream per launch, each on its own device.
CUresult asyncshim_hook_submit_cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList,
                                                                    unsigned int numDevices,
                                                                    unsigned int flags) noexcept
{
  if (launchParamsList != nullptr) {
    for (unsigned int i = 0; i < numDevices; ++i) {
      note_submission(launchParamsList[i].hStream);
    }
  }
  return call_real(driver().submit_cuLaunchCooperativeKernelMultiDevice, launchParamsList, numDevices, flags);
}
