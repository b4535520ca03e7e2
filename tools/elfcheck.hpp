// SPDX-License-Identifier: MIT
#pragma once
// What kind of executable usmc-run is about to start, so it can warn when
// LD_PRELOAD cannot take effect: statically linked programs have no dynamic
// loader, set-user/group-ID programs have LD_PRELOAD dropped by the loader,
// and Go programs make their socket system calls without libc.
#include <string>

namespace usmc::tools {

enum class ExecKind { DynamicElf, StaticElf, Script, Other, Unreadable };

struct ExecInfo {
    ExecKind kind = ExecKind::Unreadable;
    bool setid = false; // set-user-ID or set-group-ID bit
    bool go = false;    // carries a Go build id / build info section
};

ExecInfo inspect_executable(const std::string& path);

// Finds PROGRAM like execvp: a name with a '/' is used as is, otherwise each
// $PATH entry is tried. Returns "" when nothing executable is found.
std::string find_program(const std::string& program, const char* path_env);

} // namespace usmc::tools
