// SPDX-License-Identifier: MIT
#include "engine/smcr/qp_setup.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace usmc::smcr::verbs {

QpStep init_step(const LinkParams& p) {
    QpStep s;
    s.attr.qp_state = IBV_QPS_INIT;
    s.attr.pkey_index = 0;
    s.attr.port_num = p.port;
    s.attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    s.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT;
    return s;
}

QpStep rtr_step(const LinkParams& p) {
    QpStep s;
    s.attr.qp_state = IBV_QPS_RTR;
    s.attr.path_mtu = std::min(p.path_mtu, p.peer_mtu);
    s.attr.ah_attr.port_num = p.port;
    s.attr.ah_attr.is_global = 1; // RoCE: every packet carries a GRH
    s.attr.ah_attr.grh.sgid_index = p.sgid_index;
    s.attr.ah_attr.grh.hop_limit = 1;
    std::memcpy(s.attr.ah_attr.grh.dgid.raw, p.peer_gid.data(), p.peer_gid.size());
    // (The destination MAC: libibverbs resolves it from the GID for RoCE.)
    s.attr.dest_qp_num = p.peer_qpn;
    s.attr.rq_psn = p.peer_psn & 0xffffff;
    s.attr.max_dest_rd_atomic = 1;
    s.attr.min_rnr_timer = kMinRnrTimer;
    s.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    return s;
}

QpStep rts_step(const LinkParams& p) {
    QpStep s;
    s.attr.qp_state = IBV_QPS_RTS;
    s.attr.timeout = kTimeout;
    s.attr.retry_cnt = kRetryCnt;
    s.attr.rnr_retry = kRnrRetry;
    s.attr.sq_psn = p.psn & 0xffffff;
    s.attr.max_rd_atomic = 1;
    s.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_SQ_PSN | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC;
    return s;
}

QpStep err_step() {
    QpStep s;
    s.attr.qp_state = IBV_QPS_ERR;
    s.mask = IBV_QP_STATE;
    return s;
}

ibv_qp_init_attr qp_init_attr(ibv_cq* send_cq, ibv_cq* recv_cq, uint32_t wr) {
    ibv_qp_init_attr a{};
    a.send_cq = send_cq;
    a.recv_cq = recv_cq;
    a.cap.max_send_wr = wr * 3;
    a.cap.max_recv_wr = wr * 3;
    a.cap.max_send_sge = 2;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = 0;
    a.sq_sig_all = 0;
    a.qp_type = IBV_QPT_RC;
    return a;
}

namespace {
bool apply(const Table& t, ibv_qp* qp, QpStep s) {
    int rc = t.modify_qp(qp, &s.attr, s.mask);
    if (rc != 0) errno = rc > 0 ? rc : EIO; // (verbs return the error)
    return rc == 0;
}
} // namespace

Step ready_link(const Table& t, ibv_qp* qp, const LinkParams& p, bool server) {
    if (!apply(t, qp, init_step(p))) return Step::Init;
    if (!apply(t, qp, rtr_step(p))) return Step::Rtr;
    if (server && !apply(t, qp, rts_step(p))) return Step::Rts;
    return Step::None;
}

bool to_rts(const Table& t, ibv_qp* qp, const LinkParams& p) {
    return apply(t, qp, rts_step(p));
}

bool to_err(const Table& t, ibv_qp* qp) {
    return apply(t, qp, err_step());
}

} // namespace usmc::smcr::verbs
