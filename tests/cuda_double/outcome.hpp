// outcome.hpp: the result of the CUDA TEST DOUBLES' shared model operations
// (model.hpp, operations.hpp), in neither API's vocabulary.
//
// INTERNAL. The model serves both the runtime double (cudaError_t) and the
// driver double (CUresult); it answers with an operation_outcome and each API maps it to
// its own error code (to_cuda_error in runtime_api.cpp, to_cu_result in
// driver_api.cpp), so neither API's codes leak into the other.
#pragma once

namespace cuda_double {

enum class operation_outcome {
  ok,
  invalid_value,    // a bad argument, or a handle/pointer the model does not know
  out_of_memory,    // the device (or the pool) has not enough memory left
  invalid_device,   // not a device ordinal of the model
  not_supported,    // memory pools are configured off, or an unsupported handle type
  invalid_handle,   // a stream that is not a live one
  invalid_context,  // a special stream needs a current context and there is none
  // Stream capture (see cuda_double.hpp).
  capture_unsupported,   // not allowed during capture (a prohibited potentially unsafe call, ...)
  capture_implicit,      // a prohibited legacy-stream call while a blocking stream captures
  capture_invalidated,   // work for, or the end of, an invalidated capture
  capture_wrong_thread,  // ending a non-relaxed capture from another thread
  capture_merge,         // waiting on an event of another ongoing capture
  captured_event,        // query/sync/wait of an event last recorded in a capture
  illegal_state,         // beginning a capture twice, ending one that is not there
  // Peer access and sharing (see cuda_double.hpp).
  peer_unsupported,      // the devices cannot access each other (CUDA_DOUBLE_NO_PEER)
  peer_already_enabled,  // enabling peer access twice
  peer_not_enabled,      // disabling peer access that is not enabled
  not_permitted,         // exporting a fabric handle without IMEX (CUDA_DOUBLE_FABRIC_OK unset)
  not_found,             // cuMemGetAddressRange of memory that is no allocation's
  not_ready,             // a query of a stream marked busy (cuda_double_set_stream_busy)
};

}  // namespace cuda_double
