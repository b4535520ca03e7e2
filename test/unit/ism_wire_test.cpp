// SPDX-License-Identifier: MIT
#include "engine/smcd/ism_wire.hpp"

#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

using namespace usmc::ism::wire;

namespace {

// A control buffer as recvmsg() leaves it: one SCM_RIGHTS message with
// `fds`, its cmsg_len as given (the kernel's is CMSG_LEN of what it wrote).
std::vector<uint8_t> control_with(const std::vector<int>& fds, size_t cmsg_len) {
    std::vector<uint8_t> buf(CMSG_LEN(sizeof(int) * fds.size()));
    cmsghdr h{};
    h.cmsg_len = cmsg_len;
    h.cmsg_level = SOL_SOCKET;
    h.cmsg_type = SCM_RIGHTS;
    std::memcpy(buf.data(), &h, sizeof h);
    std::memcpy(buf.data() + CMSG_LEN(0), fds.data(), sizeof(int) * fds.size());
    return buf;
}

Received inspect_buf(std::vector<uint8_t>& buf, ssize_t n, int flags = 0) {
    msghdr msg{};
    msg.msg_control = buf.data();
    msg.msg_controllen = buf.size();
    msg.msg_flags = flags;
    return inspect(msg, n, sizeof(Request));
}

} // namespace

TEST_CASE("link messages: a request with its one descriptor (the DMB's file), or none, is "
          "well-formed") {
    static_assert(kFdCount == 1); // wake-ups need none (wakeup.hpp)
    auto buf = control_with({5}, CMSG_LEN(sizeof(int)));
    Received r = inspect_buf(buf, sizeof(Request));
    CHECK(r.well_formed);
    REQUIRE(r.count == 1);
    CHECK(r.fds[0] == 5);

    msghdr none{};
    Received empty = inspect(none, sizeof(Reply), sizeof(Reply));
    CHECK(empty.well_formed);
    CHECK(empty.count == 0);
}

TEST_CASE("link messages: short, truncated or with the wrong number of descriptors is malformed; "
          "every descriptor is still reported (to be closed)") {
    auto buf = control_with({5, 6, 7}, CMSG_LEN(3 * sizeof(int)));
    CHECK_FALSE(inspect_buf(buf, sizeof(Request) - 1).well_formed);
    CHECK_FALSE(inspect_buf(buf, sizeof(Request), MSG_CTRUNC).well_formed);
    CHECK(inspect_buf(buf, sizeof(Request), MSG_CTRUNC).count == 3);
    CHECK(inspect_buf(buf, -1).count == 0);
    Received r = inspect_buf(buf, sizeof(Request)); // three: two too many
    CHECK_FALSE(r.well_formed);
    CHECK(r.count == 3);
    auto two = control_with({5, 6}, CMSG_LEN(2 * sizeof(int)));
    Received r2 = inspect_buf(two, sizeof(Request));
    CHECK_FALSE(r2.well_formed);
    CHECK(r2.count == 2);
}

TEST_CASE("link messages: a cmsg_len past the buffer's end is not read beyond it") {
    // Found by the ism_wire fuzzer: the descriptors were read as far as
    // cmsg_len said (under AddressSanitizer here: a heap-buffer-overflow).
    // The kernel never writes such a header; counted against the buffer anyway.
    auto buf = control_with({5}, CMSG_LEN(8 * sizeof(int)));
    Received r = inspect_buf(buf, sizeof(Request));
    CHECK(r.count == 1);
    CHECK(r.well_formed);
    auto tiny = control_with({5, 6, 7}, 1); // shorter than its own header
    CHECK(inspect_buf(tiny, sizeof(Request)).count == 0);
}

TEST_CASE("link messages: a share reply carries one descriptor or none, never more") {
    auto one = control_with({9}, CMSG_LEN(sizeof(int)));
    msghdr msg{};
    msg.msg_control = one.data();
    msg.msg_controllen = one.size();
    Received r = inspect(msg, sizeof(Reply), sizeof(Reply), kShareFdCount);
    CHECK(r.well_formed);
    REQUIRE(r.count == 1);
    CHECK(r.fds[0] == 9);

    auto three = control_with({5, 6, 7}, CMSG_LEN(3 * sizeof(int)));
    msg.msg_control = three.data();
    msg.msg_controllen = three.size();
    Received bad = inspect(msg, sizeof(Reply), sizeof(Reply), kShareFdCount);
    CHECK_FALSE(bad.well_formed);
    CHECK(bad.count == 3); // still reported, to be closed
}
