# ASYNCSHIM_SANITIZE=ON: the whole build (libraries, the shim, the CUDA test
# doubles, every test program) with AddressSanitizer and
# UndefinedBehaviorSanitizer. scripts/test.sh builds such a tree next to the
# normal one ("<build>-sanitize") and runs the CPU tier in it (ctest -LE gpu).
#
# How the tests run under it, for every test, including ones added later:
#  - Test programs are instrumented and linked with libasan/libubsan, so
#    they need nothing special.
#  - libasyncshim.so (and the other preloaded test libraries) are
#    instrumented too, and the tests preload them into programs of all kinds:
#    our instrumented test programs, but also /bin/true, sh and python3. The
#    ASan runtime then is not the first library in the process (it comes in
#    as the shim's NEEDED entry), which ASan refuses by default; with
#    verify_asan_link_order=0 it runs anyway. In an instrumented program
#    libasan is still loaded before libc (it is the program's first NEEDED
#    entry), so its malloc is the one used and nothing is lost; in an
#    uninstrumented program (python3) libc's malloc comes first, so ASan
#    knows the blocks the shim gets with operator new (libasan's) but not
#    those of malloc; stack and globals are checked all the same. The
#    alternative, putting libasan first in LD_PRELOAD, cannot be done for
#    the many tests whose scripts set LD_PRELOAD themselves
#    (compare_runs.cmake, check_stats.py, the launcher, ...), and would report
#    python3's and sh's own leaks as ours.
#  - These settings reach every test through the environment of the ctest
#    process itself: the build tree's top CTestTestfile.cmake includes
#    sanitizer_environment.cmake (TEST_INCLUDE_FILES), which sets ASAN_OPTIONS
#    and UBSAN_OPTIONS with set(ENV{...}) before any test starts, and tests
#    (and the scripts they run) pass their environment on. Leak detection
#    stays on.
#  - Tests of the link-level shape of the shipped libraries (exports, NEEDED
#    entries, RPATH, load-time constructors) are not run here: the
#    instrumented libraries differ from the shipped ones by construction
#    (libasan/libubsan in NEEDED; less inlining, so that template
#    instantiations over an exported type become exported symbols), and the
#    normal tree checks the real ones. Nor are the tests whose program
#    replaces malloc (AddressSanitizer replaces it too).
#    ASYNCSHIM_SANITIZE_SKIPPED_TESTS lists them with the reason; ctest
#    reports them as "Not Run (Disabled)".
option(ASYNCSHIM_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer (the CPU tier's sanitizer run)" OFF)

# name|reason, one per test. Set at ctest time (the tests are defined in
# their own directories, which this file does not edit).
set(ASYNCSHIM_SANITIZE_SKIPPED_TESTS
  "shim.library_hygiene|the exports, NEEDED entries and load-time constructors of the shipped libasyncshim.so, checked in the normal tree: the instrumented one needs libasan and libubsan"
  "cuda_double.driver_library|the exports, NEEDED entries and RPATH of the CUDA doubles, checked in the normal tree: instrumented, they need libasan and libubsan and inline less, so that std:: instantiations over cuda_double types can become exports"
  "shim.logging_without_host_memory|its program replaces malloc to make the shim's host allocations fail, and AddressSanitizer replaces malloc too: it runs in the normal tree"
  "shim.logging_with_host_memory|the control run of the program above, which replaces malloc as AddressSanitizer does: it runs in the normal tree")

if(NOT ASYNCSHIM_SANITIZE)
  return()
endif()

set(_asyncshim_sanitize_compile -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
set(_asyncshim_sanitize_link -fsanitize=address,undefined)

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "${_asyncshim_sanitize_compile}")
list(JOIN CMAKE_REQUIRED_FLAGS " " CMAKE_REQUIRED_FLAGS)
set(CMAKE_REQUIRED_LINK_OPTIONS ${_asyncshim_sanitize_link})
check_cxx_source_compiles("int main() { return 0; }" ASYNCSHIM_SANITIZERS_LINK)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(NOT ASYNCSHIM_SANITIZERS_LINK)
  message(FATAL_ERROR "ASYNCSHIM_SANITIZE=ON, but ${CMAKE_CXX_COMPILER} cannot build with "
                      "-fsanitize=address,undefined (Debian: the compiler's libasan and libubsan packages)")
endif()

# C and C++ only: nvcc (the GPU tier's .cu files) takes no -fsanitize. Its
# executables are linked by the host compiler, so the link options apply.
foreach(flag IN LISTS _asyncshim_sanitize_compile)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:${flag}>)
endforeach()
add_link_options(${_asyncshim_sanitize_link})

# ctest-time settings (see above). The value of ASAN_OPTIONS / UBSAN_OPTIONS
# already in the environment is kept, after ours, so it can override them.
# intercept_tls_get_addr=0: the sanitizer runtime's tracking of dynamic TLS
# (thread_local in a dlopen()ed library: the CUDA double inside
# tests/shim's plugin) misreads glibc's layout and LeakSanitizer's tracer then
# crashes at exit ("Tracer caught signal 11", google/sanitizers#1322); static
# TLS is still scanned for pointers.
set(ASYNCSHIM_SANITIZE_ASAN_OPTIONS "verify_asan_link_order=0:intercept_tls_get_addr=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1")
set(ASYNCSHIM_SANITIZE_UBSAN_OPTIONS "print_stacktrace=1:halt_on_error=1")
file(CONFIGURE OUTPUT "${PROJECT_BINARY_DIR}/sanitizer_environment.cmake" CONTENT [[
# Generated by cmake/sanitizers.cmake: the environment of every test of this
# (ASYNCSHIM_SANITIZE=ON) build tree, set in the ctest process.
set(_asan "@ASYNCSHIM_SANITIZE_ASAN_OPTIONS@")
set(_ubsan "@ASYNCSHIM_SANITIZE_UBSAN_OPTIONS@")
if(DEFINED ENV{ASAN_OPTIONS} AND NOT "$ENV{ASAN_OPTIONS}" STREQUAL "")
  string(APPEND _asan ":$ENV{ASAN_OPTIONS}")
endif()
if(DEFINED ENV{UBSAN_OPTIONS} AND NOT "$ENV{UBSAN_OPTIONS}" STREQUAL "")
  string(APPEND _ubsan ":$ENV{UBSAN_OPTIONS}")
endif()
set(ENV{ASAN_OPTIONS} "${_asan}")
set(ENV{UBSAN_OPTIONS} "${_ubsan}")
]] @ONLY)
set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY TEST_INCLUDE_FILES
  "${PROJECT_BINARY_DIR}/sanitizer_environment.cmake")

# Disabling tests has to happen after ctest has read their definitions, i.e.
# in the CTestTestfile.cmake it reads last: the last subdirectory, depth
# first. Found once everything is configured.
function(_asyncshim_sanitize_skip_tests)
  if(NOT ASYNCSHIM_BUILD_TESTS)
    return()
  endif()
  # Every test defined at configure time, to catch a stale entry.
  set(all_tests "")
  set(pending "${PROJECT_SOURCE_DIR}")
  while(pending)
    list(POP_FRONT pending dir)
    get_property(tests DIRECTORY "${dir}" PROPERTY TESTS)
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    list(APPEND all_tests ${tests})
    list(APPEND pending ${subdirs})
  endwhile()
  set(lines "# Generated by cmake/sanitizers.cmake: tests that do not apply to an instrumented build.\n")
  foreach(entry IN LISTS ASYNCSHIM_SANITIZE_SKIPPED_TESTS)
    string(REGEX REPLACE "\\|.*" "" name "${entry}")
    string(REGEX REPLACE "^[^|]*\\|" "" reason "${entry}")
    if(NOT name IN_LIST all_tests)
      message(WARNING "ASYNCSHIM_SANITIZE_SKIPPED_TESTS (cmake/sanitizers.cmake) names ${name}, which is no test")
    endif()
    string(APPEND lines "# ${name}: ${reason}\nset_tests_properties(\"${name}\" PROPERTIES DISABLED TRUE)\n")
  endforeach()
  file(WRITE "${PROJECT_BINARY_DIR}/sanitizer_skipped_tests.cmake" "${lines}")
  set(dir "${PROJECT_SOURCE_DIR}")
  while(TRUE)
    get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
    if(NOT subdirs)
      break()
    endif()
    list(GET subdirs -1 dir)
  endwhile()
  set_property(DIRECTORY "${dir}" APPEND PROPERTY TEST_INCLUDE_FILES
    "${PROJECT_BINARY_DIR}/sanitizer_skipped_tests.cmake")
endfunction()
cmake_language(DEFER DIRECTORY "${PROJECT_SOURCE_DIR}" CALL _asyncshim_sanitize_skip_tests)
