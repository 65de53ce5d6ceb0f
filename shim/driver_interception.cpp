#include "driver_interception.hpp"

#include "bound_once.hpp"
#include "driver_binding.hpp"

#include <array>
#include <cstring>

extern "C" {
// driver_entry_points.cpp
CUresult asyncshim_entry_mem_alloc(CUdeviceptr* dptr, size_t bytesize);
CUresult asyncshim_entry_mem_free(CUdeviceptr dptr);
CUresult asyncshim_entry_get_proc_address_v2(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                             CUdriverProcAddressQueryResult* symbolStatus);
CUresult asyncshim_entry_get_proc_address_v1(char const* symbol, void** pfn, int cudaVersion, cuuint64_t flags);
}

namespace asyncshim::shim {
namespace {

// The addresses that mean one replaced driver function: what the driver
// exports under its name, and what its own cuGetProcAddress returns for it
// (which need not be the export), with and without per-thread streams.
struct replacement {
  std::array<void*, 4> real{};
  void* ours = nullptr;

  [[nodiscard]] bool matches(void* found) const noexcept
  {
    for (void* r : real) {
      if (r != nullptr && r == found) { return true; }
    }
    return false;
  }
};

struct replacement_table {
  replacement mem_alloc;
  replacement mem_free;
  replacement get_proc_address_v2;
  replacement get_proc_address_v1;

  // Complete only when the driver answered every lookup that matters; a
  // partial table (a lookup failing at a bad moment) is not kept.
  [[nodiscard]] bool found() const noexcept
  {
    return mem_alloc.real[0] != nullptr && mem_alloc.real[1] != nullptr && mem_free.real[0] != nullptr &&
           mem_free.real[1] != nullptr && get_proc_address_v2.real[1] != nullptr;
  }
};

void* looked_up(char const* name, int version, cuuint64_t flags) noexcept
{
  auto const lookup = driver().get_proc_address_v2;
  void* found = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (lookup == nullptr || lookup(name, &found, version, flags, &status) != CUDA_SUCCESS) { return nullptr; }
  return found;
}

replacement_table search() noexcept
{
  auto const& drv = driver();
  replacement_table t;
  if (!drv.found()) { return t; }
  int version = 0;
  if (drv.driver_get_version == nullptr || drv.driver_get_version(&version) != CUDA_SUCCESS) { version = CUDA_VERSION; }
  constexpr cuuint64_t per_thread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  t.mem_alloc = {{reinterpret_cast<void*>(drv.mem_alloc), looked_up("cuMemAlloc", version, 0),
                  looked_up("cuMemAlloc", version, per_thread), nullptr},
                 reinterpret_cast<void*>(&asyncshim_entry_mem_alloc)};
  t.mem_free = {{reinterpret_cast<void*>(drv.mem_free), looked_up("cuMemFree", version, 0),
                 looked_up("cuMemFree", version, per_thread), nullptr},
                reinterpret_cast<void*>(&asyncshim_entry_mem_free)};
  // The lookup of cuGetProcAddress through itself: the v2 entry point for
  // CUDA 12 and later, the v1 one for an 11.x version.
  t.get_proc_address_v2 = {{reinterpret_cast<void*>(drv.get_proc_address_v2),
                            looked_up("cuGetProcAddress", version, 0), nullptr, nullptr},
                           reinterpret_cast<void*>(&asyncshim_entry_get_proc_address_v2)};
  t.get_proc_address_v1 = {{reinterpret_cast<void*>(drv.get_proc_address_v1),
                            looked_up("cuGetProcAddress", 11030, 0), nullptr, nullptr},
                           reinterpret_cast<void*>(&asyncshim_entry_get_proc_address_v1)};
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

}  // namespace

void* replacement_for_pointer(void* found) noexcept
{
  if (found == nullptr || searching || !driver_interception_active()) { return found; }
  replacement_table const& t = table();
  for (replacement const* r : {&t.mem_alloc, &t.mem_free, &t.get_proc_address_v2, &t.get_proc_address_v1}) {
    if (r->matches(found)) { return r->ours; }
  }
  return found;
}

void* replacement_for_lookup(char const* name, void* found) noexcept
{
  // Most lookups in a process have nothing to do with CUDA: a few string
  // comparisons, and nothing else, for them.
  static constexpr char const* replaced[] = {"cuMemAlloc_v2", "cuMemFree_v2", "cuGetProcAddress",
                                             "cuGetProcAddress_v2"};
  if (name == nullptr || found == nullptr) { return found; }
  for (char const* r : replaced) {
    if (std::strcmp(name, r) == 0) { return replacement_for_pointer(found); }
  }
  return found;
}

}  // namespace asyncshim::shim
