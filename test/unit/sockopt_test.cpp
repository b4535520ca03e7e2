// SPDX-License-Identifier: MIT
#include "engine/sock/sockopt.hpp"

#include <catch2/catch.hpp>

#include <cerrno>
#include <climits>

using namespace usmc::sockopt;

TEST_CASE("SMC_LIMIT_HS set: int, nonzero enables, short optlen is EINVAL") {
    bool limit = false;
    int one = 1, zero = 0, big = 42;
    CHECK(set(kLimitHs, &one, sizeof one, limit) == 0);
    CHECK(limit);
    CHECK(set(kLimitHs, &zero, sizeof zero, limit) == 0);
    CHECK_FALSE(limit);
    CHECK(set(kLimitHs, &big, sizeof big, limit) == 0);
    CHECK(limit);
    CHECK(set(kLimitHs, &zero, 2, limit) == EINVAL);
    CHECK(limit); // unchanged on error
    CHECK(set(kLimitHs, &zero, 0, limit) == EINVAL);
    long wide = 0; // longer optlen is accepted, the first int is used
    CHECK(set(kLimitHs, &wide, sizeof wide, limit) == 0);
    CHECK_FALSE(limit);
    CHECK(set(kLimitHs, nullptr, sizeof(int), limit) == EFAULT);
}

TEST_CASE("unknown SOL_SMC options answer EOPNOTSUPP, as the kernel does") {
    bool limit = false;
    int one = 1;
    socklen_t len = sizeof(int);
    int out = 0;
    CHECK(set(2, &one, sizeof one, limit) == EOPNOTSUPP);
    CHECK(get(2, &out, &len, limit) == EOPNOTSUPP);
}

TEST_CASE("SMC_LIMIT_HS get: min(optlen, 4) bytes, reported back") {
    int out = -1;
    socklen_t len = sizeof out;
    CHECK(get(kLimitHs, &out, &len, true) == 0);
    CHECK(out == 1);
    CHECK(len == sizeof(int));

    long wide = -1;
    len = sizeof wide;
    CHECK(get(kLimitHs, &wide, &len, false) == 0);
    CHECK(len == sizeof(int));

    unsigned char one_byte[4] = {0xaa, 0xaa, 0xaa, 0xaa};
    len = 1;
    CHECK(get(kLimitHs, one_byte, &len, true) == 0);
    CHECK(len == 1);
    CHECK(one_byte[0] == 1);    // little-endian low byte of 1
    CHECK(one_byte[1] == 0xaa); // nothing written past optlen

    len = 0;
    CHECK(get(kLimitHs, nullptr, &len, true) == 0);
    CHECK(len == 0);

    len = static_cast<socklen_t>(INT_MAX) + 1u; // negative as an int
    CHECK(get(kLimitHs, &out, &len, true) == EINVAL);
    CHECK(get(kLimitHs, &out, nullptr, true) == EFAULT);
}

TEST_CASE("int answers report the length before a NULL optval's EFAULT, as the kernel") {
    socklen_t len = 8;
    CHECK(put_int(1, nullptr, &len) == EFAULT);
    CHECK(len == sizeof(int));
    len = 0;
    CHECK(put_int(1, nullptr, &len) == 0);
    len = static_cast<socklen_t>(-1);
    CHECK(put_int(1, nullptr, &len) == EINVAL);
    CHECK(len == static_cast<socklen_t>(-1)); // untouched
}

TEST_CASE("TCP_NODELAY / TCP_CORK set: as do_tcp_setsockopt reads an int") {
    bool on = false;
    int one = 1, zero = 0, big = 42, minus = -1;
    CHECK(tcp_flag(&one, sizeof one, on) == 0);
    CHECK(on);
    CHECK(tcp_flag(&zero, sizeof zero, on) == 0);
    CHECK_FALSE(on);
    CHECK(tcp_flag(&big, sizeof big, on) == 0);
    CHECK(on);
    CHECK(tcp_flag(&zero, sizeof zero, on) == 0);
    CHECK(tcp_flag(&minus, sizeof minus, on) == 0);
    CHECK(on);
    long wide = 0; // longer optlen: the first int
    CHECK(tcp_flag(&wide, sizeof wide, on) == 0);
    CHECK_FALSE(on);
    CHECK(tcp_flag(&one, 3, on) == EINVAL);
    CHECK_FALSE(on); // unchanged on error
    CHECK(tcp_flag(&one, 0, on) == EINVAL);
    CHECK(tcp_flag(nullptr, 3, on) == EINVAL); // the length is looked at first
    CHECK(tcp_flag(nullptr, sizeof(int), on) == EFAULT);
    CHECK(tcp_flag(&one, static_cast<socklen_t>(-1), on) == EINVAL); // negative as an int
}
