# ASYNCSHIM_SANITIZE=ON (or address): the whole build (libraries, the shim,
# the CUDA test doubles, every test program) with AddressSanitizer and
# UndefinedBehaviorSanitizer; ASYNCSHIM_SANITIZE=thread: the same with
# ThreadSanitizer (below the ASan notes). scripts/test.sh builds both trees
# next to the normal one ("<build>-sanitize", "<build>-tsan") and runs the CPU
# tier in each (ctest -LE gpu).
#
# How the tests run under ASan, for every test, including ones added later:
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
#
# Under TSan, the same way (TSAN_OPTIONS from the ctest process), except:
#  - In an instrumented program libtsan comes before libc, so its
#    interceptors (threads, locks, malloc) serve the preloaded shim too and
#    races in the shim and the doubles are found. The exported dlsym and the
#    function it calls first are not instrumented: TSan's runtime looks its
#    interceptors up with dlsym while it starts, and crashes on instrumented
#    code then.
#  - In an uninstrumented program (/bin/true, sh, python3) libtsan comes after
#    libc: the shim's accesses are instrumented but its locks and threads are
#    libc's, unseen. The tests there are single-threaded and check that the
#    shim changes nothing; they run, and would crash if the shim started a
#    thread there. Putting libtsan first in LD_PRELOAD cannot be done, for
#    the reason given above for ASan.
#  - ASYNCSHIM_SANITIZE_THREAD_SKIPPED_TESTS: the link-level and malloc tests
#    above, for the same reasons, and the tests TSan's runtime changes the
#    outcome of (its own thread) or that build nothing instrumented.
set(ASYNCSHIM_SANITIZE OFF CACHE STRING
    "Build with sanitizers (the CPU tier's sanitizer runs): OFF, ON or address (AddressSanitizer and UndefinedBehaviorSanitizer), thread (ThreadSanitizer)")
set_property(CACHE ASYNCSHIM_SANITIZE PROPERTY TYPE STRING)  # was a BOOL option in older trees
set_property(CACHE ASYNCSHIM_SANITIZE PROPERTY STRINGS OFF ON address thread)
string(TOLOWER "${ASYNCSHIM_SANITIZE}" _asyncshim_sanitize)
if(_asyncshim_sanitize STREQUAL "thread")
  set(ASYNCSHIM_SANITIZE_KIND thread)
elseif(_asyncshim_sanitize MATCHES "^(address|on|yes|true|y|1)$")
  set(ASYNCSHIM_SANITIZE_KIND address)
elseif(NOT ASYNCSHIM_SANITIZE)
  set(ASYNCSHIM_SANITIZE_KIND "")
else()
  message(FATAL_ERROR "ASYNCSHIM_SANITIZE=${ASYNCSHIM_SANITIZE}: expected OFF, ON, address or thread")
endif()

# name|reason, one per test. Set at ctest time (the tests are defined in
# their own directories, which this file does not edit).
set(ASYNCSHIM_SANITIZE_SKIPPED_TESTS
  "shim.library_hygiene|the exports, NEEDED entries and load-time constructors of the shipped libasyncshim.so, checked in the normal tree: the instrumented one needs libasan and libubsan"
  "cuda_double.driver_library|the exports, NEEDED entries and RPATH of the CUDA doubles, checked in the normal tree: instrumented, they need libasan and libubsan and inline less, so that std:: instantiations over cuda_double types can become exports"
  "shim.logging_without_host_memory|its program replaces malloc to make the shim's host allocations fail, and AddressSanitizer replaces malloc too: it runs in the normal tree"
  "shim.logging_with_host_memory|the control run of the program above, which replaces malloc as AddressSanitizer does: it runs in the normal tree")
# The same for the ASYNCSHIM_SANITIZE=thread tree.
set(ASYNCSHIM_SANITIZE_THREAD_SKIPPED_TESTS
  "shim.library_hygiene|the exports, NEEDED entries and load-time constructors of the shipped libasyncshim.so, checked in the normal tree: the instrumented one needs libtsan"
  "cuda_double.driver_library|the exports, NEEDED entries and RPATH of the CUDA doubles, checked in the normal tree: instrumented, they need libtsan and inline less, so that std:: instantiations over cuda_double types can become exports"
  "shim.logging_without_host_memory|its program replaces malloc to make the shim's host allocations fail, and ThreadSanitizer replaces malloc too (the program crashes): it runs in the normal tree"
  "shim.logging_with_host_memory|the control run of the program above, which replaces malloc as ThreadSanitizer does: it runs in the normal tree"
  "shim.last_thread|ThreadSanitizer's runtime keeps a thread of its own for the life of the process, which the shim's threads count as a program thread at work, so they never find themselves the last ones: a program whose main thread calls pthread_exit does not end. It runs in the normal and AddressSanitizer trees"
  "install.wheel.from_source|pip builds a libasyncshim.so of its own from the checkout, uninstrumented (minutes on two cores): nothing of it runs under ThreadSanitizer, and the normal tree runs it"
  "shim.idle_release|a busy loop must call cudaMalloc more often than every 100 ms, which ThreadSanitizer's slowdown on a loaded machine does not always allow (it failed so once): it runs in the normal and AddressSanitizer trees")

if(NOT ASYNCSHIM_SANITIZE_KIND)
  return()
endif()

if(ASYNCSHIM_SANITIZE_KIND STREQUAL "thread")
  set(_asyncshim_sanitize_compile -fsanitize=thread -fno-omit-frame-pointer)
  set(ASYNCSHIM_SANITIZE_LINK_OPTIONS -fsanitize=thread)
  set(_asyncshim_sanitize_package libtsan)
else()
  set(_asyncshim_sanitize_compile -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  set(ASYNCSHIM_SANITIZE_LINK_OPTIONS -fsanitize=address,undefined)
  set(_asyncshim_sanitize_package "libasan and libubsan")
endif()
set(_asyncshim_sanitize_link ${ASYNCSHIM_SANITIZE_LINK_OPTIONS})

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS "${_asyncshim_sanitize_compile}")
list(JOIN CMAKE_REQUIRED_FLAGS " " CMAKE_REQUIRED_FLAGS)
set(CMAKE_REQUIRED_LINK_OPTIONS ${_asyncshim_sanitize_link})
# The result is cached per kind: a tree switched from one kind to the other checks again.
check_cxx_source_compiles("int main() { return 0; }" ASYNCSHIM_SANITIZERS_LINK_${ASYNCSHIM_SANITIZE_KIND})
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(NOT ASYNCSHIM_SANITIZERS_LINK_${ASYNCSHIM_SANITIZE_KIND})
  message(FATAL_ERROR "ASYNCSHIM_SANITIZE=${ASYNCSHIM_SANITIZE}, but ${CMAKE_CXX_COMPILER} cannot build with "
                      "${_asyncshim_sanitize_link} (Debian: the compiler's ${_asyncshim_sanitize_package} packages)")
endif()

# C and C++ only: nvcc (the GPU tier's .cu files) takes no -fsanitize. Its
# executables are linked by the host compiler, so the link options apply.
foreach(flag IN LISTS _asyncshim_sanitize_compile)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:${flag}>)
endforeach()
add_link_options(${_asyncshim_sanitize_link})

# ctest-time settings (see above): VARIABLE|value, one per runtime. The value
# already in the environment is kept, after ours, so it can override them.
if(ASYNCSHIM_SANITIZE_KIND STREQUAL "thread")
  # halt_on_error=1: the first report fails the test (exit code 66), as
  # -fno-sanitize-recover does under UBSan. second_deadlock_stack=1: both
  # stacks of a lock-order inversion. The suppressions are only for code that
  # is not ours, each with its reason (tests/tsan.supp).
  set(_asyncshim_sanitize_environment
    "TSAN_OPTIONS|halt_on_error=1:second_deadlock_stack=1:suppressions=${PROJECT_SOURCE_DIR}/tests/tsan.supp")
else()
  # intercept_tls_get_addr=0: the sanitizer runtime's tracking of dynamic TLS
  # (thread_local in a dlopen()ed library: the CUDA double inside
  # tests/shim's plugin) misreads glibc's layout and LeakSanitizer's tracer then
  # crashes at exit ("Tracer caught signal 11", google/sanitizers#1322); static
  # TLS is still scanned for pointers.
  set(_asyncshim_sanitize_environment
    "ASAN_OPTIONS|verify_asan_link_order=0:intercept_tls_get_addr=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1"
    "UBSAN_OPTIONS|print_stacktrace=1:halt_on_error=1")
endif()
string(CONCAT _lines "# Generated by cmake/sanitizers.cmake: the environment of every test of this\n"
                     "# (ASYNCSHIM_SANITIZE=${ASYNCSHIM_SANITIZE}) build tree, set in the ctest process.\n")
foreach(entry IN LISTS _asyncshim_sanitize_environment)
  string(REGEX REPLACE "\\|.*" "" name "${entry}")
  string(REGEX REPLACE "^[^|]*\\|" "" value "${entry}")
  string(APPEND _lines
    "set(_value [==[${value}]==])\n"
    "if(DEFINED ENV{${name}} AND NOT \"\$ENV{${name}}\" STREQUAL \"\")\n"
    "  string(APPEND _value \":\$ENV{${name}}\")\n"
    "endif()\n"
    "set(ENV{${name}} \"\${_value}\")\n")
endforeach()
file(WRITE "${PROJECT_BINARY_DIR}/sanitizer_environment.cmake" "${_lines}")
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
  if(ASYNCSHIM_SANITIZE_KIND STREQUAL "thread")
    set(skipped ${ASYNCSHIM_SANITIZE_THREAD_SKIPPED_TESTS})
  else()
    set(skipped ${ASYNCSHIM_SANITIZE_SKIPPED_TESTS})
  endif()
  foreach(entry IN LISTS skipped)
    string(REGEX REPLACE "\\|.*" "" name "${entry}")
    string(REGEX REPLACE "^[^|]*\\|" "" reason "${entry}")
    if(NOT name IN_LIST all_tests)
      message(WARNING "The skipped tests of ASYNCSHIM_SANITIZE=${ASYNCSHIM_SANITIZE} (cmake/sanitizers.cmake) name ${name}, which is no test")
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
