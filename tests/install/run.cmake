# Included by the install tests' scripts.
# expect(TEXT PATTERN): stops the test unless TEXT matches PATTERN.
function(expect text pattern)
  if(NOT text MATCHES "${pattern}")
    message(FATAL_ERROR "expected ${pattern} in:\n${text}")
  endif()
endfunction()

# run(COMMAND...): runs it, stops the test with its output if it fails, and
# leaves what it printed on standard output in `output` (also logged).
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed: ${ARGN}\n${out}${err}")
  endif()
  message(STATUS "${out}")
  set(output "${out}" PARENT_SCOPE)
endfunction()
