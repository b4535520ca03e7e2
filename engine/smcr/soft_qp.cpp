// SPDX-License-Identifier: MIT
#include "engine/smcr/soft_qp.hpp"

#include "engine/base/wire_be.hpp"

#include <algorithm>
#include <cstring>

namespace usmc::smcr::soft {

namespace {
// PSNs count frames from 1; compared as serial numbers.
bool psn_le(uint32_t a, uint32_t b) {
    return int32_t(a - b) <= 0;
}
} // namespace

Qp::Qp(const Options& o) : opt_(o), next_psn_(o.first_psn), expect_psn_(o.peer_first_psn) {}

bool Qp::room_for(uint32_t len) const {
    return unacked_.size() < opt_.max_send_wr && unacked_bytes_ + len <= opt_.max_unacked_bytes;
}

Qp::Region Qp::reg_mr(void* base, size_t len) {
    if (!base || len == 0 || len > (size_t{1} << 32)) return {};
    Mr m{next_rkey_, next_vaddr_, static_cast<uint8_t*>(base), len};
    next_rkey_ += 0x101; // never 0, never reused before 2^24 registrations
    if (next_rkey_ == 0) next_rkey_ = 0x101;
    // Addresses the peer names a region by: apart, so an address past one
    // region's end never falls in the next.
    next_vaddr_ += (len + 0xfff) / 0x1000 * 0x1000 + 0x1000;
    mrs_.push_back(m);
    return {m.rkey, m.vaddr};
}

void Qp::dereg_mr(uint32_t rkey) {
    mrs_.erase(
        std::remove_if(mrs_.begin(), mrs_.end(), [&](const Mr& m) { return m.rkey == rkey; }),
        mrs_.end());
}

void Qp::frame(uint8_t type, uint8_t syndrome, uint32_t psn, uint32_t rkey, uint32_t len,
               uint64_t addr, const void* payload) {
    size_t at = out_.size();
    out_.resize(at + kHeaderLen + len);
    uint8_t* h = &out_[at];
    h[0] = type;
    h[1] = syndrome;
    h[2] = h[3] = 0;
    be::put32(h + 4, psn);
    be::put32(h + 8, rkey);
    be::put32(h + 12, len);
    be::put64(h + 16, addr);
    if (len) std::memcpy(h + kHeaderLen, payload, len);
}

bool Qp::post_write(uint64_t wr_id, const void* src, uint32_t len, uint32_t rkey,
                    uint64_t remote_addr, bool signaled) {
    if (error_ || !room_for(len)) return false;
    const uint8_t* p = static_cast<const uint8_t*>(src);
    uint32_t off = 0;
    uint32_t psn = 0;
    do {
        uint32_t n = std::min(kMaxPayload, len - off);
        psn = next_psn_++;
        frame(kWrite, 0, psn, rkey, n, remote_addr + off, p + off);
        off += n;
    } while (off < len);
    unacked_.push_back({wr_id, IBV_WC_RDMA_WRITE, len, psn, signaled});
    unacked_bytes_ += len;
    return true;
}

bool Qp::post_send(uint64_t wr_id, const void* src, uint32_t len, bool signaled) {
    if (error_ || len > kMaxSend || !room_for(len)) return false;
    uint32_t psn = next_psn_++;
    frame(kSend, 0, psn, 0, len, 0, src);
    unacked_.push_back({wr_id, IBV_WC_SEND, len, psn, signaled});
    unacked_bytes_ += len;
    return true;
}

bool Qp::post_recv(uint64_t wr_id, void* buf, uint32_t len) {
    if (error_) return false;
    recvs_.push_back({wr_id, static_cast<uint8_t*>(buf), len});
    act_on_frames(); // a SEND that waited for it (RNR) goes on now
    return true;
}

void Qp::on_input(const uint8_t* p, size_t n) {
    if (error_ || n == 0) return;
    in_.insert(in_.end(), p, p + n);
    act_on_frames();
}

void Qp::take_output(std::vector<uint8_t>& out) {
    out.insert(out.end(), out_.begin(), out_.end());
    out_.clear();
}

size_t Qp::poll(Completion* out, size_t max) {
    size_t n = 0;
    while (n < max && !done_.empty()) {
        out[n++] = done_.front();
        done_.pop_front();
    }
    return n;
}

void Qp::fail() {
    to_error(false, 0, 0);
}

const Qp::Mr* Qp::region_for(uint32_t rkey, uint64_t addr, uint32_t len) const {
    for (const Mr& m : mrs_) {
        if (m.rkey != rkey) continue;
        // [addr, addr + len) inside [vaddr, vaddr + len), without overflow.
        if (addr < m.vaddr || addr - m.vaddr > m.len || len > m.len - (addr - m.vaddr))
            return nullptr;
        return &m;
    }
    return nullptr;
}

bool Qp::act_on_frames() {
    bool any_placed = false; // (PSN 0 is a PSN too, after the wrap)
    uint32_t placed = 0;     // the last of the peer's frames placed in this call
    bool go = true;
    while (go && !error_) {
        size_t have = in_.size() - in_off_;
        if (have < kHeaderLen) break;
        const uint8_t* h = &in_[in_off_];
        uint8_t type = h[0];
        uint32_t len = be::get32(h + 12);
        bool payload_ok = (type == kWrite && len <= kMaxPayload) ||
                          (type == kSend && len <= kMaxSend) ||
                          ((type == kAck || type == kNak) && len == 0);
        if (!payload_ok) {
            to_error(true, kRemoteInvalid, expect_psn_);
            break;
        }
        if (have < kHeaderLen + len) break; // the rest of the frame is on its way
        uint32_t psn = be::get32(h + 4);
        go = act(h, h + kHeaderLen);
        if (!go) break; // a SEND waits for a receive (RNR): this frame stays
        if (type == kWrite || type == kSend) {
            placed = psn;
            any_placed = true;
        }
        in_off_ += kHeaderLen + len;
    }
    if (any_placed && !error_) frame(kAck, 0, placed, 0, 0, 0, nullptr);
    // What was acted on goes: the buffer holds at most the frame in hand
    // (or, behind a waiting SEND, what the caller's bound lets in).
    if (in_off_ > 0) {
        in_.erase(in_.begin(), in_.begin() + long(in_off_));
        in_off_ = 0;
    }
    return !error_;
}

bool Qp::act(const uint8_t* h, const uint8_t* payload) {
    uint8_t type = h[0];
    uint32_t psn = be::get32(h + 4);
    uint32_t len = be::get32(h + 12);
    switch (type) {
    case kWrite:
    case kSend: {
        if (psn != expect_psn_) { // a frame lost or forged: the stream is not an RC peer's
            to_error(true, kRemoteInvalid, expect_psn_);
            return false;
        }
        if (type == kWrite) {
            const Mr* m = region_for(be::get32(h + 8), be::get64(h + 16), len);
            if (!m) {
                ++access_errors_;
                to_error(true, kRemoteAccess, psn);
                return false;
            }
            if (len) std::memcpy(m->base + (be::get64(h + 16) - m->vaddr), payload, len);
        } else {
            if (recvs_.empty()) return false; // receiver not ready: wait, in order
            RecvWr r = recvs_.front();
            recvs_.pop_front();
            if (len > r.len) {
                done_.push_back({r.wr_id, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV, 0});
                to_error(true, kRemoteInvalid, psn);
                return false;
            }
            if (len) std::memcpy(r.buf, payload, len);
            done_.push_back({r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, len});
        }
        ++expect_psn_;
        return true;
    }
    case kAck:
        if (!psn_le(psn, next_psn_ - 1)) { // acknowledges what was never sent
            to_error(true, kRemoteInvalid, expect_psn_);
            return false;
        }
        acked(psn);
        return true;
    case kNak: {
        if (!psn_le(psn, next_psn_ - 1)) {
            to_error(false, 0, 0);
            return false;
        }
        // What came before the refused frame was placed; the request it
        // belongs to fails with the peer's reason; the rest is flushed.
        acked(psn - 1);
        if (!unacked_.empty()) {
            SendWr w = unacked_.front();
            unacked_.pop_front();
            unacked_bytes_ -= w.byte_len;
            done_.push_back({w.wr_id,
                             h[1] == kRemoteAccess ? IBV_WC_REM_ACCESS_ERR : IBV_WC_REM_INV_REQ_ERR,
                             w.opcode, 0});
        }
        to_error(false, 0, 0);
        return false;
    }
    default:
        to_error(true, kRemoteInvalid, expect_psn_);
        return false;
    }
}

void Qp::acked(uint32_t psn) {
    while (!unacked_.empty() && psn_le(unacked_.front().last_psn, psn)) {
        SendWr w = unacked_.front();
        unacked_.pop_front();
        unacked_bytes_ -= w.byte_len;
        if (w.signaled) done_.push_back({w.wr_id, IBV_WC_SUCCESS, w.opcode, w.byte_len});
    }
}

void Qp::to_error(bool tell_peer, uint8_t syndrome, uint32_t psn) {
    if (error_) return;
    error_ = true;
    if (tell_peer) frame(kNak, syndrome, psn, 0, 0, 0, nullptr);
    // Every request still outstanding completes, flushed, signalled or not.
    for (const SendWr& w : unacked_)
        done_.push_back({w.wr_id, IBV_WC_WR_FLUSH_ERR, w.opcode, 0});
    unacked_.clear();
    unacked_bytes_ = 0;
    for (const RecvWr& r : recvs_)
        done_.push_back({r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0});
    recvs_.clear();
    in_.clear();
    in_off_ = 0;
}

} // namespace usmc::smcr::soft
