# cmake --install into a scratch prefix, then build and run a separate project
# that uses find_package(asyncshim), read the pkg-config file, and uninstall.
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DSOURCE_DIR=... -P install_and_consume.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
include("${CMAKE_CURRENT_LIST_DIR}/run.cmake")
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
foreach(installed lib/libasyncshim.so lib/libasyncshim_resource.a include/asyncshim/cuda_async_memory_resource.hpp
        lib/cmake/asyncshim/asyncshimConfig.cmake lib/pkgconfig/asyncshim.pc share/doc/asyncshim/LICENSE)
  if(NOT EXISTS "${WORK_DIR}/prefix/${installed}")
    message(FATAL_ERROR "not installed: ${installed}")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/consumer" -B "${WORK_DIR}/build" "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")

# Without CUDA: the path and the launcher, no resource; asking for the
# resource component then fails.
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/path_consumer" -B "${WORK_DIR}/path_build" "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix"
    -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON)
file(READ "${WORK_DIR}/path_build/preload.txt" preload)
string(STRIP "${preload}" preload)
if(NOT EXISTS "${preload}")
  message(FATAL_ERROR "$<TARGET_FILE:asyncshim::preload> is ${preload}, which does not exist")
endif()
file(WRITE "${WORK_DIR}/needs_resource/CMakeLists.txt"
     "cmake_minimum_required(VERSION 3.25)\nproject(p NONE)\nfind_package(asyncshim REQUIRED COMPONENTS resource)\n")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${WORK_DIR}/needs_resource" -B "${WORK_DIR}/needs_resource/build"
                        "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON
                RESULT_VARIABLE status OUTPUT_QUIET ERROR_QUIET)
if(status EQUAL 0)
  message(FATAL_ERROR "find_package(asyncshim COMPONENTS resource) succeeded without the CUDA toolkit")
endif()

# pkg-config finds the preload library, the launcher and the headers where
# they were installed.
find_program(PKG_CONFIG NAMES pkg-config pkgconf)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config is not installed (scripts/install-deps.sh installs pkgconf)")
endif()
function(pkg_config_value result)
  run(${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${WORK_DIR}/prefix/lib/pkgconfig" ${PKG_CONFIG} ${ARGN} asyncshim)
  string(STRIP "${output}" output)
  set(${result} "${output}" PARENT_SCOPE)
endfunction()
foreach(variable preload launcher)
  pkg_config_value(path --variable=${variable})
  get_filename_component(path "${path}" REALPATH)
  set(expected "${WORK_DIR}/prefix/lib/libasyncshim.so")
  if(variable STREQUAL "launcher")
    set(expected "${WORK_DIR}/prefix/bin/asyncshim")
  endif()
  get_filename_component(expected "${expected}" REALPATH)
  if(NOT path STREQUAL expected)
    message(FATAL_ERROR "pkg-config --variable=${variable}: ${path}, expected ${expected}")
  endif()
endforeach()
pkg_config_value(cflags --cflags)
if(NOT cflags MATCHES "-I.*include")
  message(FATAL_ERROR "pkg-config --cflags: ${cflags}")
endif()
pkg_config_value(version --modversion)
message(STATUS "pkg-config: asyncshim ${version}, preload ${expected}")

# And the way back: the uninstall target removes what cmake --install put there.
run(${CMAKE_COMMAND} --build "${BUILD_DIR}" --target uninstall)
foreach(installed lib/libasyncshim.so bin/asyncshim include/asyncshim/cuda_async_memory_resource.hpp
        lib/pkgconfig/asyncshim.pc)
  if(EXISTS "${WORK_DIR}/prefix/${installed}")
    message(FATAL_ERROR "uninstall left ${installed}")
  endif()
endforeach()
