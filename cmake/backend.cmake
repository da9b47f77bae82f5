# SPDX-License-Identifier: MIT
# dlock_backend(NAME DESCRIPTORS d... SOURCES s... [LIB_SOURCES s...]
#               [TOOLS s...]
#               [PKG module... | LIBRARY lib HEADER header] [DLOPEN module...]
#               [DEB package])
#
# Registers one backend (or family): DESCRIPTORS are the names of its
# `const dl_backend dl_backend_<d>` descriptors, registered in this order;
# SOURCES are always compiled (they hold the descriptors); LIB_SOURCES and
# the define DLOCK_HAVE_<NAME> only when its client library is found: the
# pkg-config module PKG, or, for a library that ships no .pc file (the
# ZooKeeper C client), LIBRARY and its HEADER. No library named: always
# built. DLOPEN modules are needed too, but only their headers at build
# time: the backend loads them with dlopen when a client first needs them
# (libcurl: linked, its thirty-odd libraries would slow down the start of
# every dlock process, whatever its backend). -DDLOCK_WITH_<NAME>=OFF leaves the library out;
# -DDLOCK_NO_CLIENT_LIBS=ON leaves every one out.
#
# TOOLS are the backend's harness operations (src/harness/tools.h: what
# dlock bench and dlock check ask of its servers), compiled with the
# library's client only into the static library dlock_harness, which the
# dlock command and the tests link and libdlock.so does not; each built
# descriptor d defines `const struct dh_tools dh_tools_<d>`, listed in the
# harness registry (dlock_harness_registry).
function(dlock_backend name)
  cmake_parse_arguments(B "" "DEB;LIBRARY;HEADER" "DESCRIPTORS;SOURCES;LIB_SOURCES;TOOLS;PKG;DLOPEN" ${ARGN})
  string(TOUPPER "${name}" up)
  string(REPLACE "+" "_" up "${up}")
  set(have FALSE)
  set(dlopen_only FALSE)
  if(NOT B_PKG AND NOT B_LIBRARY AND NOT B_DLOPEN)
    set(have TRUE)
  else()
    option(DLOCK_WITH_${up} "Build the ${name} backend (needs ${B_PKG}${B_LIBRARY})" ON)
    if(DLOCK_NO_CLIENT_LIBS) # every backend's library left out at once
      set(DLOCK_WITH_${up} OFF)
    endif()
    if(DLOCK_WITH_${up} AND B_PKG AND PKG_CONFIG_FOUND)
      pkg_check_modules(DLOCK_PKG_${up} IMPORTED_TARGET ${B_PKG})
      if(B_DLOPEN AND DLOCK_PKG_${up}_FOUND)
        pkg_check_modules(DLOCK_DLO_${up} ${B_DLOPEN})
        if(NOT DLOCK_DLO_${up}_FOUND)
          set(DLOCK_PKG_${up}_FOUND FALSE)
        endif()
      endif()
    elseif(DLOCK_WITH_${up} AND B_LIBRARY)
      find_library(DLOCK_LIB_${up} ${B_LIBRARY})
      find_path(DLOCK_INC_${up} ${B_HEADER})
      if(DLOCK_LIB_${up} AND DLOCK_INC_${up})
        add_library(dlock_lib_${name} INTERFACE IMPORTED GLOBAL)
        target_link_libraries(dlock_lib_${name} INTERFACE ${DLOCK_LIB_${up}})
        target_include_directories(dlock_lib_${name} INTERFACE ${DLOCK_INC_${up}})
        set(DLOCK_PKG_${up}_FOUND TRUE)
      endif()
    elseif(DLOCK_WITH_${up} AND B_DLOPEN AND PKG_CONFIG_FOUND)
      # only loaded at run time: its headers, never a link
      pkg_check_modules(DLOCK_DLO_${up} ${B_DLOPEN})
      if(DLOCK_DLO_${up}_FOUND)
        add_library(dlock_lib_${name} INTERFACE IMPORTED GLOBAL)
        target_include_directories(dlock_lib_${name} INTERFACE ${DLOCK_DLO_${up}_INCLUDE_DIRS})
        set(DLOCK_PKG_${up}_FOUND TRUE)
        set(dlopen_only TRUE)
      endif()
    endif()
    if(DLOCK_PKG_${up}_FOUND AND B_PKG)
      set(have TRUE)
      set(DLOCK_BACKEND_LIBS ${DLOCK_BACKEND_LIBS} PkgConfig::DLOCK_PKG_${up} PARENT_SCOPE)
      # dlock.pc names the libraries themselves (Libs.private), not their
      # modules (Requires.private): pkg-config --cflags follows
      # Requires.private too, and dlock.h needs none of their headers.
      set(libs ${DLOCK_PC_LIBS_PRIVATE})
      foreach(l ${DLOCK_PKG_${up}_STATIC_LIBRARIES})
        list(APPEND libs -l${l})
      endforeach()
      set(DLOCK_PC_LIBS_PRIVATE ${libs} PARENT_SCOPE)
    elseif(DLOCK_PKG_${up}_FOUND)
      set(have TRUE)
      set(DLOCK_BACKEND_LIBS ${DLOCK_BACKEND_LIBS} dlock_lib_${name} PARENT_SCOPE)
      if(NOT dlopen_only)
        set(DLOCK_PC_LIBS_PRIVATE ${DLOCK_PC_LIBS_PRIVATE} -l${B_LIBRARY} PARENT_SCOPE)
      endif()
    else()
      message(STATUS "${B_PKG}${B_DLOPEN}${B_LIBRARY} not found (Debian: ${B_DEB}): the ${name} backend will report itself missing")
    endif()
  endif()
  set(sources ${DLOCK_BACKEND_SOURCES} ${B_SOURCES})
  if(have)
    list(APPEND sources ${B_LIB_SOURCES})
    set(DLOCK_BACKEND_DEFS ${DLOCK_BACKEND_DEFS} DLOCK_HAVE_${up} PARENT_SCOPE)
    set(DLOCK_TOOLS_SOURCES ${DLOCK_TOOLS_SOURCES} ${B_TOOLS} PARENT_SCOPE)
    set(DLOCK_TOOLED ${DLOCK_TOOLED} ${B_DESCRIPTORS} PARENT_SCOPE)
  endif()
  set(DLOCK_BACKEND_SOURCES ${sources} PARENT_SCOPE)
  set(DLOCK_HAVE_${up} ${have} PARENT_SCOPE)
  set(DLOCK_DESCRIPTORS ${DLOCK_DESCRIPTORS} ${B_DESCRIPTORS} PARENT_SCOPE)
endfunction()

# Write the registry: every descriptor registered above, in order.
function(dlock_registry out)
  set(decls "")
  set(entries "")
  foreach(d ${DLOCK_DESCRIPTORS})
    string(APPEND decls "extern const dl_backend dl_backend_${d};\n")
    string(APPEND entries "    &dl_backend_${d},\n")
  endforeach()
  file(CONFIGURE OUTPUT ${out} CONTENT "/* Generated by CMake from the dlock_backend() calls; do not edit. */
#include \"internal.h\"

${decls}
const dl_backend *const dl_registry[] = {
${entries}    NULL,
};
" @ONLY)
endfunction()

# Write the harness registry: the tool table of every descriptor built.
function(dlock_harness_registry out)
  set(decls "")
  set(entries "")
  foreach(d ${DLOCK_TOOLED})
    string(APPEND decls "extern const struct dh_tools dh_tools_${d};\n")
    string(APPEND entries "    {\"${d}\", &dh_tools_${d}},\n")
  endforeach()
  file(CONFIGURE OUTPUT ${out} CONTENT "/* Generated by CMake from the dlock_backend() calls; do not edit. */
#include \"harness/tools.h\"

${decls}
const dh_entry dh_registry[] = {
${entries}    {NULL, NULL},
};
" @ONLY)
endfunction()
