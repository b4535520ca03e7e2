// SPDX-License-Identifier: MIT
#include "engine/sock/sockopt.hpp"

#include <cerrno>
#include <cstring>

namespace usmc::sockopt {

int set(int optname, const void* optval, socklen_t optlen, bool& limit_hs) {
    if (optname != kLimitHs) return EOPNOTSUPP;
    if (optlen < sizeof(int)) return EINVAL;
    if (!optval) return EFAULT;
    int val;
    std::memcpy(&val, optval, sizeof val);
    limit_hs = val != 0;
    return 0;
}

int get(int optname, void* optval, socklen_t* optlen, bool limit_hs) {
    if (!optlen) return EFAULT;
    if (static_cast<int>(*optlen) < 0) return EINVAL;
    if (optname != kLimitHs) return EOPNOTSUPP;
    return put_int(limit_hs ? 1 : 0, optval, optlen);
}

int put_int(int val, void* optval, socklen_t* optlen) {
    if (!optlen) return EFAULT;
    // The kernel reads optlen as an int and clamps it to sizeof(int).
    int len = static_cast<int>(*optlen);
    if (len > static_cast<int>(sizeof(int))) len = sizeof(int);
    if (len < 0) return EINVAL;
    *optlen = static_cast<socklen_t>(len);
    if (len > 0 && !optval) return EFAULT;
    if (len > 0) std::memcpy(optval, &val, static_cast<size_t>(len));
    return 0;
}

int tcp_flag(const void* optval, socklen_t optlen, bool& on) {
    if (static_cast<int>(optlen) < 0 || optlen < sizeof(int)) return EINVAL;
    if (!optval) return EFAULT;
    int val;
    std::memcpy(&val, optval, sizeof val);
    on = val != 0;
    return 0;
}

} // namespace usmc::sockopt
