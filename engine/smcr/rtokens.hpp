// SPDX-License-Identifier: MIT
#pragma once
// A link group's remote tokens: the peer's RMBs as this side may WRITE
// into them (rkey, address), one table per group (the kernel's
// rtokens[SMC_RMBS_PER_LGR_MAX], for the one link usmc runs), and the
// responder side of the CONFIRM RKEY and DELETE RKEY flows that fill and
// empty it. A connection on the group finds its peer's RMB by the rkey its
// CLC message named.
//
// The peer writes every field: a full table, an rkey of 0, a token for a
// link we do not have are answered (negative, or the error mask), never
// trusted further.
#include "engine/smcr/llc_msg.hpp"

#include <array>
#include <cstdint>
#include <optional>

namespace usmc::smcr {

inline constexpr int kRmbsPerGroup = 255; // SMC_RMBS_PER_LGR_MAX

struct Rtoken {
    uint32_t rkey = 0;
    uint64_t vaddr = 0;
};

class RtokenTable {
  public:
    // Its index; the same index for a token already there; -1 when full or
    // the rkey is 0 (never a registered region's).
    int add(uint32_t rkey, uint64_t vaddr);
    bool remove(uint32_t rkey); // false: not there
    std::optional<Rtoken> at(int index) const;
    int find(uint32_t rkey) const; // -1: not there
    int size() const { return used_; }

    // The responder's answer to a request (`link_id`: our link's id; a
    // token for any other link is not ours to keep). CONFIRM RKEY: the
    // sending link's token added, or a negative response. DELETE RKEY: each
    // named key removed; the error mask has bit 7 - i for the i-th key not
    // found, and a negative response if any was.
    llc::ConfirmRkey answer(const llc::ConfirmRkey& req);
    llc::DeleteRkey answer(const llc::DeleteRkey& req);

  private:
    std::array<Rtoken, kRmbsPerGroup> tokens_{};
    std::array<bool, kRmbsPerGroup> used_at_{};
    int used_ = 0;
};

// The RMB slots of a link group on this side: a connection claims one
// while it lives; the group takes no more than `max_conns` (16..255,
// smcr_max_conns_per_lgr) connections.
class RmbSlots {
  public:
    explicit RmbSlots(int max_conns) : max_(max_conns) {}
    int claim(); // a free slot, or -1 when the group is full
    void release(int slot);
    int in_use() const { return used_; }
    bool full() const { return used_ >= max_; }

  private:
    int max_;
    int used_ = 0;
    std::array<bool, kRmbsPerGroup> busy_{};
};

} // namespace usmc::smcr
