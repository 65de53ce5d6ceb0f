# Runs PROGRAM (a command line, arguments separated by "|") with the extra
# environment ENV ("|"-separated NAME=VALUE; put LD_PRELOAD=... there for a run
# with the shim) and fails unless it exits 0, its standard output matches every
# regular expression STDOUT_1, STDOUT_2, ... and its standard error every
# STDERR_1, STDERR_2, ... (numbered from 1, without gaps). With STDERR_IF (a
# regular expression) the STDERR_<n> checks apply only when standard output
# matches it. A run whose standard output holds "SKIP: " and that exits 0 is
# not checked further: the line is printed, and the caller (tests/gpu/gpu_test.py)
# judges whether that skip is allowed where a device exists.
#   cmake -DPROGRAM=... [-DENV=...] [-DSTDOUT_1=...] [-DSTDERR_1=...] [-DSTDERR_IF=...] -P check_output.cmake
string(REPLACE "|" ";" PROGRAM "${PROGRAM}")
string(REPLACE "|" ";" ENV "${ENV}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ${ENV} ${PROGRAM}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
message(STATUS "exit ${status}\nstandard output:\n${out}standard error:\n${err}")
if(out MATCHES "SKIP: " AND status STREQUAL "0")
  return()
endif()
set(problems)
if(NOT status STREQUAL "0")
  string(APPEND problems "exit status ${status}, not 0\n")
endif()
foreach(stream STDOUT STDERR)
  if(stream STREQUAL "STDOUT")
    set(text "${out}")
  else()
    set(text "${err}")
    if(DEFINED STDERR_IF AND NOT out MATCHES "${STDERR_IF}")
      message(STATUS "standard error not checked: standard output does not match '${STDERR_IF}'")
      break()
    endif()
  endif()
  set(n 1)
  while(DEFINED ${stream}_${n})
    if(NOT text MATCHES "${${stream}_${n}}")
      string(REPLACE "\n" "\\n" shown "${${stream}_${n}}")
      string(APPEND problems "${stream} does not match '${shown}'\n")
    endif()
    math(EXPR n "${n} + 1")
  endwhile()
endforeach()
if(problems)
  message(FATAL_ERROR "${problems}")
endif()
message(STATUS "as expected")
