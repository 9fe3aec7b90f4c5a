# OnyxInstall.cmake — what `cmake --install` puts into a prefix:
#
#   include/onyx/*.h                    the public headers (onyx.h, onyx_ep.h, onyx_types.h)
#   lib/libonyx.so*                     the library applications link
#   lib/onyx/providers/libonyx_ep_*.so  the providers (the loader finds them relative to libonyx)
#   bin/onyx                            the command
#   lib/cmake/onyx/                     find_package(onyx): onyx::onyx (applications),
#                                       onyx::sdk (providers: headers only)
#   lib/pkgconfig/onyx.pc               pkg-config onyx
#
# Everything is relocatable: the CMake package and onyx.pc find the prefix
# from their own location, `onyx` finds libonyx through $ORIGIN, and the
# loader finds the providers relative to libonyx.so.
include(CMakePackageConfigHelpers)

set(ONYX_CMAKE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/onyx")

# The provider ABI version, read from the header that defines it.
file(STRINGS ${PROJECT_SOURCE_DIR}/sdk/include/onyx/onyx_types.h ONYX_ABI_LINES
  REGEX "^#define ONYX_ABI_VERSION_(MAJOR|MINOR) ")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*" "\\1" ONYX_ABI_MAJOR "${ONYX_ABI_LINES}")
string(REGEX REPLACE ".*MINOR ([0-9]+).*" "\\1" ONYX_ABI_MINOR "${ONYX_ABI_LINES}")
set(ONYX_ABI_VERSION "${ONYX_ABI_MAJOR}.${ONYX_ABI_MINOR}")

set_target_properties(onyx_lib PROPERTIES EXPORT_NAME onyx)
set_target_properties(onyx_sdk PROPERTIES EXPORT_NAME sdk)
# The installed command finds the installed library wherever the prefix is.
set_target_properties(onyx_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")

install(TARGETS onyx_sdk onyx_lib EXPORT onyxTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS onyx_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS onyx_ep_cpu LIBRARY DESTINATION ${ONYX_PROVIDER_INSTALL_DIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/sdk/include/onyx DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")

install(EXPORT onyxTargets NAMESPACE onyx:: DESTINATION ${ONYX_CMAKE_INSTALL_DIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/onyxConfig.cmake.in
  ${PROJECT_BINARY_DIR}/cmake/onyxConfig.cmake
  INSTALL_DESTINATION ${ONYX_CMAKE_INSTALL_DIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR ONYX_PROVIDER_INSTALL_DIR
            CMAKE_INSTALL_BINDIR)
# The package version is the library's; 0.x promises nothing across minors,
# so a request for 0.1 takes 0.1.x only. (The provider ABI has its own
# version, checked at load: docs/abi.md.)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cmake/onyxConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cmake/onyxConfig.cmake
  ${PROJECT_BINARY_DIR}/cmake/onyxConfigVersion.cmake DESTINATION ${ONYX_CMAKE_INSTALL_DIR})

# onyx.pc: the prefix is computed from the file's own folder (${pcfiledir}).
set(ONYX_PC_DIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
file(RELATIVE_PATH ONYX_PC_TO_PREFIX "/onyx-prefix/${ONYX_PC_DIR}" "/onyx-prefix")
string(REGEX REPLACE "/$" "" ONYX_PC_TO_PREFIX "${ONYX_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/onyx.pc.in ${PROJECT_BINARY_DIR}/onyx.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/onyx.pc DESTINATION ${ONYX_PC_DIR})
