# cmake --install: libasyncshim.so, the launcher scripts, and the resource for
# C++ users (headers, static library and a CMake package: find_package(asyncshim)
# gives asyncshim::preload and asyncshim::launcher, and its component resource
# asyncshim::resource, which brings CUDA::cudart along), a pkg-config
# file (asyncshim.pc, with the preload library's path as a variable), the
# licence and the README.
include(CMakePackageConfigHelpers)

install(TARGETS asyncshim LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS asyncshim-settings RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/asyncshim)
install(PROGRAMS scripts/asyncshim scripts/asyncshim-ab scripts/asyncshim-replay DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS asyncshim-replayer RUNTIME DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/asyncshim)
install(FILES LICENSE README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DOCDIR} RENAME copyright)  # where Debian looks for it
install(TARGETS asyncshim_resource EXPORT asyncshimTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY resource/include/asyncshim DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT asyncshimTargets NAMESPACE asyncshim:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/asyncshim)

configure_package_config_file(cmake/asyncshimConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/asyncshimConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/asyncshim)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/asyncshimConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/asyncshimConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/asyncshimConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/asyncshim)

# pkg-config: relocatable (the prefix found from the .pc file's own folder),
# so that cmake --install --prefix anywhere gives a working file.
file(RELATIVE_PATH ASYNCSHIM_PC_TO_PREFIX "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
string(REGEX REPLACE "/$" "" ASYNCSHIM_PC_TO_PREFIX "${ASYNCSHIM_PC_TO_PREFIX}")
configure_file(cmake/asyncshim.pc.in ${CMAKE_CURRENT_BINARY_DIR}/asyncshim.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/asyncshim.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
