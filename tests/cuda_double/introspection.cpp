// introspection.cpp: the cuda_double_* functions of the CUDA TEST DOUBLES (see
// cuda_double.h), for tests to look inside the model. Exported by the driver
// double, libcuda.so.1. They never fail, never touch the last error or the
// context stack, and ignore the environment controls.
#include <mutex>
#include <string>

#include "cuda_double.h"
#include "model.h"

using cuda_double::model;

namespace {
using Lock = std::lock_guard<std::mutex>;
}

extern "C" {

CUDA_DOUBLE_API cuda_double_counters cuda_double_get_counters(void) {
  auto const& c = model().counters;
  cuda_double_counters out{};
  out.native_mallocs = c.native_mallocs.load();
  out.native_frees = c.native_frees.load();
  out.pool_allocs = c.pool_allocs.load();
  out.pool_frees = c.pool_frees.load();
  out.pools_created = c.pools_created.load();
  out.pools_destroyed = c.pools_destroyed.load();
  out.failed_calls = c.failed_calls.load();
  out.driver_mallocs = c.driver_mallocs.load();
  out.driver_frees = c.driver_frees.load();
  return out;
}

CUDA_DOUBLE_API void cuda_double_reset_counters(void) {
  auto& m = model();
  Lock lock(m.mu);
  for (auto* c : {&m.counters.native_mallocs, &m.counters.native_frees, &m.counters.pool_allocs,
                  &m.counters.pool_frees, &m.counters.pools_created, &m.counters.pools_destroyed,
                  &m.counters.failed_calls, &m.counters.driver_mallocs, &m.counters.driver_frees})
    c->store(0);
  m.last_alloc_stream = CUDA_DOUBLE_NO_STREAM;
  m.last_free_stream = CUDA_DOUBLE_NO_STREAM;
  m.proc_lookups.clear();
}

CUDA_DOUBLE_API int cuda_double_pointer_kind(void const* p) {
  auto& m = model();
  Lock lock(m.mu);
  auto const* a = m.find_allocation(p);
  return a == nullptr ? 0 : static_cast<int>(a->kind);
}

CUDA_DOUBLE_API cudaMemPool_t cuda_double_pointer_pool(void const* p) {
  auto& m = model();
  Lock lock(m.mu);
  auto const* a = m.find_allocation(p);
  return a == nullptr ? nullptr : reinterpret_cast<cudaMemPool_t>(a->pool);
}

CUDA_DOUBLE_API cudaStream_t cuda_double_last_free_stream(void) {
  auto& m = model();
  Lock lock(m.mu);
  return m.last_free_stream;
}

CUDA_DOUBLE_API cudaStream_t cuda_double_last_alloc_stream(void) {
  auto& m = model();
  Lock lock(m.mu);
  return m.last_alloc_stream;
}

CUDA_DOUBLE_API int cuda_double_live_allocations(void) {
  auto& m = model();
  Lock lock(m.mu);
  return static_cast<int>(m.allocations().size());
}

CUDA_DOUBLE_API unsigned long long cuda_double_proc_lookups(char const* base_name) {
  if (base_name == nullptr) return 0;
  auto& m = model();
  Lock lock(m.mu);
  auto it = m.proc_lookups.find(base_name);
  return it == m.proc_lookups.end() ? 0 : it->second;
}

}  // extern "C"
