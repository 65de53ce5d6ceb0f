#include "cuda_check.hpp"

#include <cstring>

namespace asyncshim::detail {

std::string describe_cuda_error(cudaError_t error)
{
  char const* name = cudaGetErrorName(error);
  char const* text = cudaGetErrorString(error);
  std::string out = name != nullptr ? name : "cudaError " + std::to_string(static_cast<int>(error));
  if (text != nullptr && std::strlen(text) > 0) { out += std::string{" ("} + text + ")"; }
  return out;
}

void throw_cuda_error(cudaError_t error, char const* call, char const* file, int line)
{
  (void)cudaGetLastError();  // clear it: the exception now carries the failure
  char const* base = std::strrchr(file, '/');
  std::string const where = std::string{base != nullptr ? base + 1 : file} + ":" + std::to_string(line);
  std::string const what = std::string{call} + " failed: " + describe_cuda_error(error) + " at " + where;
  if (error == cudaErrorMemoryAllocation) { throw out_of_memory{"out of memory: " + what, error}; }
  throw cuda_error{"CUDA error: " + what, error};
}

}  // namespace asyncshim::detail
