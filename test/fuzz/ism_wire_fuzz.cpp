// SPDX-License-Identifier: MIT
// The link messages (attach requests and replies) as recvmsg() hands them
// over: the length it returned, its msg_flags and its control buffer, judged
// by ism::wire::inspect() as recv_with_fds() does before it keeps or closes
// any descriptor.
//
// Input layout (missing bytes read as 0):
//   0       mode: bit 0 builds the control buffer as the kernel does (SCM_RIGHTS
//           messages of bits 1-3 descriptors each, bits 4-5 of them), else the
//           rest of the input is the raw control buffer
//   1       the expected length: a Request, a Reply, or this byte's value
//   2..3    recvmsg()'s result, relative to the expected length
//   4       bit 0: the result is the expected length after all; bit 1: a
//           share reply (one descriptor expected, not kFdCount)
//   5..8    msg_flags
//   9..     the control buffer (its length, then its bytes) or the
//           descriptor numbers (2 bytes each)
#include "engine/smcd/ism_wire.hpp"
#include "test/fuzz/fuzz_check.hpp"

#include <cstdlib>
#include <cstring>
#include <vector>

using namespace usmc::ism::wire;

namespace {

struct Reader {
    const uint8_t* data;
    size_t size;
    size_t pos = 0;
    uint8_t u8() { return pos < size ? data[pos++] : 0; }
    uint16_t u16() { return uint16_t(u8() | u8() << 8); }
    uint32_t u32() { return uint32_t(u16()) | uint32_t(u16()) << 16; }
};

// A control buffer of exactly `n` bytes on the heap (malloc aligns it for
// cmsghdr), so AddressSanitizer sees a read past its end.
struct Control {
    void* p;
    size_t n;
    explicit Control(size_t bytes) : p(std::malloc(bytes ? bytes : 1)), n(bytes) {}
    ~Control() { std::free(p); }
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    Reader in{data, size};
    uint8_t mode = in.u8();
    uint8_t len_sel = in.u8();
    size_t len = len_sel < 128 ? sizeof(Request) : len_sel < 192 ? sizeof(Reply) : len_sel - 192;
    ssize_t n = static_cast<ssize_t>(len) + static_cast<int16_t>(in.u16()) / 1024;
    uint8_t how = in.u8();
    if (how & 1) n = static_cast<ssize_t>(len); // the usual case: all of it
    int nfds = how & 2 ? kShareFdCount : kFdCount;
    int flags = static_cast<int>(in.u32());

    std::vector<int> sent; // descriptors the kernel would have put, in order
    std::vector<uint8_t> raw;
    if (mode & 1) {
        // As the kernel writes it: one cmsghdr per SCM_RIGHTS message.
        int per = (mode >> 1) & 7, messages = (mode >> 4) & 3;
        raw.resize(CMSG_SPACE(sizeof(int) * per) * messages);
        msghdr m{};
        m.msg_control = raw.data();
        m.msg_controllen = raw.size();
        cmsghdr* c = messages ? CMSG_FIRSTHDR(&m) : nullptr;
        for (int k = 0; k < messages && c; ++k, c = CMSG_NXTHDR(&m, c)) {
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int) * per);
            for (int i = 0; i < per; ++i) {
                int fd = static_cast<int>(in.u16());
                std::memcpy(CMSG_DATA(c) + i * sizeof(int), &fd, sizeof fd);
                sent.push_back(fd);
            }
        }
    } else {
        size_t controllen = in.u8();
        for (size_t i = 0; i < controllen; ++i)
            raw.push_back(in.u8());
    }
    Control control(raw.size());
    if (!raw.empty()) std::memcpy(control.p, raw.data(), raw.size());

    msghdr msg{};
    msg.msg_control = raw.empty() ? nullptr : control.p;
    msg.msg_controllen = raw.size();
    msg.msg_flags = flags;
    Received r = inspect(msg, n, len, nfds);

    FUZZ_CHECK(r.count >= 0 && r.count <= kMaxFds);
    if (r.well_formed) {
        FUZZ_CHECK(n == static_cast<ssize_t>(len));
        FUZZ_CHECK(!(flags & (MSG_TRUNC | MSG_CTRUNC)));
        FUZZ_CHECK(r.count == 0 || r.count == nfds);
    }
    if (n < 0) FUZZ_CHECK(r.count == 0 && !r.well_formed);
    if ((mode & 1) && n >= 0) {
        // Every descriptor the kernel passed is found (up to kMaxFds), in order:
        // none may stay open unseen.
        size_t want = std::min<size_t>(sent.size(), kMaxFds);
        FUZZ_CHECK(static_cast<size_t>(r.count) == want);
        for (size_t i = 0; i < want; ++i)
            FUZZ_CHECK(r.fds[i] == sent[i]);
    }
    return 0;
}
