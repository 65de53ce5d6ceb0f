// What the shim does when a device's context goes (cudaDeviceReset,
// cuDevicePrimaryCtxReset, cuCtxDestroy): natively every allocation made in
// the context is freed with it, so the device's pool goes too.
#pragma once

#include <cuda.h>

namespace asyncshim::shim {

// Before the real cuDevicePrimaryCtxReset (cudaDeviceReset): the device's
// pool, its ownership records and the shim's streams on it are dropped.
void device_resetting(int device) noexcept;
// Before the real cuCtxDestroy: the shim forgets the program's streams there,
// and drops a device's pool made in that context as for a reset.
void context_destroying(CUcontext context) noexcept;

}  // namespace asyncshim::shim
