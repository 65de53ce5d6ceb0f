#include "driver_interception.hpp"

#include "bound_once.hpp"
#include "driver_binding.hpp"
#include "fork_state.hpp"
#include "memory_info.hpp"
#include "process_settings.hpp"

#include <array>
#include <cstring>

extern "C" {
// driver_entry_points.cpp
CUresult asyncshim_entry_mem_alloc(CUdeviceptr* dptr, size_t bytesize);
CUresult asyncshim_entry_mem_free(CUdeviceptr dptr);
CUresult asyncshim_entry_get_proc_address_v2(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* symbolStatus);
CUresult asyncshim_entry_get_proc_address_v1(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
// followed_driver_calls.cpp
CUresult asyncshim_hook_stream_create(CUstream*, unsigned);
CUresult asyncshim_hook_stream_create_with_priority(CUstream*, unsigned, int);
CUresult asyncshim_hook_stream_destroy(CUstream);
CUresult asyncshim_hook_stream_begin_capture(CUstream, CUstreamCaptureMode);
CUresult asyncshim_hook_stream_begin_capture_ptsz(CUstream, CUstreamCaptureMode);
CUresult asyncshim_hook_stream_begin_capture_to_graph(CUstream, CUgraph, CUgraphNode const*, CUgraphEdgeData const*,
                                                      size_t, CUstreamCaptureMode);
CUresult asyncshim_hook_stream_begin_capture_to_graph_ptsz(CUstream, CUgraph, CUgraphNode const*,
                                                           CUgraphEdgeData const*, size_t, CUstreamCaptureMode);
CUresult asyncshim_hook_stream_end_capture(CUstream, CUgraph*);
CUresult asyncshim_hook_stream_end_capture_ptsz(CUstream, CUgraph*);
CUresult asyncshim_hook_ctx_destroy(CUcontext);
CUresult asyncshim_hook_ctx_synchronize();
CUresult asyncshim_hook_device_primary_ctx_reset(CUdevice);
CUresult asyncshim_hook_ctx_enable_peer_access(CUcontext, unsigned);
CUresult asyncshim_hook_ctx_disable_peer_access(CUcontext);
CUresult asyncshim_hook_ipc_get_mem_handle(CUipcMemHandle*, CUdeviceptr);
CUresult asyncshim_hook_mem_pool_export_to_shareable_handle(void*, CUmemoryPool, CUmemAllocationHandleType,
                                                            unsigned long long);
}

namespace asyncshim::shim {
namespace {

// Why a function is replaced, which decides when: the allocation entry
// points only while driver-level calls are intercepted (ASYNCSHIM_INTERCEPT),
// the followed calls (followed_driver_calls.cpp) whenever the shim is active, and the
// lookups themselves in either case.
enum class purpose { allocation, following, lookup };

// One address that means a replaced driver function: what the driver
// exports under its name, or what its own cuGetProcAddress returns for it
// (which need not be the export), with or without per-thread streams.
struct replacement {
  void* real = nullptr;
  void* ours = nullptr;
  purpose why = purpose::allocation;
};

struct replacement_table {
  static constexpr std::size_t capacity = 96;
  std::array<replacement, capacity> entries{};
  std::size_t size = 0;
  bool complete = false;

  void add(void* real, void* ours, purpose why) noexcept
  {
    if (real != nullptr && size < capacity) { entries[size++] = {real, ours, why}; }
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

replacement_table search() noexcept
{
  auto const& drv = driver();
  replacement_table t;
  if (!drv.found()) { return t; }
  int version = 0;
  if (drv.driver_get_version == nullptr || drv.driver_get_version(&version) != CUDA_SUCCESS) { version = CUDA_VERSION; }
  constexpr cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

  // A function without a per-thread variant: every address of it.
  auto const same_for_both = [&](char const* base_name, void* exported, void* ours, purpose why) {
    t.add(exported, ours, why);
    t.add(looked_up(base_name, version, 0), ours, why);
    t.add(looked_up(base_name, version, per_thread), ours, why);
  };
  // Also the older versions a runtime may ask for, where their ABI is the
  // same as the current one's (the runtime fetches cuDevicePrimaryCtxReset
  // as of CUDA 7.0, whose entry point is not the _v2 one).
  auto const older_versions_too = [&](char const* base_name, void* ours) {
    for (int const old : {2000, 4000, 7000, 11000}) { t.add(looked_up(base_name, old, 0), ours, purpose::following); }
  };
  // A function whose per-thread variant is another function, replaced by another of ours.
  auto const with_variant = [&](char const* base_name, void* exported, void* ours, void* exported_ptsz,
                                void* ours_ptsz) {
    t.add(exported, ours, purpose::following);
    t.add(looked_up(base_name, version, 0), ours, purpose::following);
    t.add(exported_ptsz, ours_ptsz, purpose::following);
    t.add(looked_up(base_name, version, per_thread), ours_ptsz, purpose::following);
  };

  void* const alloc_lookup = looked_up("cuMemAlloc", version, 0);
  void* const free_lookup = looked_up("cuMemFree", version, 0);
  void* const gpa_lookup = looked_up("cuGetProcAddress", version, 0);
  t.complete = drv.mem_alloc != nullptr && alloc_lookup != nullptr && drv.mem_free != nullptr &&
               free_lookup != nullptr && gpa_lookup != nullptr;
  same_for_both("cuMemAlloc", address(drv.mem_alloc), address(&asyncshim_entry_mem_alloc), purpose::allocation);
  same_for_both("cuMemFree", address(drv.mem_free), address(&asyncshim_entry_mem_free), purpose::allocation);
  // The lookup of cuGetProcAddress through itself: the v2 entry point for
  // CUDA 12 and later, the v1 one for an 11.x version.
  t.add(address(drv.get_proc_address_v2), address(&asyncshim_entry_get_proc_address_v2), purpose::lookup);
  t.add(gpa_lookup, address(&asyncshim_entry_get_proc_address_v2), purpose::lookup);
  t.add(address(drv.get_proc_address_v1), address(&asyncshim_entry_get_proc_address_v1), purpose::lookup);
  t.add(looked_up("cuGetProcAddress", 11030, 0), address(&asyncshim_entry_get_proc_address_v1), purpose::lookup);

  same_for_both("cuStreamCreate", address(drv.stream_create), address(&asyncshim_hook_stream_create),
                purpose::following);
  same_for_both("cuStreamCreateWithPriority", address(drv.stream_create_with_priority),
                address(&asyncshim_hook_stream_create_with_priority), purpose::following);
  same_for_both("cuStreamDestroy", address(drv.stream_destroy), address(&asyncshim_hook_stream_destroy),
                purpose::following);
  same_for_both("cuCtxDestroy", address(drv.ctx_destroy), address(&asyncshim_hook_ctx_destroy), purpose::following);
  same_for_both("cuCtxSynchronize", address(drv.ctx_synchronize), address(&asyncshim_hook_ctx_synchronize),
                purpose::following);
  same_for_both("cuDevicePrimaryCtxReset", address(drv.device_primary_ctx_reset),
                address(&asyncshim_hook_device_primary_ctx_reset), purpose::following);
  same_for_both("cuCtxEnablePeerAccess", address(drv.ctx_enable_peer_access),
                address(&asyncshim_hook_ctx_enable_peer_access), purpose::following);
  same_for_both("cuCtxDisablePeerAccess", address(drv.ctx_disable_peer_access),
                address(&asyncshim_hook_ctx_disable_peer_access), purpose::following);
  same_for_both("cuIpcGetMemHandle", address(drv.ipc_get_mem_handle), address(&asyncshim_hook_ipc_get_mem_handle),
                purpose::following);
  same_for_both("cuMemPoolExportToShareableHandle", address(drv.mem_pool_export_to_shareable_handle),
                address(&asyncshim_hook_mem_pool_export_to_shareable_handle), purpose::following);
  same_for_both("cuMemGetInfo", address(drv.mem_get_info), address(&asyncshim_hook_mem_get_info), purpose::following);
  older_versions_too("cuStreamDestroy", address(&asyncshim_hook_stream_destroy));
  older_versions_too("cuCtxDestroy", address(&asyncshim_hook_ctx_destroy));
  older_versions_too("cuDevicePrimaryCtxReset", address(&asyncshim_hook_device_primary_ctx_reset));
  with_variant("cuStreamBeginCapture", address(drv.stream_begin_capture), address(&asyncshim_hook_stream_begin_capture),
               address(drv.stream_begin_capture_ptsz), address(&asyncshim_hook_stream_begin_capture_ptsz));
  with_variant("cuStreamBeginCaptureToGraph", address(drv.stream_begin_capture_to_graph),
               address(&asyncshim_hook_stream_begin_capture_to_graph), address(drv.stream_begin_capture_to_graph_ptsz),
               address(&asyncshim_hook_stream_begin_capture_to_graph_ptsz));
  with_variant("cuStreamEndCapture", address(drv.stream_end_capture), address(&asyncshim_hook_stream_end_capture),
               address(drv.stream_end_capture_ptsz), address(&asyncshim_hook_stream_end_capture_ptsz));
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
  }
  return false;
}

}  // namespace

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
  static constexpr char const* replaced[] = {
    "cuMemAlloc_v2",      "cuMemFree_v2",         "cuGetProcAddress",
    "cuGetProcAddress_v2", "cuStreamCreate",       "cuStreamCreateWithPriority",
    "cuStreamDestroy_v2", "cuStreamBeginCapture_v2", "cuStreamBeginCapture_v2_ptsz",
    "cuStreamBeginCaptureToGraph", "cuStreamBeginCaptureToGraph_ptsz", "cuStreamEndCapture",
    "cuStreamEndCapture_ptsz", "cuCtxDestroy_v2", "cuDevicePrimaryCtxReset_v2",
    "cuCtxEnablePeerAccess", "cuCtxDisablePeerAccess", "cuIpcGetMemHandle", "cuMemPoolExportToShareableHandle",
    "cuCtxSynchronize", "cuMemGetInfo_v2",
    // The old names of cuStreamDestroy_v2, cuCtxDestroy_v2 and
    // cuDevicePrimaryCtxReset_v2 (same ABI), which dlsym() callers that spell
    // them out get.
    "cuStreamDestroy", "cuCtxDestroy", "cuDevicePrimaryCtxReset"};
  if (name == nullptr || found == nullptr || name[0] != 'c' || name[1] != 'u') { return found; }
  for (char const* r : replaced) {
    if (std::strcmp(name, r) == 0) { return replacement_for_pointer(found); }
  }
  return found;
}

bool tracking_active() noexcept
{
  if (in_forked_child()) { return false; }
  config::settings const& settings = process_settings();
  return !settings.disabled && settings.mode == config::shim_mode::pool;
}

bool driver_interception_active() noexcept
{
  if (in_forked_child()) { return false; }
  config::settings const& settings = process_settings();
  return !settings.disabled && settings.intercepts_driver();
}

}  // namespace asyncshim::shim
