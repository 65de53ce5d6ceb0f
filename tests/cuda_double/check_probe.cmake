# Runs static_runtime_probe and checks its output.
#   cmake -DPROBE=<probe> -DLIBRARY=<libcuda.so.1> -DCHECK=<check> [-DPRELOAD=<lib>]
#         "-DEXPECT=<line>|<line>|..." -P check_probe.cmake
# Passes when the probe exits 0 and prints every expected line (whole lines, in
# any order).
cmake_minimum_required(VERSION 3.25)
set(command "${PROBE}" "${LIBRARY}" "${CHECK}")
if(PRELOAD)
  set(command "${CMAKE_COMMAND}" -E env "LD_PRELOAD=${PRELOAD}" ${command})
endif()
execute_process(COMMAND ${command} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "static_runtime_probe ${CHECK} exited with ${rc}")
endif()
string(REPLACE "|" ";" expected "${EXPECT}")
string(REPLACE "\n" ";" lines "${out}")
foreach(line IN LISTS expected)
  list(FIND lines "${line}" found)
  if(found EQUAL -1)
    message(FATAL_ERROR "missing line: '${line}'")
  endif()
endforeach()
