// SPDX-License-Identifier: MIT
#include "engine/sock/diag.hpp"

#include <atomic>
#include <mutex>
#include <new>

namespace usmc::diag {

namespace {
std::mutex g_mu;     // one writer of the records at a time
uint32_t g_next = 0; // where the search for a free record starts (under g_mu)

void set_gen(statseg::ConnRecord& r, uint32_t gen) {
    std::atomic_ref<uint32_t>(r.gen).store(gen, std::memory_order_release);
}

// The odd generation first: an acquire read-modify-write keeps the record's
// writes after it (what a release fence would, which TSan cannot follow).
void begin_write(statseg::ConnRecord& r, uint32_t gen) {
    std::atomic_ref<uint32_t>(r.gen).exchange(gen, std::memory_order_acq_rel);
}
} // namespace

statseg::ConnRecord record_of(const SmcConn& c, int fd) {
    statseg::ConnRecord r{};
    r.fd = fd;
    transport::BufferView b = c.transport.buffers();
    r.dmb_fd = b.fd;
    r.dmb_size = b.size;
    r.dmb_offset = b.offset;
    r.peer_dmb_size = b.peer_size;
    r.dmb_ino = b.ino;
    r.peer_dmb_ino = b.peer_ino;
    r.gid = c.gid;
    r.peer_gid = c.peer_gid;
    r.token = c.token;
    r.peer_token = c.peer_token;
    return r;
}

void publish(statseg::Header* seg, SmcConn& c, int fd) {
    if (!seg || c.diag_slot >= 0) return;
    std::lock_guard lock(g_mu);
    uint32_t n = seg->conn_slots;
    if (n == 0 || n > statseg::kMaxConnSlots) return;
    statseg::ConnRecord* recs = statseg::records_of(seg);
    for (uint32_t k = 0; k < n; ++k) {
        uint32_t i = (g_next + k) % n;
        statseg::ConnRecord& r = recs[i];
        uint32_t gen = std::atomic_ref<uint32_t>(r.gen).load(std::memory_order_relaxed);
        if (gen % 4 != 0) continue;
        begin_write(r, gen + 1); // being written
        statseg::ConnRecord fresh = record_of(c, fd);
        fresh.gen = gen + 1;
        r = fresh;
        set_gen(r, gen + 2); // live
        c.diag_slot = static_cast<int32_t>(i);
        g_next = i + 1;
        return;
    }
}

void withdraw(statseg::Header* seg, SmcConn& c) {
    if (!seg || c.diag_slot < 0) return;
    std::lock_guard lock(g_mu);
    uint32_t i = static_cast<uint32_t>(c.diag_slot);
    c.diag_slot = -1;
    if (i >= seg->conn_slots) return;
    statseg::ConnRecord& r = statseg::records_of(seg)[i];
    uint32_t gen = std::atomic_ref<uint32_t>(r.gen).load(std::memory_order_relaxed);
    if (!statseg::record_live(gen)) return;
    begin_write(r, gen + 1);
    statseg::ConnRecord empty{};
    empty.gen = gen + 1;
    r = empty;
    set_gen(r, gen + 2); // free again
}

void after_fork_child() {
    new (&g_mu) std::mutex();
    g_next = 0;
}

} // namespace usmc::diag
