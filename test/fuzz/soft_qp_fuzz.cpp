// SPDX-License-Identifier: MIT
// The soft device's queue pair fed a hostile peer's byte stream: any
// frames, any split (engine/smcr/soft_qp). Its regions and receive buffers
// are heap blocks of their exact size, so AddressSanitizer sees a WRITE or
// SEND placed one byte outside them. Whatever comes, nothing lands outside
// a region, and once in error the QP stays there.
//
// Input: byte 0 picks the split size (1..256), byte 1 how many receives to
// post (0..3); the rest is the peer's stream.
#include "engine/smcr/soft_qp.hpp"
#include "test/fuzz/fuzz_check.hpp"

#include <algorithm>
#include <memory>
#include <vector>

using namespace usmc::smcr::soft;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    size_t split = size_t(data[0]) + 1;
    int recvs = data[1] & 3;
    Qp q;
    std::vector<uint8_t> region(1000, 0);
    Qp::Region r = q.reg_mr(region.data(), region.size());
    FUZZ_CHECK(r.rkey != 0);
    std::vector<std::unique_ptr<std::vector<uint8_t>>> bufs;
    for (int i = 0; i < recvs; ++i) {
        bufs.push_back(std::make_unique<std::vector<uint8_t>>(44));
        q.post_recv(uint64_t(i), bufs.back()->data(), 44);
    }
    // Something of ours outstanding, for ACKs and NAKs to act on.
    q.post_send(100, "x", 1, true);
    std::vector<uint8_t> stream(data + 2, data + size);
    bool was_error = false;
    for (size_t off = 0; off < stream.size(); off += split) {
        size_t n = std::min(split, stream.size() - off);
        std::vector<uint8_t> piece(stream.begin() + off, stream.begin() + off + n);
        q.on_input(piece.data(), piece.size());
        FUZZ_CHECK(!was_error || q.in_error());
        was_error = q.in_error();
    }
    Completion c[8];
    while (q.poll(c, 8) > 0) {
    }
    std::vector<uint8_t> out;
    q.take_output(out);
    return 0;
}
