# SPDX-License-Identifier: MIT
# Install rules: `cmake --install BUILD --prefix P` for any P, and what the
# Debian package (cmake/package.cmake) is made of.
#
# bin, not sbin: users run usmc-run on their own programs and `usmc stats` /
# `usmc ss` on their own processes, as smc-tools installs smc_run and smcss
# into /usr/bin; the man pages are in section 8 because they describe system
# administration (the system-wide configuration, the global knob), as
# smc-tools' are.
install(TARGETS usmc-run usmc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The shim is no library to link against (no SONAME, no headers, no ABI
# promised between versions): it goes into a private directory of the library
# directory, where the dynamic linker never looks and which no package's
# shared-library rules apply to, and only usmc-run finds it, at
# bin/${USMC_BIN_TO_LIB}. (smc-tools puts its libsmc-preload.so straight into
# the library directory, where Debian wants a SONAME and a package of its
# own for it.)
install(TARGETS usmc-preload LIBRARY DESTINATION ${USMC_PRELOAD_DIR})

install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES examples/usmc.toml DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# The configuration file goes where the programs look for it: the configured
# sysconfdir (/etc for prefix /usr, <prefix>/etc otherwise). Installed to
# another prefix than the configured one (`--prefix P`), it goes to P/etc
# instead of overwriting the system's. DESTDIR is honoured (file(INSTALL)).
install(CODE "
  if(CMAKE_INSTALL_PREFIX STREQUAL \"${CMAKE_INSTALL_PREFIX}\")
    set(_usmc_etc \"${CMAKE_INSTALL_FULL_SYSCONFDIR}\")
  elseif(IS_ABSOLUTE \"${CMAKE_INSTALL_SYSCONFDIR}\")
    set(_usmc_etc \"\${CMAKE_INSTALL_PREFIX}/etc\")
  else()
    set(_usmc_etc \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SYSCONFDIR}\")
  endif()
  file(INSTALL DESTINATION \"\${_usmc_etc}/usmc\" TYPE FILE
       FILES \"${CMAKE_SOURCE_DIR}/examples/usmc.toml\")
")

# Bash completion for both programs, where bash-completion loads a command's
# completion on its first use: bash-completion's completionsdir (pkg-config)
# taken relative to bash-completion's own prefix, so that it lands under
# ours and `cmake --install --prefix P` stays under P; without pkg-config's
# answer, the directory bash-completion looks in under every data directory.
set(_usmc_completions ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_get_variable(_usmc_bc_dir bash-completion completionsdir)
  pkg_get_variable(_usmc_bc_prefix bash-completion prefix)
  if(_usmc_bc_dir AND _usmc_bc_prefix)
    cmake_path(IS_PREFIX _usmc_bc_prefix "${_usmc_bc_dir}" NORMALIZE _usmc_bc_under)
    if(_usmc_bc_under)
      file(RELATIVE_PATH _usmc_completions "${_usmc_bc_prefix}" "${_usmc_bc_dir}")
    endif()
  endif()
endif()
set(USMC_BASH_COMPLETION_DIR ${_usmc_completions} CACHE STRING
    "Where the bash completions go (relative: under the install prefix)")
install(FILES tools/completion/usmc-run tools/completion/usmc
        DESTINATION ${USMC_BASH_COMPLETION_DIR})
