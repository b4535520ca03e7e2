// SPDX-License-Identifier: MIT
#pragma once
// A link's RC queue pair, brought up with the attributes the kernel's SMC-R
// uses (net/smc/smc_ib.c): INIT with local and remote write access; RTR
// toward the peer's GID, MAC, QP number and starting PSN, with the smaller
// of the two path MTUs, one incoming read or atomic, min_rnr_timer 5; RTS
// with timeout 15 (4.096 us * 2^15), retry_cnt 7 (seven retries: the
// kernel's comment says infinite, which only rnr_retry 7 is) and rnr_retry 7
// (infinite), our starting PSN, one outstanding read. A server's link goes
// to RTS at once; a client's after the server's CONFIRM LINK (ready_link,
// then to_rts). ERR ends it: every posted work request completes flushed.
#include "engine/smcr/llc_msg.hpp"
#include "engine/smcr/verbs_table.hpp"

#include <cstdint>

namespace usmc::smcr::verbs {

inline constexpr uint8_t kMinRnrTimer = 5;
inline constexpr uint8_t kTimeout = 15;
inline constexpr uint8_t kRetryCnt = 7; // 7 retries (the most there are)
inline constexpr uint8_t kRnrRetry = 7; // 7: infinite

struct LinkParams {
    uint8_t port = 1;
    uint8_t sgid_index = 0;
    ibv_mtu path_mtu = IBV_MTU_1024; // our port's active MTU
    ibv_mtu peer_mtu = IBV_MTU_1024; // from the peer's CLC Accept or Confirm
    llc::Gid peer_gid{};
    llc::Mac peer_mac{};
    uint32_t peer_qpn = 0;
    uint32_t peer_psn = 0; // 24 bits
    uint32_t psn = 0;      // ours, 24 bits
};

struct QpStep {
    ibv_qp_attr attr{};
    int mask = 0;
};
QpStep init_step(const LinkParams& p);
QpStep rtr_step(const LinkParams& p);
QpStep rts_step(const LinkParams& p);
QpStep err_step();

// The queue pair to create (smc_ib_create_queue_pair): RC, every send
// signalled only on request, no inline data, `wr` send and receive slots
// times 3 (a SEND may follow up to 2 RDMA WRITEs).
ibv_qp_init_attr qp_init_attr(ibv_cq* send_cq, ibv_cq* recv_cq, uint32_t wr);

enum class Step : uint8_t { None, Init, Rtr, Rts };
// INIT and RTR, and for a server RTS too. Step::None if all went, else the
// step the device refused (errno is its error): the caller declines with
// ERR_RDYLNK and destroys the QP.
Step ready_link(const Table& t, ibv_qp* qp, const LinkParams& p, bool server);
// A client's link, once CONFIRM LINK came.
bool to_rts(const Table& t, ibv_qp* qp, const LinkParams& p);
bool to_err(const Table& t, ibv_qp* qp);

} // namespace usmc::smcr::verbs
