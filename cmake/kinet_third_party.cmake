# Header-only libraries of the tools and benchmarks: CLI11 (command lines) and
# nlohmann-json (JSON). Debian: libcli11-dev, nlohmann-json3-dev. Where their
# CMake packages are missing, KINET_THIRD_PARTY_INCLUDE may name a folder that
# holds CLI/CLI.hpp and nlohmann/json.hpp. Defines CLI11::CLI11 and
# nlohmann_json::nlohmann_json, or stops with what to install.
set(KINET_THIRD_PARTY_INCLUDE "" CACHE PATH "folder with CLI/CLI.hpp and nlohmann/json.hpp when their packages are missing")
function(kinet_header_lib target pkg header hint)
  if(TARGET ${target})
    return()
  endif()
  find_package(${pkg} CONFIG QUIET)
  if(TARGET ${target})
    message(STATUS "kinet: ${pkg} ${${pkg}_VERSION} (CMake package)")
    return()
  endif()
  find_path(KINET_${pkg}_INCLUDE_DIR ${header} HINTS ${KINET_THIRD_PARTY_INCLUDE})
  if(NOT KINET_${pkg}_INCLUDE_DIR)
    message(FATAL_ERROR "kinet's tools need ${pkg} (${header}): install ${hint}, "
                        "or set KINET_THIRD_PARTY_INCLUDE to a folder that holds ${header}")
  endif()
  message(STATUS "kinet: ${pkg} headers in ${KINET_${pkg}_INCLUDE_DIR}")
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${KINET_${pkg}_INCLUDE_DIR}")
endfunction()
kinet_header_lib(CLI11::CLI11 CLI11 CLI/CLI.hpp "Debian's libcli11-dev")
kinet_header_lib(nlohmann_json::nlohmann_json nlohmann_json nlohmann/json.hpp "Debian's nlohmann-json3-dev")

# kinet_cli_sources(file...): sources that only parse command lines (CLI11) or
# write reports (nlohmann-json) run once per program, never in a measured
# loop; their template-heavy code compiles ~2x faster at -O1 with line-table
# debug info than at -O2 -g. KINET_TOOL_CLI_FLAGS= (empty) to turn it off. The
# asan preset sets "-g1": at its -O0 they compile faster still (kinet-info's
# main.cpp under ASan+UBSan: 20 s at -O1, 12 s at -O0).
set(KINET_TOOL_CLI_FLAGS "-O1 -g1" CACHE STRING "Compile flags of the tools' command-line and report sources")
function(kinet_cli_sources)
  separate_arguments(_flags UNIX_COMMAND "${KINET_TOOL_CLI_FLAGS}")
  if(_flags)
    set_source_files_properties(${ARGN} DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTIES COMPILE_OPTIONS "${_flags}")
  endif()
endfunction()
