# Packages of what cmake/install.cmake installs (cpack, in the build tree):
#   cpack -G DEB   asyncshim_<version>_<arch>.deb, installed under /usr
#   cpack -G TGZ   asyncshim-<version>-Linux.tar.gz, bin/ lib/ libexec/ ... under one folder
# Binaries are stripped. The packages hold no CUDA: libasyncshim.so finds the
# program's CUDA runtime and driver at run time; the resource's static library
# and headers need the CUDA toolkit only to be used.
set(CPACK_PACKAGE_NAME asyncshim)
set(CPACK_PACKAGE_VENDOR "the asyncshim authors")
set(CPACK_PACKAGE_CONTACT "the asyncshim authors")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Preloadable stream-ordered CUDA allocator: unmodified programs' cudaMalloc/cudaFree served by a pool")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_RESOURCE_FILE_README ${PROJECT_SOURCE_DIR}/README.md)
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR "DEB;TGZ")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
# libstdc++ is linked into libasyncshim.so statically; the settings tool and
# the scripts need the C++ runtime and Python.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6 (>= 2.34), libstdc++6, python3")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "${CPACK_PACKAGE_DESCRIPTION_SUMMARY}
 LD_PRELOAD=/usr/lib/libasyncshim.so (or the asyncshim launcher) makes every
 cudaMalloc/cudaFree of a CUDA program come from a per-device stream-ordered
 pool. Also: asyncshim-ab (A/B timing against the native allocator), a
 pkg-config file and the C++ memory resource (static library, headers, CMake
 package). Licensed under the Apache License 2.0.")
set(CPACK_ARCHIVE_COMPONENT_INSTALL OFF)
set(CPACK_SOURCE_IGNORE_FILES "/build" "/\\\\.git/" "/\\\\.deps/" "/\\\\.scratch/")
include(CPack)

# cmake --build <build> --target uninstall: removes what cmake --install put
# in place (the list CMake wrote, install_manifest.txt).
configure_file(${PROJECT_SOURCE_DIR}/cmake/uninstall.cmake.in ${PROJECT_BINARY_DIR}/uninstall.cmake @ONLY)
add_custom_target(uninstall COMMAND ${CMAKE_COMMAND} -P ${PROJECT_BINARY_DIR}/uninstall.cmake
                  COMMENT "Removing the files cmake --install installed (install_manifest.txt)")
