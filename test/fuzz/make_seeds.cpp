// SPDX-License-Identifier: MIT
// Writes the seed corpora of the binary fuzz targets: real messages from
// the encoders (CLC), control lines with valid cursors (CDC), and link
// messages as the kernel delivers them (ism_wire), in the input layouts the
// targets document. The config seeds are TOML files kept as text.
//
//   usmc-fuzz-seeds DIR    (DIR/clc, DIR/cdc, DIR/ism_wire, DIR/smcr_msg, DIR/soft_qp
//                          must exist)
#include "engine/clc/clc.hpp"
#include "engine/smcd/cdc_line.hpp"
#include "engine/smcd/ism_wire.hpp"
#include "engine/smcr/cdc_msg.hpp"
#include "engine/smcr/llc_msg.hpp"
#include "engine/smcr/soft_qp.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace usmc;

namespace {

std::string g_dir;

void write(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string path = g_dir + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f)) {
        std::perror(path.c_str());
        std::exit(1);
    }
}

void put(std::vector<uint8_t>& out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i)
        out.push_back(uint8_t(v >> (8 * i)));
}

void clc_seeds() {
    clc::Proposal p;
    p.peer_id = {1, 2, 3, 4, 5, 6, 7, 8};
    p.ism_gid_v1 = 0x1122334455667788ull;
    p.ism_chid = clc::kChidEmulated;
    p.ism_v2 = {{0xAABBCCDDEEFF0011ull, clc::kChidEmulated}, {0x0102030405060708ull, 0xFFFF}};
    write("clc/proposal_v2_d", clc::encode(p));

    clc::Proposal pb = p;
    pb.typev1 = clc::kTypeD;
    pb.typev2 = clc::kTypeB;
    pb.ipv4_prefix = 0x0000007f;
    pb.ipv4_prefix_len = 8;
    pb.v6_prefixes.push_back({{0xfe, 0x80}, 64});
    pb.ueids.push_back({'U', 'E', 'I', 'D'});
    pb.seid_enabled = true;
    write("clc/proposal_v2_b_prefixes", clc::encode(pb));

    clc::AcceptConfirmD a;
    a.first_contact = true;
    a.gid = 0x0102030405060708ull;
    a.token = 0xdeadbeefcafef00dull;
    a.dmbe_size_code = 2;
    a.chid = clc::kChidEmulated;
    a.fce = clc::FirstContact{};
    write("clc/accept_v2_fce", clc::encode(a));

    clc::AcceptConfirmD c;
    c.type = clc::Type::Confirm;
    c.gid = 42;
    c.token = 7;
    c.dmbe_size_code = 6;
    write("clc/confirm_v2", clc::encode(c));
    c.version = 1;
    write("clc/confirm_v1", clc::encode(c));

    clc::AcceptConfirmR r;
    r.first_contact = true;
    r.gid[15] = 1;
    r.qpn = 0x123456;
    r.rmbe_size_code = 2;
    r.psn = 0xabcdef;
    r.fce = clc::FirstContact{};
    r.fce->max_conns = 255;
    r.fce->max_links = 2;
    write("clc/accept_r_v2_fce", clc::encode(r));
    r.type = clc::Type::Confirm;
    r.gid_list.resize(2);
    write("clc/confirm_r_v2_gids", clc::encode(r));
    r.version = 1;
    write("clc/confirm_r_v1", clc::encode(r));

    clc::Decline d;
    d.peer_id = {0, 0, 0, 0, 0, 0, 0, 42};
    d.diagnosis = 0x03030000;
    write("clc/decline_v2", clc::encode(d));
    d.version = 1;
    d.out_of_sync = true;
    write("clc/decline_v1", clc::encode(d));
}

// A control line with the peer's cursors, in the cdc target's layout.
std::vector<uint8_t> cdc_input(core::Cursor peer_prod, core::Cursor peer_cons, uint8_t conn_flags,
                               uint8_t rx_sel, uint8_t tx_sel, core::Cursor rx_cons,
                               core::Cursor tx_prod, const std::vector<uint8_t>& ops) {
    std::vector<uint8_t> out;
    smcd::Control rx{};
    rx.type = smcd::kCdcType;
    rx.prod.store(smcd::pack_prod(peer_prod));
    rx.cons.store(smcd::pack_cons(peer_cons, 0, conn_flags));
    const auto* r = reinterpret_cast<const uint8_t*>(&rx);
    out.insert(out.end(), r, r + sizeof rx);
    smcd::Control tx{};
    tx.type = smcd::kCdcType;
    tx.prod.store(smcd::pack_prod(tx_prod));
    tx.cons.store(smcd::pack_cons(rx_cons, 0, 0));
    const auto* t = reinterpret_cast<const uint8_t*>(&tx);
    out.insert(out.end(), t, t + sizeof tx);
    out.push_back(rx_sel);
    out.push_back(tx_sel);
    put(out, smcd::pack_prod(rx_cons), 8);
    put(out, smcd::pack_prod(tx_prod), 8);
    put(out, 65536 - 64, 4);
    out.push_back(0);
    out.insert(out.end(), ops.begin(), ops.end());
    return out;
}

void cdc_seeds() {
    constexpr uint32_t kRing64K = 65536 - 64;
    // 1000 bytes waiting; recv 600 twice; send 3000; the peer consumes it.
    write("cdc/data_waiting", cdc_input({0, 1000}, {0, 0}, 0, 2, 2, {0, 0}, {0, 0},
                                        {0x00, 0x58, 0x02, 0x80, 0x00, 0x58, 0x02, 0x80, 0x01, 0xb8,
                                         0x0b, 0x11, 0x03, 0xb8, 0x0b, 0x00}));
    // Data across the ring's end, then the peer closes.
    write("cdc/wrapped",
          cdc_input({1, 100}, {0, 0}, 0, 2, 2, {0, kRing64K - 50}, {0, 0},
                    {0x40, 0x00, 0x01, 0x80, 0x06, 0x40, 0x00, 0x00, 0x00, 0x10, 0x00, 0x00}));
    // A full ring of ours: sends find no room; a small odd ring for wrapping.
    write("cdc/peer_ring_full",
          cdc_input({0, 0}, {3, 50}, 0, 140, 140, {0, 0}, {4, 50},
                    {0x01, 0x10, 0x00, 0x07, 0x03, 0x20, 0x00, 0x00, 0x01, 0x40, 0x00, 0x01}));
    // An impossible producer cursor (two rings ahead).
    write("cdc/impossible_prod", cdc_input({2, 10}, {0, 0}, 0, 0, 0, {0, 20}, {0, 0},
                                           {0x00, 0x10, 0x00, 0x80, 0x08, 0x03, 0x00, 0x00}));
    // Fork: cursors adopted from shared memory, then a shutdown.
    write("cdc/adopt",
          cdc_input({0, 300}, {0, 0}, core::kPeerDoneWriting, 1, 1, {0, 0}, {0, 0},
                    {0x07, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x80, 0x09, 0x00, 0x00, 0x00}));
}

// A link message in the ism_wire target's layout.
std::vector<uint8_t> wire_input(int per, int messages, uint8_t len_sel, int flags,
                                const std::vector<uint16_t>& fds) {
    std::vector<uint8_t> out;
    out.push_back(uint8_t(1 | per << 1 | messages << 4));
    out.push_back(len_sel);
    put(out, 0, 2);
    out.push_back(1); // n: the whole message
    put(out, uint32_t(flags), 4);
    for (uint16_t fd : fds)
        put(out, fd, 2);
    return out;
}

void ism_wire_seeds() {
    write("ism_wire/request_3fds", wire_input(3, 1, 0, 0, {5, 6, 7}));
    write("ism_wire/reply_nofds", wire_input(0, 0, 128, 0, {}));
    write("ism_wire/reply_ctrunc", wire_input(3, 1, 128, MSG_CTRUNC, {9, 10, 11}));
    write("ism_wire/two_messages", wire_input(2, 2, 0, 0, {3, 4, 5, 6}));
    // A raw control buffer (28 bytes): one SCM_RIGHTS header, three descriptors.
    std::vector<uint8_t> r = {0, 0, 0, 0, 1, 0, 0, 0, 0, CMSG_LEN(3 * sizeof(int))};
    put(r, CMSG_LEN(3 * sizeof(int)), 8);
    put(r, SOL_SOCKET, 4);
    put(r, SCM_RIGHTS, 4);
    put(r, 5, 4);
    put(r, 6, 4);
    put(r, 7, 4);
    write("ism_wire/raw_control", r);
}

} // namespace

// SMC-R link messages: one of each kind the decoders accept.
void smcr_seeds() {
    auto w = [](const std::string& name, const smcr::Msg& m) {
        write("smcr_msg/" + name, std::vector<uint8_t>(m.begin(), m.end()));
    };
    smcr::CdcMsg c;
    c.seqno = 0xFFFF;
    c.token = 0x01020304;
    c.prod = {1, 4096};
    c.cons = {0, 100};
    c.prod_flags = smcr::kUrgPresent;
    c.conn_flags = 0x80;
    w("cdc", smcr::encode(c));
    smcr::llc::ConfirmLink cl;
    cl.qpn = 0x123;
    cl.link_num = 1;
    cl.max_links = 2;
    w("confirm_link", smcr::llc::encode(cl));
    smcr::llc::ConfirmRkey cr;
    cr.others = 2;
    cr.rt[1].link_id = 2;
    cr.rt[2].link_id = 3;
    w("confirm_rkey", smcr::llc::encode(cr));
    smcr::llc::DeleteRkey dr;
    dr.count = 8;
    w("delete_rkey", smcr::llc::encode(dr));
    smcr::llc::DeleteLink dl;
    dl.all = true;
    dl.reason = smcr::llc::kProgInit;
    w("delete_link", smcr::llc::encode(dl));
    w("test_link", smcr::llc::encode(smcr::llc::TestLink{}));
    w("add_link", smcr::llc::encode(smcr::llc::Unsupported{smcr::llc::kAddLink, false}));
}

// A soft QP's stream as a peer sends it: the target's two leading bytes
// (split size, receives to post), then WRITE, SEND and ACK frames from a
// real QP aimed at the target's first region (its rkey and address are the
// first a fresh QP gives out).
void soft_qp_seeds() {
    smcr::soft::Qp probe, peer;
    std::vector<uint8_t> region(1000);
    smcr::soft::Qp::Region r = probe.reg_mr(region.data(), region.size());
    peer.post_write(1, "hello", 5, r.rkey, r.vaddr + 10, true);
    peer.post_send(2, "cdc", 3, true);
    peer.post_write(3, "tail", 4, r.rkey, r.vaddr + 996, false);
    std::vector<uint8_t> bytes = {16, 1};
    peer.take_output(bytes);
    write("soft_qp/write_send_write", bytes);
    std::vector<uint8_t> rnr = {255, 0};
    peer.post_send(4, "waits", 5, true);
    peer.take_output(rnr);
    write("soft_qp/send_without_receive", rnr);
}

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    clc_seeds();
    cdc_seeds();
    ism_wire_seeds();
    smcr_seeds();
    soft_qp_seeds();
    return 0;
}
