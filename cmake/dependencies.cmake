# Third-party dependencies: Debian's fmt, spdlog and GoogleTest, and the CUDA
# toolkit in /usr/local/cuda. fmt and spdlog are used header-only, so none of
# their symbols can end up in libasyncshim.so's dynamic symbol table.

set(_asyncshim_hints "")
if(ASYNCSHIM_DEPS_DIR)
  list(APPEND _asyncshim_hints "${ASYNCSHIM_DEPS_DIR}")
endif()

find_path(ASYNCSHIM_FMT_INCLUDE_DIR fmt/format.h HINTS ${_asyncshim_hints} PATH_SUFFIXES include)
find_path(ASYNCSHIM_SPDLOG_INCLUDE_DIR spdlog/spdlog.h HINTS ${_asyncshim_hints} PATH_SUFFIXES include)
if(NOT ASYNCSHIM_FMT_INCLUDE_DIR OR NOT ASYNCSHIM_SPDLOG_INCLUDE_DIR)
  message(FATAL_ERROR
    "fmt and spdlog headers not found: install Debian's libfmt-dev and libspdlog-dev "
    "(scripts/install-deps.sh does), or point ASYNCSHIM_DEPS_DIR at a prefix holding include/fmt and include/spdlog")
endif()

# Header-only fmt and spdlog, with spdlog using the external fmt (as Debian builds it).
add_library(asyncshim_fmt_spdlog INTERFACE)
target_include_directories(asyncshim_fmt_spdlog SYSTEM INTERFACE
  ${ASYNCSHIM_FMT_INCLUDE_DIR} ${ASYNCSHIM_SPDLOG_INCLUDE_DIR})
target_compile_definitions(asyncshim_fmt_spdlog INTERFACE
  FMT_HEADER_ONLY=1 SPDLOG_HEADER_ONLY=1 SPDLOG_FMT_EXTERNAL=1)

find_package(CUDAToolkit REQUIRED)
# The table of hooked functions names CUDA 13.0 ABIs (cuCtxSynchronize_v2,
# the _v2 batch copies) and its name list is written from 13.0's headers.
if(CUDAToolkit_VERSION_MAJOR LESS 13)
  message(FATAL_ERROR "CUDA ${CUDAToolkit_VERSION} found in /usr/local/cuda; asyncshim builds with the CUDA 13 headers "
    "(a program may still use a CUDA 12 runtime)")
endif()

# nvcc is optional: without it the GPU-tier programs are not built (the CPU
# tier and the shim need only the CUDA headers).
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  # Before enable_language, which would otherwise cache the compiler's own
  # default (sm_75 for nvcc 13, JIT-compiled on the H200 at first launch):
  # machine code for the H200 (sm_90) and PTX that other GPUs can compile.
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES "75-virtual;90-real" CACHE STRING "CUDA architectures of the GPU-tier programs")
  endif()
  enable_language(CUDA)
  set(CMAKE_CUDA_STANDARD 17)  # CMake 3.25 does not know nvcc 13's C++20 flag
  set(ASYNCSHIM_HAVE_NVCC ON)
else()
  set(ASYNCSHIM_HAVE_NVCC OFF)
  message(STATUS "nvcc not found: the GPU-tier test programs are not built")
endif()
