// Peer access as the program enables and disables it, applied to the pools:
// natively cudaMalloc memory follows cuCtxEnablePeerAccess; pool memory
// follows only cudaMemPoolSetAccess (README, "Peer access").
#pragma once

#include <cuda.h>

namespace asyncshim::shim {

// After a successful cuCtxEnablePeerAccess / cuCtxDisablePeerAccess of the
// current context to `peer`: the owner's pool follows (peer_access.hpp holds
// what is granted, for pools made later).
void peer_access_changed(CUcontext peer, bool enabled) noexcept;

}  // namespace asyncshim::shim
