# pip install of the project's wheel (pyproject.toml, scripts/python/), into a
# fresh virtual environment and without a package index: the console scripts
# asyncshim and asyncshim-ab, python -m asyncshim, --print-library inside the
# package, a preload under the CUDA driver double, a stripped library that
# links no CUDA library.
#   cmake -DSOURCE_DIR=... -DBUILD_DIR=... -DWORK_DIR=... -DPYTHON=... -DPROBE=... -DDRIVER=... -P wheel.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
include("${CMAKE_CURRENT_LIST_DIR}/run.cmake")
find_program(READELF readelf REQUIRED)

set(venv "${WORK_DIR}/venv")
execute_process(COMMAND "${PYTHON}" -m venv "${venv}" RESULT_VARIABLE status ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PYTHON} -m venv failed (on Debian and Ubuntu it needs the python3-venv package):\n${err}")
endif()
set(pip "${venv}/bin/python" -m pip --disable-pip-version-check --no-input)
run(${pip} wheel --no-index --no-deps "--config-settings=build-dir=${BUILD_DIR}" -w "${WORK_DIR}/out" "${SOURCE_DIR}")
file(GLOB wheel "${WORK_DIR}/out/asyncshim-*.whl")
if(NOT wheel)
  message(FATAL_ERROR "pip wheel made no asyncshim wheel in ${WORK_DIR}/out")
endif()
run(${pip} install --no-index "${wheel}")

run("${venv}/bin/asyncshim" --version)
expect("${output}" "^asyncshim [0-9]+\\.[0-9]+\\.[0-9]+")
run("${venv}/bin/python" -m asyncshim --version)
expect("${output}" "^asyncshim [0-9]+\\.[0-9]+\\.[0-9]+")
run("${venv}/bin/asyncshim" --print-library)
string(STRIP "${output}" library)
string(FIND "${library}" "${venv}/" at)
if(NOT at EQUAL 0 OR NOT library MATCHES "/site-packages/asyncshim/prefix/lib/libasyncshim.so$")
  message(FATAL_ERROR "--print-library printed ${library}, not the library inside the package in ${venv}")
endif()
run("${venv}/bin/python" -c "import asyncshim\nprint(asyncshim.library_path())")
string(STRIP "${output}" from_python)
if(NOT from_python STREQUAL library)
  message(FATAL_ERROR "asyncshim.library_path() is ${from_python}, the launcher prints ${library}")
endif()
run(${READELF} -S "${library}")
if(output MATCHES "\\.debug_info|\\.symtab")
  message(FATAL_ERROR "the wheel's libasyncshim.so is not stripped")
endif()
run(${READELF} -d "${library}")
if(output MATCHES "NEEDED[^\n]*libcuda")
  message(FATAL_ERROR "the wheel's libasyncshim.so links a CUDA library:\n${output}")
endif()
# The packaged shim at work, and the validation the launcher does with it.
run("${venv}/bin/asyncshim" -- "${PROBE}" "${DRIVER}" basic)
expect("${output}" "summary: allocations 4 pool 4 driver 0")
execute_process(COMMAND "${venv}/bin/asyncshim" --initial-pool-size banana -- true RESULT_VARIABLE status
                ERROR_VARIABLE err)
if(NOT status EQUAL 2 OR NOT err MATCHES "--initial-pool-size='banana' is not a valid size")
  message(FATAL_ERROR "a bad value through the wheel's launcher: exit ${status}, said:\n${err}")
endif()
run("${venv}/bin/asyncshim-ab" --help)
expect("${output}" "usage: asyncshim-ab")
# The replay, with its replayer beside the launcher's tools (it needs the CUDA
# runtime only to run a replay).
run("${venv}/bin/asyncshim-replay" --help)
expect("${output}" "usage: asyncshim-replay")
get_filename_component(prefix "${library}" DIRECTORY)
get_filename_component(prefix "${prefix}" DIRECTORY)
if(NOT EXISTS "${prefix}/libexec/asyncshim/asyncshim-replayer" OR NOT EXISTS "${prefix}/bin/asyncshim-replay")
  message(FATAL_ERROR "the wheel has no asyncshim-replay and asyncshim-replayer in ${prefix}")
endif()
execute_process(COMMAND "${venv}/bin/asyncshim-replay" "${WORK_DIR}/no-such-log.csv" RESULT_VARIABLE status
                ERROR_VARIABLE err)
if(status EQUAL 0 OR NOT err MATCHES "no-such-log.csv")
  message(FATAL_ERROR "asyncshim-replay of a missing log: exit ${status}, said:\n${err}")
endif()

# What users run: pip install . from the checkout, which configures and builds
# a tree of its own (no tests) in a temporary folder.
if(FROM_SOURCE)
  set(fresh "${WORK_DIR}/fresh-venv")
  run("${PYTHON}" -m venv "${fresh}")
  run("${fresh}/bin/python" -m pip --disable-pip-version-check --no-input install --no-index "${SOURCE_DIR}")
  run("${fresh}/bin/asyncshim" --version)
  expect("${output}" "^asyncshim [0-9]+\\.[0-9]+\\.[0-9]+")
  run("${fresh}/bin/asyncshim" -- "${PROBE}" "${DRIVER}" basic)
  expect("${output}" "summary: allocations 4 pool 4 driver 0")
endif()
message(STATUS "wheel: ${wheel} built, installed into ${venv} and used")
