// SPDX-License-Identifier: MIT
// SMC-R's verbs backend against a mock of the verbs table: the queue pair
// goes INIT, RTR, RTS with the kernel's attributes (net/smc/smc_ib.c), a
// client stops at RTR until CONFIRM LINK, and a refused step is named.
#include "engine/smcr/qp_setup.hpp"
#include "engine/smcr/verbs_table.hpp"

#include <catch2/catch.hpp>

#include <cerrno>
#include <vector>

using namespace usmc::smcr;
using namespace usmc::smcr::verbs;

namespace {

struct Call {
    ibv_qp* qp;
    ibv_qp_attr attr;
    int mask;
};
std::vector<Call> g_calls;
int g_fail_at = -1; // the call (0-based) that returns EINVAL

int mock_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
    int n = int(g_calls.size());
    g_calls.push_back({qp, *attr, mask});
    return n == g_fail_at ? EINVAL : 0;
}

Table mock() {
    g_calls.clear();
    g_fail_at = -1;
    Table t;
    t.modify_qp = mock_modify_qp;
    return t;
}

LinkParams params() {
    LinkParams p;
    p.port = 1;
    p.sgid_index = 3;
    p.path_mtu = IBV_MTU_4096;
    p.peer_mtu = IBV_MTU_2048;
    for (int i = 0; i < 16; ++i)
        p.peer_gid[i] = uint8_t(0xA0 + i);
    p.peer_qpn = 0x1234;
    p.peer_psn = 0x1abcdef; // more than 24 bits: only 24 go
    p.psn = 0x00beef;
    return p;
}

} // namespace

TEST_CASE("smcr verbs: a server's link goes INIT, RTR, RTS with the kernel's attributes") {
    Table t = mock();
    ibv_qp* qp = reinterpret_cast<ibv_qp*>(0x1000);
    REQUIRE(ready_link(t, qp, params(), true) == Step::None);
    REQUIRE(g_calls.size() == 3);
    for (auto& c : g_calls)
        CHECK(c.qp == qp);

    const Call& init = g_calls[0];
    CHECK(init.attr.qp_state == IBV_QPS_INIT);
    CHECK(init.attr.port_num == 1);
    CHECK(init.attr.pkey_index == 0);
    CHECK(init.attr.qp_access_flags == (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
    CHECK(init.mask == (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT));

    const Call& rtr = g_calls[1];
    CHECK(rtr.attr.qp_state == IBV_QPS_RTR);
    CHECK(rtr.attr.path_mtu == IBV_MTU_2048); // the smaller of the two
    CHECK(rtr.attr.dest_qp_num == 0x1234);
    CHECK(rtr.attr.rq_psn == 0xabcdef);
    CHECK(rtr.attr.max_dest_rd_atomic == 1);
    CHECK(rtr.attr.min_rnr_timer == 5);
    CHECK(rtr.attr.ah_attr.is_global == 1);
    CHECK(rtr.attr.ah_attr.port_num == 1);
    CHECK(rtr.attr.ah_attr.grh.sgid_index == 3);
    CHECK(rtr.attr.ah_attr.grh.hop_limit == 1);
    CHECK(rtr.attr.ah_attr.grh.dgid.raw[0] == 0xA0);
    CHECK(rtr.attr.ah_attr.grh.dgid.raw[15] == 0xAF);
    CHECK(rtr.mask == (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER));

    const Call& rts = g_calls[2];
    CHECK(rts.attr.qp_state == IBV_QPS_RTS);
    CHECK(rts.attr.timeout == 15);
    CHECK(rts.attr.retry_cnt == 7);
    CHECK(rts.attr.rnr_retry == 7);
    CHECK(rts.attr.sq_psn == 0x00beef);
    CHECK(rts.attr.max_rd_atomic == 1);
    CHECK(rts.mask == (IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_SQ_PSN |
                       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC));
}

TEST_CASE("smcr verbs: a client's link waits in RTR for CONFIRM LINK") {
    Table t = mock();
    ibv_qp* qp = reinterpret_cast<ibv_qp*>(0x2000);
    REQUIRE(ready_link(t, qp, params(), false) == Step::None);
    REQUIRE(g_calls.size() == 2);
    CHECK(g_calls[1].attr.qp_state == IBV_QPS_RTR);
    REQUIRE(to_rts(t, qp, params()));
    REQUIRE(g_calls.size() == 3);
    CHECK(g_calls[2].attr.qp_state == IBV_QPS_RTS);
    REQUIRE(to_err(t, qp));
    CHECK(g_calls[3].attr.qp_state == IBV_QPS_ERR);
    CHECK(g_calls[3].mask == IBV_QP_STATE);
}

TEST_CASE("smcr verbs: the step the device refuses is named, and nothing after it runs") {
    for (int fail = 0; fail < 3; ++fail) {
        Table t = mock();
        g_fail_at = fail;
        errno = 0;
        Step s = ready_link(t, reinterpret_cast<ibv_qp*>(0x3000), params(), true);
        CHECK(s == (fail == 0 ? Step::Init : fail == 1 ? Step::Rtr : Step::Rts));
        CHECK(errno == EINVAL);
        CHECK(g_calls.size() == size_t(fail + 1));
    }
}

TEST_CASE("smcr verbs: the queue pair to create") {
    ibv_cq* scq = reinterpret_cast<ibv_cq*>(0x10);
    ibv_cq* rcq = reinterpret_cast<ibv_cq*>(0x20);
    ibv_qp_init_attr a = qp_init_attr(scq, rcq, 16);
    CHECK(a.qp_type == IBV_QPT_RC);
    CHECK(a.send_cq == scq);
    CHECK(a.recv_cq == rcq);
    CHECK(a.cap.max_send_wr == 48);
    CHECK(a.cap.max_recv_wr == 48);
    CHECK(a.cap.max_send_sge == 2);
    CHECK(a.cap.max_recv_sge == 1);
    CHECK(a.cap.max_inline_data == 0);
    CHECK(a.sq_sig_all == 0);
    CHECK(a.srq == nullptr);
}

TEST_CASE("smcr verbs: libibverbs is found by dlopen, or the reason is said") {
    const char* why = nullptr;
    const Table* t = load(&why);
    if (t) {
        CHECK(t->complete());
        CHECK(why == nullptr);
    } else {
        REQUIRE(why != nullptr);
        CHECK(std::string(why).find("libibverbs") != std::string::npos);
    }
    // Loaded once: the same answer again.
    const char* why2 = nullptr;
    CHECK(load(&why2) == t);
}
