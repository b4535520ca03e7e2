// SPDX-License-Identifier: MIT
#pragma once
// CLC messages on the TCP connection: written whole, read exactly (peek the
// 8-byte header, then peek `length` bytes and take them only if they are a
// whole CLC frame, trailer included), so application bytes behind a CLC
// message stay in the socket for the application, and bytes that only look
// like CLC (NotClc) are never taken.
// Works on blocking and nonblocking sockets alike (MSG_DONTWAIT + poll).
#include "engine/clc/clc.hpp"

#include <cstdint>
#include <optional>
#include <sys/types.h>
#include <vector>

namespace usmc::clc {

enum class ReadStatus { Message, NotClc, Timeout, Closed, Error };

struct ReadResult {
    ReadStatus status = ReadStatus::Error;
    std::vector<uint8_t> bytes; // the whole message when status == Message
    int err = 0;
};

// `expect_wait`: the message cannot be there yet (the server's Confirm,
// which the client sends only after its attach): wait before the first look.
ReadResult read_message(int fd, int timeout_ms, bool expect_wait = false);
bool write_message(int fd, const std::vector<uint8_t>& bytes, int timeout_ms);
// A whole CLC message waiting on `fd` now, taken (what read_message would
// return without waiting): one look and one read, where asking first and
// reading then took three. nullopt, and nothing taken, while it is not
// whole or is not CLC (read_message then says what it is). Never waits.
std::optional<ReadResult> take_whole_message(int fd);

// One look at the first bytes waiting on a socket, kept so that telling what
// they are and taking the message they hold need no second look.
struct FirstLook {
    static constexpr size_t kLen = 512; // every message usmc sends fits
    uint8_t bytes[kLen];
    ssize_t n = -1; // what the peek returned (-1: errno was EAGAIN or an error)
    int err = 0;
};
FirstLook first_look(int fd);
// take_whole_message after `look` (the last look, nothing read since).
std::optional<ReadResult> take_whole_message(int fd, const FirstLook& look);

// Sends a Decline with `reason` as the peer diagnosis. `gid` becomes the
// sender's peer id (0 leaves it zero, as Linux does for SMC-D servers).
void send_decline(int fd, uint64_t gid, uint32_t reason, int timeout_ms);

// Server classification: do the first bytes of this connection start a CLC
// Proposal (or another CLC message)? Waits at most `timeout_ms` for enough
// bytes to tell; consumes nothing.
enum class FirstBytes { Proposal, OtherClc, Other, Nothing, Closed };
FirstBytes classify(int fd, int timeout_ms);
// classify(fd, 0) from a look already taken.
FirstBytes classify(const FirstLook& look);

} // namespace usmc::clc
