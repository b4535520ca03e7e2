# SPDX-License-Identifier: MIT
# usmc_check_includes(<what> <regex>): fails the configure step when a file
# of the calling directory has a quoted #include that does not match
# <regex> (a layer's allowed folders), so a dependency pointing up is caught
# before review. Re-checked whenever a file there changes.
function(usmc_check_includes what allowed)
  file(GLOB files ${CMAKE_CURRENT_SOURCE_DIR}/*.hpp ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${files})
  foreach(f ${files})
    file(STRINGS ${f} includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"")
    foreach(inc ${includes})
      if(NOT inc MATCHES "${allowed}")
        message(FATAL_ERROR "${f}: ${inc}: ${what}")
      endif()
    endforeach()
  endforeach()
endfunction()
