# cmake --install into a scratch prefix, then build and run a separate project
# that uses find_package(asyncshim).
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DSOURCE_DIR=... -P install_and_consume.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}${err}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
foreach(installed lib/libasyncshim.so lib/libasyncshim_resource.a include/asyncshim/cuda_async_memory_resource.hpp
        lib/cmake/asyncshim/asyncshimConfig.cmake)
  if(NOT EXISTS "${WORK_DIR}/prefix/${installed}")
    message(FATAL_ERROR "not installed: ${installed}")
  endif()
endforeach()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/consumer" -B "${WORK_DIR}/build" "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")
