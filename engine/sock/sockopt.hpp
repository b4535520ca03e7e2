// SPDX-License-Identifier: MIT
#pragma once
// SOL_SMC socket options with the kernel's semantics (net/smc/af_smc.c,
// __smc_setsockopt / __smc_getsockopt):
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
// (min(optlen, sizeof(int)) bytes; optlen negative as an int -> EINVAL).
int put_int(int val, void* optval, socklen_t* optlen);

} // namespace usmc::sockopt
