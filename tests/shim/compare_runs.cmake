# Runs PROGRAM (a command line, arguments separated by "|") once as is and once
# with LD_PRELOAD=PRELOAD, both with the extra environment ENV ("|"-separated
# NAME=VALUE), and fails unless exit status, standard output and standard error
# are identical (after replacing what matches IGNORE_PATTERN, if given).
# SHIM_LOG, if given, is a regular expression that the shim's own log lines
# ("asyncshim[pid]: ..." on standard error, which a native run cannot have)
# must match; they are then left out of the comparison. With SHIM_LOG_IF, only
# when the native run's output matches it (e.g. it did run out of memory; on
# a machine without a GPU it does not, and the shim must then say nothing).
# With EXPECT_STATUS, the native run must also exit with it: two runs that
# fail the same way are a failure. A "SKIP: " in the native run's standard
# output ends the comparison there (the line is printed for the caller to
# judge); the shim run's output never does, as it is printed with its
# "SKIP: " changed to "SKIP (shim run): ".
#   cmake -DPRELOAD=... -DPROGRAM=... [-DENV=...] [-DIGNORE_PATTERN=...] [-DSHIM_LOG=... [-DSHIM_LOG_IF=...]]
#         [-DEXPECT_STATUS=N] -P compare_runs.cmake
string(REPLACE "|" ";" PROGRAM "${PROGRAM}")
string(REPLACE "|" ";" ENV "${ENV}")
foreach(run native shim)
  set(env_args ${ENV})
  if(run STREQUAL "shim")
    list(APPEND env_args "LD_PRELOAD=${PRELOAD}")
  endif()
  execute_process(
    COMMAND ${CMAKE_COMMAND} -E env ${env_args} ${PROGRAM}
    RESULT_VARIABLE ${run}_status
    OUTPUT_VARIABLE ${run}_out
    ERROR_VARIABLE ${run}_err)
  if(IGNORE_PATTERN)  # e.g. timings, which differ by design
    string(REGEX REPLACE "${IGNORE_PATTERN}" "<ignored>" ${run}_out "${${run}_out}")
  endif()
endforeach()
if(native_out MATCHES "SKIP: ")
  message(STATUS "the native run skipped; nothing compared:\n${native_out}")
  return()
endif()
string(REPLACE "SKIP: " "SKIP (shim run): " shim_out_shown "${shim_out}")
string(REPLACE "SKIP: " "SKIP (shim run): " shim_err_shown "${shim_err}")
set(log_expected FALSE)
if(DEFINED SHIM_LOG)
  set(log_expected TRUE)
  if(DEFINED SHIM_LOG_IF AND NOT native_out MATCHES "${SHIM_LOG_IF}")
    set(log_expected FALSE)
  endif()
endif()
if(log_expected)
  set(log_line "asyncshim\\[[0-9]+\\]: [^\n]*\n")
  string(REGEX MATCHALL "${log_line}" shim_log "${shim_err}")
  string(REGEX REPLACE "${log_line}" "" shim_err "${shim_err}")
  string(JOIN "" shim_log ${shim_log})
  if(NOT shim_log MATCHES "${SHIM_LOG}")
    string(REPLACE "SKIP: " "SKIP (shim run): " shim_log "${shim_log}")
    message(FATAL_ERROR "the shim's log does not match '${SHIM_LOG}':\n${shim_log}")
  endif()
  message(STATUS "the shim's log, as expected:\n${shim_log}")
endif()
message(STATUS "without the shim: exit ${native_status}\n${native_out}${native_err}")
if(NOT native_status STREQUAL shim_status OR NOT native_out STREQUAL shim_out OR NOT native_err STREQUAL shim_err)
  message(FATAL_ERROR "the runs differ.\nwith the shim: exit ${shim_status}\n${shim_out_shown}${shim_err_shown}")
endif()
if(DEFINED EXPECT_STATUS AND NOT native_status STREQUAL EXPECT_STATUS)
  message(FATAL_ERROR "both runs exited ${native_status}, not ${EXPECT_STATUS}: failing the same way is failing")
endif()
message(STATUS "with the shim: identical")
