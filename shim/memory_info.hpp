// What cudaMemGetInfo and cuMemGetInfo_v2 report under the shim (README,
// "Sharing a GPU"): as free, what the program could still allocate, which is
// the device's free memory plus what this process's pool on that device
// holds unused, frees still queued or in flight included. The total is the
// driver's. The runtime answers cudaMemGetInfo with cuMemGetInfo_v2, which
// it fetches through cuGetProcAddress (a statically linked runtime too), so
// this one hook serves both APIs however the program reaches them.
#pragma once

#include <cuda.h>

#include <cstddef>

extern "C" {
// The hook the lookups hand out (driver_interception.cpp).
CUresult asyncshim_hook_mem_get_info(std::size_t* free, std::size_t* total);
}
