// SPDX-License-Identifier: MIT
#include "engine/smcr/rtokens.hpp"

namespace usmc::smcr {

int RtokenTable::add(uint32_t rkey, uint64_t vaddr) {
    if (rkey == 0) return -1;
    int free_at = -1;
    for (int i = 0; i < kRmbsPerGroup; ++i) {
        if (used_at_[i]) {
            if (tokens_[i].rkey == rkey && tokens_[i].vaddr == vaddr) return i;
        } else if (free_at < 0) {
            free_at = i;
        }
    }
    if (free_at < 0) return -1;
    used_at_[free_at] = true;
    tokens_[free_at] = {rkey, vaddr};
    ++used_;
    return free_at;
}

int RtokenTable::find(uint32_t rkey) const {
    for (int i = 0; i < kRmbsPerGroup; ++i)
        if (used_at_[i] && tokens_[i].rkey == rkey) return i;
    return -1;
}

bool RtokenTable::remove(uint32_t rkey) {
    int i = find(rkey);
    if (i < 0) return false;
    used_at_[i] = false;
    tokens_[i] = {};
    --used_;
    return true;
}

std::optional<Rtoken> RtokenTable::at(int index) const {
    if (index < 0 || index >= kRmbsPerGroup || !used_at_[index]) return std::nullopt;
    return tokens_[index];
}

llc::ConfirmRkey RtokenTable::answer(const llc::ConfirmRkey& req) {
    llc::ConfirmRkey resp;
    resp.resp = true;
    // rt[0] is the sending link's, which is ours (one link); the others
    // name links of a group usmc does not run, and are not kept.
    // Refused (a full table): negative, and "retry", as the kernel answers.
    resp.negative = resp.retry = add(req.rt[0].rkey, req.rt[0].vaddr) < 0;
    return resp;
}

llc::DeleteRkey RtokenTable::answer(const llc::DeleteRkey& req) {
    llc::DeleteRkey resp;
    resp.resp = true;
    resp.count = req.count;
    resp.rkeys = req.rkeys;
    for (int i = 0; i < req.count && i < llc::kDeleteRkeyMax; ++i)
        if (!remove(req.rkeys[i])) resp.err_mask |= uint8_t(0x80 >> i);
    resp.negative = resp.err_mask != 0;
    return resp;
}

int RmbSlots::claim() {
    if (full()) return -1;
    for (int i = 0; i < kRmbsPerGroup; ++i) {
        if (!busy_[i]) {
            busy_[i] = true;
            ++used_;
            return i;
        }
    }
    return -1;
}

void RmbSlots::release(int slot) {
    if (slot < 0 || slot >= kRmbsPerGroup || !busy_[slot]) return;
    busy_[slot] = false;
    --used_;
}

} // namespace usmc::smcr
