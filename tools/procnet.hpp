// SPDX-License-Identifier: MIT
#pragma once
// The kernel's view of a socket for `usmc ss`: state and addresses, by
// inode. Asked of the kernel's sock_diag (NETLINK_SOCK_DIAG, through
// libnl's idiag) for processes in our network namespace, which answers
// with the sockets themselves; a process in another namespace (sock_diag
// answers only for the asker's) is read from /proc/<pid>/net/tcp{,6}.
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <sys/types.h>
#include <utility>

struct nlmsghdr;

namespace usmc::tools {

struct TcpEntry {
    std::string local, peer, state;
};

// The TCP sockets (IPv4 and IPv6) among `wanted`: for each process, the
// inodes of its sockets to look up. inode -> entry; an inode missing from
// the result is not a TCP socket the kernel lists (closed meanwhile, or
// not TCP). Socket inodes are unique across namespaces.
std::map<uint64_t, TcpEntry> tcp_sockets(const std::map<pid_t, std::set<uint64_t>>& wanted);

// sock_diag alone: the sockets of our network namespace among `inodes`;
// nullopt if the kernel cannot be asked (no inet_diag, no netlink).
std::optional<std::map<uint64_t, TcpEntry>> diag_tcp_sockets(const std::set<uint64_t>& inodes);
// One sock_diag answer (an inet_diag_msg), for tests: inode and entry.
std::optional<std::pair<uint64_t, TcpEntry>> parse_diag(nlmsghdr* msg);

// /proc/<pid>/net/tcp{,6}: inode -> entry for every TCP socket of the
// process's network namespace.
std::map<uint64_t, TcpEntry> read_tcp_table(pid_t pid);
// Inode of the socket behind /proc/<pid>/fd/<fd>, 0 if it is not a socket.
uint64_t socket_inode(pid_t pid, int fd);
// "0100007F:1F90" -> "127.0.0.1:8080"; 32-hex-digit IPv6 -> "[::1]:8080".
std::string decode_proc_address(const std::string& hex);
// The kernel's TCP state names (TCP_ESTABLISHED = 1 ...), "?" past them.
const char* tcp_state_name(unsigned state);

} // namespace usmc::tools
