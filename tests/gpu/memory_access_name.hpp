// The name the GPU probes print for a memory access flag.
#pragma once

#include <cuda_runtime_api.h>

inline char const* access_name(cudaMemAccessFlags f)
{
  switch (f) {
    case cudaMemAccessFlagsProtNone: return "none";
    case cudaMemAccessFlagsProtRead: return "read";
    case cudaMemAccessFlagsProtReadWrite: return "read-write";
  }
  return "unknown";
}
