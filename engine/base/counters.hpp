// SPDX-License-Identifier: MIT
#pragma once
// The per-process counters published in the stats segment. `usmc stats`
// sums them over live processes, like `smcd stats`.
#include <bit>
#include <cstdint>

namespace usmc::counters {

// X(name, description)
#define USMC_COUNTERS(X)                                                                           \
    X(sockets_tracked, "TCP sockets seen by the shim")                                             \
    X(sockets_af_smc, "AF_SMC sockets created (mapped to TCP)")                                    \
    X(listens, "listening sockets")                                                                \
    X(client_connects, "connections initiated (connect)")                                          \
    X(server_accepts, "connections accepted")                                                      \
    X(conn_tcp, "connections using TCP")                                                           \
    X(conn_smcd, "connections using SMC-D")                                                        \
    X(conn_smcr, "connections using SMC-R")                                                        \
    X(fallbacks, "connections that fell back to TCP")                                              \
    X(handshake_errors, "SMC handshake errors")                                                    \
    X(sol_smc_set, "setsockopt(SOL_SMC) calls")                                                    \
    X(sol_smc_get, "getsockopt(SOL_SMC) calls")                                                    \
    X(fd_untracked, "TCP sockets beyond the fd table")                                             \
    X(forks, "fork children that made stats files of their own")                                   \
    X(smcd_bytes_tx, "bytes sent over SMC-D")                                                      \
    X(smcd_bytes_rx, "bytes received over SMC-D")                                                  \
    X(notifications, "wake-ups sent to a waiting peer (system calls)")                             \
    X(notifications_suppressed, "wake-ups not needed: the peer was not waiting")                   \
    X(cursor_updates, "cursor publications in shared memory")                                      \
    X(dmb_created, "DMBs created (new shared memory)")                                             \
    X(dmb_reused, "DMBs reused for a peer of the same user")                                       \
    X(peer_maps_reused, "peer DMBs found mapped already (no mmap)")                                \
    X(late_proposals, "CLC Proposals declined after the connection went TCP")                      \
    X(moved_to_tcp, "SMC-D connections moved to TCP with their peer (exec, seccomp)")              \
    X(moved_bytes_lost, "bytes a move to TCP could not hand over (both ends moved at once)")       \
    X(handshakes_inflight, "gauge: server handshakes queued or running")                           \
    X(accept_queue, "gauge: SMC connections handshaken, not yet accepted")                         \
    X(backlog_stalls, "times accept() stopped taking from the kernel (backlog full)")              \
    X(hs_congestion_onsets, "times the server handshake queue became congested")                   \
    X(hs_limit_bypassed, "connects that skipped SMC: listener congested (SMC_LIMIT_HS)")           \
    X(hs_client_bypassed, "connects that skipped SMC: own client handshakes congested (LIMIT_HS)") \
    X(hs_congested_declines, "Proposals declined at once: handshake queue congested")              \
    X(client_async_handshakes, "nonblocking connects handshaken on a worker")                      \
    X(busy_poll_hits, "spins (recv/send, epoll_wait, poll) that found their event (no sleep)")     \
    X(busy_poll_misses, "spins that ended with nothing (then slept)")                              \
    X(busy_poll_yields, "waits that slept at once: more runnable threads than CPUs")               \
    X(connects_watched, "nonblocking connects whose Proposal waited for the TCP connect")          \
    X(client_handshakes_on_watch, "client handshakes the connect watch finished, no worker")       \
    X(links_made, "Unix links made to a peer process's endpoint (kept; a few per pair at most)")   \
    X(dmb_bytes, "gauge: bytes of this process's DMBs held by connections")                        \
    X(dmb_spare_bytes, "gauge: bytes of this process's DMBs kept for reuse")                       \
    X(learn_paid, "SMC-D connections that paid for their set-up (learn_smc)")                      \
    X(learn_unpaid, "SMC-D connections that ended without paying for their set-up")                \
    X(learn_probes, "connects run SMC-D to re-measure while learned TCP (probes)")                 \
    X(dmb_segments, "DMB segments created (one memfd of several DMB slots for peers of one user)") \
    X(dmb_slots, "DMBs taken as a slot of a segment (no new shared memory, no descriptor)")        \
    X(lgr_first_contacts,                                                                          \
      "SMC-D connections that attached (first contact of a link group or segment)")                \
    X(lgr_reused, "SMC-D connections on a link group: no attach, nothing passed")                  \
    X(lgr_no_confirm,                                                                              \
      "of those, up at the Accept: it took the DMB the Proposal named, no Confirm")                \
    X(lgr_peer_gone, "link groups dropped when their peer process exited (its segments unmapped)") \
    X(space_backstop_unfills, "writers made writable by the backstop, not by the peer's bell")     \
    X(hs_client_connecting, "gauge: client handshakes waiting for their TCP connect (event loop)") \
    X(hs_client_await_accept, "gauge: client handshakes waiting for the Accept (event loop)")      \
    X(hs_client_attaching, "gauge: client handshakes waiting for their attach (event loop)")       \
    X(hs_client_blocking, "gauge: client handshakes a thread blocks for (worker or connect())")    \
    X(hs_server_await_proposal, "gauge: server handshakes waiting for the Proposal (event loop)")  \
    X(hs_server_begin, "gauge: server handshakes on a worker, up to the Accept")                   \
    X(hs_server_await_confirm, "gauge: server handshakes waiting for the Confirm (event loop)")    \
    X(hs_server_blocking, "gauge: server handshakes a worker blocks for (attach, Confirm's rest)") \
    X(server_begins_here, "server handshakes begun where the Proposal was found, no worker")       \
    X(hs_unexpected_events, "handshake events their state did not expect (a bug: logged)")         \
    X(sigs_spared, "ended connections whose `sig` was kept for the next (wakeup::park)")           \
    X(sigs_reused, "connections that took a kept `sig`: no socket, bind or close of their own")    \
    X(dmb_downgraded, "DMBs smaller than configured: the cap shared by a crowd (crowd_size)")

enum Id : uint8_t {
#define USMC_COUNTER_ID(name, text) name,
    USMC_COUNTERS(USMC_COUNTER_ID)
#undef USMC_COUNTER_ID
        kCount
};

// Room reserved in the segment, so later counters keep the layout stable.
constexpr unsigned kSlots = 64;
static_assert(kCount <= kSlots);

// Gauges go up and down; an exited process's value is not added to the totals.
bool is_gauge(Id id);

const char* name_of(Id id);
const char* description_of(Id id);

// --- RX and TX, as `smcd stats` shows them (the kernel's smc_stats.h) ---
//
// Size buckets of the kernel's SMC_BUF_*: up to 8 KiB, 16 KiB, ... 1 MiB,
// above 1 MiB. A request falls in the bucket of the length it asked for
// (the iovecs' total, not what the call moved), a buffer in that of its size.
constexpr unsigned kBuckets = 9;
constexpr unsigned bucket_of(uint64_t len) {
    if (len == 0) return 0;
    unsigned pos = static_cast<unsigned>(std::bit_width((len - 1) >> 13));
    return pos < kBuckets - 1 ? pos : kBuckets - 1;
}
const char* bucket_name(unsigned bucket); // "8KB" .. "1024KB", ">1024KB"

// One direction's counters in the stats segment. Counted on the SMC-D data
// path with one relaxed increment per call (the request's bucket, or
// `no_data`), and a compare for the rare ones; bytes are smcd_bytes_rx/tx.
enum Traffic : uint8_t {
    kReqs = 0,                  // calls that moved data, by request size (kBuckets slots)
    kNoData = kReqs + kBuckets, // calls that moved nothing (EAGAIN, timeout, EOF, error)
    kBufFull,                   // RX: our DMB was full when read; TX: unused (no send buffer)
    kBufFullPeer,               // TX: sends that found the peer's DMB full (waited or EAGAIN)
    kTooSmallPeer,              // TX: sends larger than the peer's DMB ring
    kBufs,                      // buffers of new connections, by size (kBuckets slots)
    kTrafficCount = kBufs + kBuckets,
};
constexpr unsigned kTrafficSlots = 32; // room reserved in the segment
static_assert(kTrafficCount <= kTrafficSlots);
enum Dir : uint8_t { kRx = 0, kTx = 1 };

} // namespace usmc::counters
