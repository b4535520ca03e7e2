// SPDX-License-Identifier: MIT
// The set*id family. A forked child makes its stats file only once it is to
// be seen (runtime::publish_own_stats, on its first socket call of its own).
// One that changes its user or group first (nginx's workers become nobody)
// might no longer be allowed to create it where its parent could: so it
// makes the file just before, as the user it was forked as.
#include "engine/sock/engine.hpp"
#include "preload/shim.hpp"

#include <unistd.h>

using namespace usmc;

namespace {
inline void before_credentials_change() {
    if (!shim::vfork_child()) runtime::publish_own_stats();
}
} // namespace

USMC_EXPORT int setuid(uid_t uid) noexcept {
    before_credentials_change();
    return sys::real().setuid(uid);
}

USMC_EXPORT int seteuid(uid_t uid) noexcept {
    before_credentials_change();
    return sys::real().seteuid(uid);
}

USMC_EXPORT int setreuid(uid_t ruid, uid_t euid) noexcept {
    before_credentials_change();
    return sys::real().setreuid(ruid, euid);
}

USMC_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid) noexcept {
    before_credentials_change();
    return sys::real().setresuid(ruid, euid, suid);
}

USMC_EXPORT int setgid(gid_t gid) noexcept {
    before_credentials_change();
    return sys::real().setgid(gid);
}

USMC_EXPORT int setegid(gid_t gid) noexcept {
    before_credentials_change();
    return sys::real().setegid(gid);
}

USMC_EXPORT int setregid(gid_t rgid, gid_t egid) noexcept {
    before_credentials_change();
    return sys::real().setregid(rgid, egid);
}

USMC_EXPORT int setresgid(gid_t rgid, gid_t egid, gid_t sgid) noexcept {
    before_credentials_change();
    return sys::real().setresgid(rgid, egid, sgid);
}
