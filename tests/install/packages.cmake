# The .deb and .tar.gz cpack makes: built, installed into a scratch root with
# dpkg (no system change), used there (the launcher's version, its library,
# a preload under the CUDA test double), stripped, and removed again.
#   cmake -DBUILD_DIR=... -DWORK_DIR=... -DPROBE=... -DDRIVER=... -P packages.cmake
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
include("${CMAKE_CURRENT_LIST_DIR}/run.cmake")

get_filename_component(cmake_bin "${CMAKE_COMMAND}" DIRECTORY)
find_program(CPACK cpack HINTS "${cmake_bin}" REQUIRED)
find_program(DPKG dpkg)
find_program(READELF readelf REQUIRED)
if(NOT DPKG)
  message(FATAL_ERROR "dpkg is not installed: the .deb cannot be checked here")
endif()

foreach(generator DEB TGZ)
  run(${CPACK} -G ${generator} -B "${WORK_DIR}/out" --config "${BUILD_DIR}/CPackConfig.cmake")
endforeach()
file(GLOB deb "${WORK_DIR}/out/asyncshim_*.deb")
file(GLOB tgz "${WORK_DIR}/out/asyncshim-*.tar.gz")
if(NOT deb OR NOT tgz)
  message(FATAL_ERROR "cpack made no .deb or no .tar.gz in ${WORK_DIR}/out")
endif()

run(${DPKG} --info "${deb}")
expect("${output}" "Package: asyncshim")
expect("${output}" "Apache License 2.0")
# The licence is in the package. It is checked here, not in the installed
# tree: minimal images configure dpkg to leave /usr/share/doc out (path-exclude).
run(${DPKG} --contents "${deb}")
expect("${output}" "usr/share/doc/asyncshim/LICENSE\n")
expect("${output}" "usr/share/doc/asyncshim/copyright\n")

# Installed into a root of its own: dpkg needs only its database there.
set(root "${WORK_DIR}/root")
file(MAKE_DIRECTORY "${root}/var/lib/dpkg/info" "${root}/var/lib/dpkg/updates")
file(WRITE "${root}/var/lib/dpkg/status" "")
set(dpkg_in_root ${DPKG} "--root=${root}" "--admindir=${root}/var/lib/dpkg" --force-not-root --force-depends
    --force-script-chrootless)
run(${dpkg_in_root} -i "${deb}")
foreach(installed usr/lib/libasyncshim.so usr/bin/asyncshim usr/bin/asyncshim-ab usr/bin/asyncshim-replay
        usr/libexec/asyncshim/asyncshim-settings usr/libexec/asyncshim/asyncshim-replayer usr/lib/pkgconfig/asyncshim.pc)
  if(NOT EXISTS "${root}/${installed}")
    message(FATAL_ERROR "the .deb did not install ${installed}")
  endif()
endforeach()
run(${READELF} -S "${root}/usr/lib/libasyncshim.so")
if(output MATCHES "\\.debug_info|\\.symtab")
  message(FATAL_ERROR "the packaged libasyncshim.so is not stripped")
endif()
run("${root}/usr/bin/asyncshim-replay" --help)
expect("${output}" "usage: asyncshim-replay")
run("${root}/usr/bin/asyncshim" --version)
expect("${output}" "^asyncshim [0-9]+\\.[0-9]+\\.[0-9]+")
run("${root}/usr/bin/asyncshim" --print-library)
expect("${output}" "/root/usr/lib/libasyncshim.so\n$")
# The packaged shim at work: a static-runtime-style program on the driver double.
run("${root}/usr/bin/asyncshim" -- "${PROBE}" "${DRIVER}" basic)
expect("${output}" "summary: allocations 4 pool 4 driver 0")
run(${dpkg_in_root} -r asyncshim)
if(EXISTS "${root}/usr/lib/libasyncshim.so" OR EXISTS "${root}/usr/bin/asyncshim")
  message(FATAL_ERROR "dpkg -r asyncshim left files behind")
endif()

# The archive: the same tree, usable where it is unpacked.
file(MAKE_DIRECTORY "${WORK_DIR}/unpacked")
run(${CMAKE_COMMAND} -E chdir "${WORK_DIR}/unpacked" ${CMAKE_COMMAND} -E tar xzf "${tgz}")
file(GLOB top "${WORK_DIR}/unpacked/asyncshim-*")
run("${top}/bin/asyncshim" --print-library)
expect("${output}" "/lib/libasyncshim.so\n$")
message(STATUS "packages: ${deb} and ${tgz} built, installed, used and removed")
