# SPDX-License-Identifier: MIT
# The Debian package: `cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr (scripts/package.sh does both) gives
# usmc_<version>_<arch>.deb from the same install rules as `cmake --install`.
#
# What Debian's tools and users look for in a package, beside the programs:
# a maintainer who can be written to, /usr/share/doc/usmc/copyright
# (machine-readable, DEP-5) and changelog.gz. These are install rules like
# the others, so `cmake --install` to a prefix carries the licence too.
# lintian (it_package runs it) finds no error and no warning in the package,
# so it ships no lintian overrides: one would go to
# /usr/share/lintian/overrides/usmc, with the reason the tag is wrong for usmc.
set(CPACK_PACKAGE_NAME usmc)
set(CPACK_PACKAGE_VENDOR "usmc")
# Who answers for the package (Maintainer; the copyright file's contact):
# by default the identity the project commits with. Someone who builds and
# distributes a package of their own puts their name here.
set(USMC_PACKAGE_MAINTAINER
    "usmc maintainers <maintainers@users.noreply.a-seed-1eedad2c.example>"
    CACHE STRING "Maintainer of the Debian package: Name <address>")
set(CPACK_PACKAGE_CONTACT "${USMC_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "transparent user-space SMC (SMC-D over shared memory)")
# One line of the control file each (Debian wants them within 80 columns;
# CPack indents them and turns an empty one into " .").
string(JOIN "\n" CPACK_PACKAGE_DESCRIPTION
  "usmc-run PROGRAM runs an unmodified program with libusmc-preload.so"
  "preloaded, which routes its TCP connections over SMC-D (shared memory"
  "between processes of one host) when both ends run under usmc, and over"
  "plain TCP otherwise, as smc_run of smc-tools does for the kernel's SMC."
  ""
  "usmc shows the connections and counters (usmc ss, usmc stats) and checks"
  "the configuration, ${USMC_SYSTEM_CONFIG}.")
set(CPACK_GENERATOR DEB)
# Install with DESTDIR and the real prefix, so /etc/usmc/usmc.toml lands in
# the package's /etc (cmake/install.cmake).
set(CPACK_SET_DESTDIR ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT) # usmc_0.1.0_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Library dependencies from the binaries themselves (dpkg-shlibdeps: libc6,
# libstdc++6 and libgcc-s1 for the tools, libnl-3-200, libnl-genl-3-200 with
# their versions; fmt and toml++ are compiled in).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# /etc/usmc/usmc.toml is a conffile: an upgrade keeps the administrator's
# edits, and only a purge removes it.
file(WRITE ${CMAKE_BINARY_DIR}/cpack-control/conffiles "${USMC_SYSTEM_CONFIG}\n")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${CMAKE_BINARY_DIR}/cpack-control/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# Debug information stays in the build tree, not in the package.
set(CPACK_STRIP_FILES ON)

# The copyright file: LICENSE's text in the format's indented form (an empty
# line becomes " ."), so that LICENSE stays the one copy of it, with the
# terms of the code compiled in from header-only libraries.
file(READ ${CMAKE_SOURCE_DIR}/LICENSE _usmc_license)
string(FIND "${_usmc_license}" "Permission is hereby granted" _usmc_start)
string(SUBSTRING "${_usmc_license}" ${_usmc_start} -1 _usmc_license)
string(STRIP "${_usmc_license}" _usmc_license)
string(REPLACE "\n\n" "\n.\n" _usmc_license "${_usmc_license}")
string(REPLACE "\n" "\n " USMC_EXPAT_TEXT " ${_usmc_license}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/LICENSE)
configure_file(${CMAKE_SOURCE_DIR}/packaging/copyright.in
               ${CMAKE_BINARY_DIR}/packaging/copyright @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/packaging/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})

# changelog.gz, as Debian wants it for a native package (a version without a
# Debian revision: the packaging lives upstream): one entry for this version.
# Its date is SOURCE_DATE_EPOCH's when set (scripts/package.sh sets the last
# commit's), so that the same sources give the same package; compressed
# without name or time stamp for the same reason.
string(TIMESTAMP _usmc_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
file(WRITE ${CMAKE_BINARY_DIR}/packaging/changelog
     "usmc (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
     "  * usmc ${PROJECT_VERSION}, packaged from its own sources.\n\n"
     " -- ${USMC_PACKAGE_MAINTAINER}  ${_usmc_date}\n")
find_program(GZIP gzip REQUIRED)
add_custom_command(
  OUTPUT ${CMAKE_BINARY_DIR}/packaging/changelog.gz
  COMMAND ${GZIP} -9nkf ${CMAKE_BINARY_DIR}/packaging/changelog
  DEPENDS ${CMAKE_BINARY_DIR}/packaging/changelog
  COMMENT "gzip changelog"
  VERBATIM)
add_custom_target(usmc-changelog ALL DEPENDS ${CMAKE_BINARY_DIR}/packaging/changelog.gz)
install(FILES ${CMAKE_BINARY_DIR}/packaging/changelog.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})

include(CPack)
