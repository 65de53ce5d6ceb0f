# config.fuzz: runs the libFuzzer target for a bounded time on a copy of the
# seed corpus (the copy lives in the build tree and keeps what the fuzzer
# finds, so later runs start from there), and fails on any crash, leak, UBSan
# or ASan report, time-out (-timeout: one input taking longer) or memory
# blow-up (-rss_limit_mb).
#   cmake -DFUZZER=... -DSEEDS=dir -DDICTIONARY=file -DWORK_DIR=dir -DSECONDS=n -P run_fuzzer.cmake
set(corpus "${WORK_DIR}/corpus")
set(artifacts "${WORK_DIR}/artifacts")
file(MAKE_DIRECTORY "${corpus}" "${artifacts}")
file(GLOB seeds "${SEEDS}/*")
file(COPY ${seeds} DESTINATION "${corpus}")

# Whatever the caller's environment says, reports are fatal and leaks count.
set(ENV{ASAN_OPTIONS} "detect_leaks=1:abort_on_error=0:allocator_may_return_null=0")
set(ENV{UBSAN_OPTIONS} "print_stacktrace=1:halt_on_error=1")

set(command "${FUZZER}"
  -max_total_time=${SECONDS} -timeout=5 -rss_limit_mb=2048 -max_len=4096
  "-dict=${DICTIONARY}" -print_final_stats=1 "-artifact_prefix=${artifacts}/" "${corpus}")
string(TIMESTAMP started "%s")
execute_process(COMMAND ${command}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE output ERROR_VARIABLE output
  ECHO_OUTPUT_VARIABLE ECHO_ERROR_VARIABLE)
string(TIMESTAMP finished "%s")
math(EXPR elapsed "${finished} - ${started}")

file(REMOVE "${WORK_DIR}/last_run.txt")
list(JOIN command " " command_line)
set(reproduce "Reproduce with: ${FUZZER} <the saved input> (artifacts in ${artifacts}); fuzz longer with: ${command_line}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "config.fuzz: the fuzzer stopped with status ${status} after ${elapsed} s (crash, leak, sanitizer report, time-out or out of memory; see above). ${reproduce}")
endif()
# Belt and braces: a report must never pass, even if something let it recover.
if(output MATCHES "(ERROR: (AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|libFuzzer)|runtime error:|SUMMARY: [A-Za-z]+Sanitizer)")
  message(FATAL_ERROR "config.fuzz: the fuzzer exited 0 but its output holds a report ('${CMAKE_MATCH_1}'). ${reproduce}")
endif()
if(NOT output MATCHES "Done ([0-9]+) runs in ([0-9]+) second")
  message(FATAL_ERROR "config.fuzz: the fuzzer did not say how many inputs it ran")
endif()
set(runs ${CMAKE_MATCH_1})
file(GLOB corpus_files "${corpus}/*")
list(LENGTH corpus_files corpus_size)
set(summary "config.fuzz: ${runs} inputs in ${elapsed} s, no crash, leak, hang or sanitizer report; corpus now ${corpus_size} inputs")
file(WRITE "${WORK_DIR}/last_run.txt" "${summary}\n")  # ctest shows no output of a passing test
message(STATUS "${summary}")
