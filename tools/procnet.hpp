#pragma once
// Reads /proc/<pid>/net/tcp{,6} and /proc/<pid>/fd to give `usmc ss` the
// kernel's view of a socket: state and addresses, by inode.
#include <cstdint>
#include <map>
#include <string>
#include <sys/types.h>

namespace usmc::tools {

struct TcpEntry {
    std::string local, peer, state;
};

// inode -> entry for every TCP socket of the process's network namespace.
std::map<uint64_t, TcpEntry> read_tcp_table(pid_t pid);
// Inode of the socket behind /proc/<pid>/fd/<fd>, 0 if it is not a socket.
uint64_t socket_inode(pid_t pid, int fd);
// "0100007F:1F90" -> "127.0.0.1:8080"; 32-hex-digit IPv6 -> "[::1]:8080".
std::string decode_proc_address(const std::string& hex);

} // namespace usmc::tools
