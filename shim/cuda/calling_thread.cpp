#include "cuda/calling_thread.hpp"

#include "cuda/driver.hpp"
#include "cuda/runtime.hpp"

namespace asyncshim::shim {
namespace {
// Read twice per intercepted call: initial-exec, so the access is one load
// at a fixed offset from the thread pointer instead of a __tls_get_addr call
// (the library is preloaded, so its TLS is in the static block).
// Zero-initialized: no constructor runs.
__attribute__((tls_model("initial-exec"))) thread_local api_level current = api_level::none;
}  // namespace

api_level current_api_level() noexcept { return current; }

api_level_scope::api_level_scope(api_level level) noexcept : previous_{current} { current = level; }

api_level_scope::~api_level_scope() { current = previous_; }

CUcontext current_context() noexcept
{
  auto const get = driver().ctx_get_current;
  CUcontext context = nullptr;
  return get != nullptr && get(&context) == CUDA_SUCCESS ? context : nullptr;
}

cudaError_t synchronize_device(api_level level) noexcept
{
  auto const ctx_synchronize = driver().ctx_synchronize;
  if (ctx_synchronize != nullptr && ctx_synchronize() == CUDA_SUCCESS) { return cudaSuccess; }
  if (level == api_level::runtime && runtime().device_synchronize != nullptr) { return runtime().device_synchronize(); }
  return ctx_synchronize != nullptr ? static_cast<cudaError_t>(ctx_synchronize()) : cudaErrorInitializationError;
}

context_scope::context_scope(CUcontext context) noexcept
{
  auto const& drv = driver();
  if (drv.ctx_get_current != nullptr) {
    CUcontext current = nullptr;
    status_ = drv.ctx_get_current(&current);
    if (status_ != CUDA_SUCCESS || current == context) { return; }
  }
  status_ = drv.ctx_push_current != nullptr ? drv.ctx_push_current(context) : CUDA_ERROR_NOT_INITIALIZED;
  pushed_ = status_ == CUDA_SUCCESS;
}

context_scope::~context_scope()
{
  CUcontext popped = nullptr;
  if (pushed_) { (void)driver().ctx_pop_current(&popped); }
}

owner_device_scope::owner_device_scope(api_level level, int owner) noexcept
{
  if (level == api_level::driver) {
    // The owner's primary context is pushed for the free and popped after;
    // the retain is released again.
    auto const& drv = driver();
    int device = owner;
    bool const has_context = drv.ctx_get_device(&device) == CUDA_SUCCESS;
    if (!has_context || device == owner) { return; }
    CUcontext primary = nullptr;
    status_ = static_cast<cudaError_t>(drv.device_primary_ctx_retain(&primary, owner));
    if (status_ != cudaSuccess) { return; }
    retained_device_ = owner;
    owner_context_.emplace(primary);
    status_ = static_cast<cudaError_t>(owner_context_->status());
    return;
  }
  auto const& rt = runtime();
  if (rt.get_device(&previous_device_) != cudaSuccess) { return; }
  if (previous_device_ == owner) {
    // The shim's driver calls need the device's context current; the
    // runtime makes it so lazily, on a thread's first call that needs it.
    if (!context_is_current()) { status_ = rt.set_device(owner); }
    return;
  }
  status_ = rt.set_device(owner);
  device_switched_ = status_ == cudaSuccess;
}

owner_device_scope::~owner_device_scope()
{
  owner_context_.reset();  // popped before the retain is released
  if (retained_device_ >= 0) { (void)driver().device_primary_ctx_release(retained_device_); }
  if (device_switched_) { (void)runtime().set_device(previous_device_); }
}

}  // namespace asyncshim::shim
