# Unity builds (KINET_UNITY_BUILD=ON): every target of this project with two
# or more C++ sources compiles them in batches of KINET_UNITY_BATCH_SIZE (one
# compiler run parses the shared headers once per batch instead of once per
# file). Less CPU for a full build; more for an incremental one (a changed
# file recompiles its batch), hence OFF by default and ON in CI.
#
# What it asks of the sources: the .cpp files of one target must compile as
# one translation unit. A file-local helper (anonymous namespace, static) must
# not share its name with another file's in the same namespace: shared helpers
# live once in a header (src/core/text.hpp, src/core/blob.hpp, ...), different
# things get different names. A file that cannot join a batch gets the source
# property SKIP_UNITY_BUILD_INCLUSION with a comment saying why.
#
# Not batched: CUDA sources (nvcc compiles them one by one, as before; CMake
# 3.31 would otherwise batch them too), sources with their own compile options
# (CMake leaves them out, e.g. kinet_cli_sources), targets outside this source
# tree (GoogleTest built from source).
set(KINET_UNITY_BATCH_SIZE 8 CACHE STRING "Sources per unity batch with KINET_UNITY_BUILD (0: one batch per target)")

# kinet_unity_build(DIR): applies it to the targets of DIR and its subdirectories.
function(kinet_unity_build dir)
  get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS _targets)
    get_target_property(_type ${t} TYPE)
    if(NOT _type MATCHES "^(EXECUTABLE|STATIC_LIBRARY|SHARED_LIBRARY|MODULE_LIBRARY|OBJECT_LIBRARY)$")
      continue()
    endif()
    get_target_property(_srcs ${t} SOURCES)
    set(_ncxx 0)
    foreach(s IN LISTS _srcs)
      if(s MATCHES "\\.cu$")
        set_source_files_properties(${s} TARGET_DIRECTORY ${t} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
      elseif(s MATCHES "\\.(cpp|cc|cxx)$")
        math(EXPR _ncxx "${_ncxx} + 1")
      endif()
    endforeach()
    if(_ncxx GREATER 1)
      set_target_properties(${t} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${KINET_UNITY_BATCH_SIZE})
      # GCC warns when a class with linkage has a member of an anonymous-namespace
      # type, except in the main file; in a batch no source is the main file
      # (comm.cpp's Impl structs would warn in a unity build only).
      target_compile_options(${t} PRIVATE $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-subobject-linkage>)
    endif()
  endforeach()
  get_property(_subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(d IN LISTS _subdirs)
    cmake_path(IS_PREFIX PROJECT_SOURCE_DIR "${d}" _ours)
    if(_ours)
      kinet_unity_build(${d})
    endif()
  endforeach()
endfunction()
