# The Debian package: `cpack -G DEB` in a build configured with
# -DCMAKE_INSTALL_PREFIX=/usr (scripts/package.sh does both) gives
# usmc_<version>_<arch>.deb from the same install rules as `cmake --install`.
set(CPACK_PACKAGE_NAME usmc)
set(CPACK_PACKAGE_VENDOR "usmc")
set(CPACK_PACKAGE_CONTACT "usmc developers <usmc@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "transparent user-space SMC (SMC-D over shared memory)")
set(CPACK_PACKAGE_DESCRIPTION
    "usmc-run PROGRAM runs an unmodified program with libusmc-preload.so preloaded, \
which routes its TCP connections over SMC-D (shared memory between processes of one host) \
when both ends run under usmc, and over plain TCP otherwise. usmc shows the connections \
and counters (usmc ss, usmc stats) and checks the configuration.")
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
include(CPack)
