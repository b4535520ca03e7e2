// SPDX-License-Identifier: MIT
#pragma once
// The messages of an ISM link (ism_endpoint.hpp), each one SOCK_SEQPACKET
// message: a client's attach request and the endpoint's reply (kFdCount
// descriptors, SCM_RIGHTS, or none), and a request for shared memory the
// endpoint's process handed out under a token (kShareMagic: the request
// carries none, the reply one or none). Here without any socket, so the
// checks a received message must pass can be tested and fuzzed on bytes.
#include <cstddef>
#include <cstdint>
#include <sys/socket.h>
#include <sys/types.h>

namespace usmc::ism::wire {

constexpr uint32_t kMagic = 0x55534d41;      // "USMA"
constexpr uint32_t kShareMagic = 0x55534d53; // "USMS"
constexpr int kFdCount = 1;                  // the DMB (its segment)
constexpr int kShareFdCount = 1;             // the shared memfd
// Descriptors taken from one message at most: the receive buffer has room
// for this many, and a message with more arrives with MSG_CTRUNC (refused).
constexpr int kMaxFds = 8;

// A DMB is `dmb_size` bytes at `dmb_offset` of the memfd sent, which is
// `file_size` bytes (a segment of slots, ism.hpp; or the DMB's own file).
// `serial`: the segment's number in its owner's device (0: a DMB of its
// own file), how later CLC messages of the link group name it.
struct Request {
    uint32_t magic;
    uint32_t dmb_size;
    uint64_t token;
    uint32_t dmb_offset;
    uint32_t file_size;
    uint32_t serial;
    uint32_t reserved;
};
struct Reply {
    uint32_t magic;
    int32_t status; // 0 or a positive errno
    uint32_t dmb_size;
    uint32_t dmb_offset;
    uint32_t file_size;
    uint32_t serial;
};

// What one recvmsg() delivered, judged without touching a descriptor.
struct Received {
    int fds[kMaxFds];
    int count = 0;            // descriptors found in SCM_RIGHTS, in order (all must be closed)
    bool well_formed = false; // exactly the expected length, nothing truncated,
                              // and `nfds` descriptors or none
};

// `n`: recvmsg()'s result; `len`: the message's expected length; `nfds`:
// the descriptors it may carry; `msg`: the msghdr recvmsg() filled
// (msg_control, msg_controllen, msg_flags).
Received inspect(const msghdr& msg, ssize_t n, size_t len, int nfds = kFdCount);

} // namespace usmc::ism::wire
