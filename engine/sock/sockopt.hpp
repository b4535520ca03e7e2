// SPDX-License-Identifier: MIT
#pragma once
// SOL_SMC socket options, and the IPPROTO_TCP ones usmc answers for an SMC
// connection (TCP_NODELAY, TCP_CORK: net/ipv4/tcp.c), with the kernel's
// semantics (net/smc/af_smc.c, __smc_setsockopt / __smc_getsockopt):
//  - SMC_LIMIT_HS is an int; setsockopt with optlen < sizeof(int) -> EINVAL;
//    any nonzero value enables.
//  - getsockopt copies min(optlen, sizeof(int)) bytes and reports that length;
//    an optlen that is negative as an int -> EINVAL.
//  - any other SOL_SMC option -> EOPNOTSUPP (what the kernel returns).
#include <cstdint>
#include <sys/socket.h>

namespace usmc::sockopt {

constexpr int kSolSmc = 286;  // SOL_SMC, include/linux/socket.h
constexpr int kLimitHs = 1;   // SMC_LIMIT_HS, include/uapi/linux/smc.h
constexpr int kAfSmc = 43;    // AF_SMC
constexpr int kSmcProto = 0;  // SMCPROTO_SMC (IPv4)
constexpr int kSmcProto6 = 1; // SMCPROTO_SMC6 (IPv6)

// Returns 0 or a positive errno. `limit_hs` is updated on success.
int set(int optname, const void* optval, socklen_t optlen, bool& limit_hs);
// Returns 0 or a positive errno; writes at most *optlen bytes.
int get(int optname, void* optval, socklen_t* optlen, bool limit_hs);

// An int-valued getsockopt answer with the kernel's length rules
// (min(optlen, sizeof(int)) bytes; optlen negative as an int -> EINVAL;
// the length is reported before a NULL optval answers EFAULT). The same
// for SOL_SMC and for IPPROTO_TCP's int options.
int put_int(int val, void* optval, socklen_t* optlen);

// setsockopt(IPPROTO_TCP) of an on/off int option (TCP_NODELAY, TCP_CORK)
// as net/ipv4/tcp.c reads it: optlen negative as an int (the system call's
// check) or < sizeof(int) -> EINVAL; optval NULL -> EFAULT; any nonzero
// value is on. Returns 0 or a positive errno.
int tcp_flag(const void* optval, socklen_t optlen, bool& on);

} // namespace usmc::sockopt
