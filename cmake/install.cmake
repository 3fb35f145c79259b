# Install rules: the static library, public headers (with the generated
# version.hpp), the tools, a CMake package (find_package(kinet) gives
# kinet::kinet) and kinet.pc for pkg-config.
include(CMakePackageConfigHelpers)

set(KINET_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/kinet CACHE STRING "Where kinetConfig.cmake is installed")

install(TARGETS kinet EXPORT kinetTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/kinet DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/include/kinet/version.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kinet)
install(TARGETS kinet-info kinet-perf RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(EXPORT kinetTargets NAMESPACE kinet:: DESTINATION ${KINET_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/kinetConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/kinetConfig.cmake
                              INSTALL_DESTINATION ${KINET_INSTALL_CMAKEDIR})
# 0.x: minor versions may break the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kinetConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kinetConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/kinetConfigVersion.cmake
        DESTINATION ${KINET_INSTALL_CMAKEDIR})

# pkg-config: the library is static, so what it needs (threads, libdl) goes in
# Libs itself; C++20 is the consumer's to ask for (-std=c++20).
# The prefix is found from the .pc file's own place (${pcfiledir}), so
# `cmake --install --prefix DIR` works without reconfiguring.
set(_kinet_dl "")
if(CMAKE_DL_LIBS)
  set(_kinet_dl "-l${CMAKE_DL_LIBS}")
endif()
get_target_property(_kinet_type kinet TYPE)
if(_kinet_type STREQUAL "STATIC_LIBRARY")
  set(KINET_PC_LIBS "-lkinet -pthread ${_kinet_dl}")
  set(KINET_PC_LIBS_PRIVATE "")
else()
  set(KINET_PC_LIBS "-lkinet -pthread")
  set(KINET_PC_LIBS_PRIVATE "${_kinet_dl}")
endif()
file(RELATIVE_PATH KINET_PC_TO_PREFIX /${CMAKE_INSTALL_LIBDIR}/pkgconfig /)
string(REGEX REPLACE "/$" "" KINET_PC_TO_PREFIX "${KINET_PC_TO_PREFIX}")
configure_file(cmake/kinet.pc.in ${CMAKE_CURRENT_BINARY_DIR}/kinet.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kinet.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
