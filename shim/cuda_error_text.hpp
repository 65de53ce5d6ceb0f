// CUDA errors for people: "CUDA_ERROR_OUT_OF_MEMORY (2: out of memory)", by
// the driver's names (CUresult and cudaError_t codes agree for every error
// the shim reports), with the number for those who search for it.
#pragma once

#include <string>

namespace asyncshim::shim {

[[nodiscard]] std::string cuda_error_text(int code);

}  // namespace asyncshim::shim
