// SPDX-License-Identifier: MIT
#pragma once
// One question to the kernel's sock_diag (NETLINK_SOCK_DIAG) the engine
// needs answered after a listener's descriptor is closed: does some other
// process still hold that listening socket? The kernel lists only its TCP
// listeners of our network namespace, so the answer costs one small dump per
// address family, whatever the number of connections.
#include <cstdint>
#include <optional>

namespace usmc::sockdiag {

// Whether a TCP socket with inode `inode` listens on `port` (host order) in
// this process's network namespace; nullopt when the kernel could not be
// asked (no netlink: a sandbox, a seccomp filter) or answered garbage.
std::optional<bool> tcp_listening(uint64_t inode, uint16_t port);

} // namespace usmc::sockdiag
