// The hooks of the driver functions that put work on a stream
// (cuda/api_table.def, ASYNCSHIM_DRIVER_SUBMISSION): each tells the stream
// tracker which stream gets work, before the real call, so that a free under
// `device` ordering knows which non-blocking streams may still be using a
// block (docs/followed-submissions.md). The real function always runs, with
// the caller's arguments, and its result is returned as it is. Nothing here
// throws.
#include "core/hooks.hpp"
#include "core/lookup_redirect.hpp"
#include "cuda/driver.hpp"
#include "state/shim_state.hpp"
#include "state/stream_tracker.hpp"

namespace asyncshim::shim {
namespace {

// Every ordering that fences needs the streams the shim did not see made;
// what a submission notes beyond that, only frees in order read.
void note_submission(CUstream stream) noexcept
{
  if (tracking_active()) { tracker().submitting(stream, process_settings().frees_in_order()); }
}

}  // namespace
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
