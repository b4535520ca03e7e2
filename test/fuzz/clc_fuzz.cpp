// SPDX-License-Identifier: MIT
// CLC messages as a hostile TCP peer sends them: every decoder gets the
// bytes (each must refuse what is not its own with an Error), and the
// header decides the length as read_message() does. Whatever decodes must
// re-encode, and the re-encoded message must decode to the same values: a
// decoder that accepts something it cannot represent is a bug too.
#include "engine/clc/clc.hpp"
#include "test/fuzz/fuzz_check.hpp"

#include <cstring>

using namespace usmc::clc;

namespace {

bool same(const Proposal& a, const Proposal& b) {
    return a.version == b.version && a.typev1 == b.typev1 && a.typev2 == b.typev2 &&
           a.peer_id == b.peer_id && a.smcr_gid == b.smcr_gid && a.smcr_mac == b.smcr_mac &&
           a.ism_gid_v1 == b.ism_gid_v1 && a.ism_chid == b.ism_chid &&
           a.ipv4_prefix == b.ipv4_prefix && a.ipv4_prefix_len == b.ipv4_prefix_len &&
           a.v6_prefixes == b.v6_prefixes && a.release == b.release &&
           a.seid_enabled == b.seid_enabled && a.ueids == b.ueids &&
           a.roce_v2_gid == b.roce_v2_gid && a.max_conns == b.max_conns &&
           a.max_links == b.max_links && a.feature_mask == b.feature_mask && a.seid == b.seid &&
           a.ism_v2 == b.ism_v2;
}

bool same(const std::optional<FirstContact>& a, const std::optional<FirstContact>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a ||
           (a->v2_direct == b->v2_direct && a->os_type == b->os_type && a->release == b->release &&
            a->hostname == b->hostname && a->max_conns == b->max_conns &&
            a->max_links == b->max_links && a->feature_mask == b->feature_mask);
}

bool same(const AcceptConfirmD& a, const AcceptConfirmD& b) {
    if (!same(a.fce, b.fce)) return false;
    return a.type == b.type && a.version == b.version && a.first_contact == b.first_contact &&
           a.gid == b.gid && a.token == b.token && a.dmbe_idx == b.dmbe_idx &&
           a.dmbe_size_code == b.dmbe_size_code && a.link_id == b.link_id && a.chid == b.chid &&
           a.eid == b.eid && a.gid_ext == b.gid_ext;
}

bool same(const AcceptConfirmR& a, const AcceptConfirmR& b) {
    return same(a.fce, b.fce) && a.type == b.type && a.version == b.version &&
           a.first_contact == b.first_contact && a.peer_id == b.peer_id && a.gid == b.gid &&
           a.mac == b.mac && a.qpn == b.qpn && a.rmb_rkey == b.rmb_rkey &&
           a.rmbe_idx == b.rmbe_idx && a.rmbe_alert_token == b.rmbe_alert_token &&
           a.rmbe_size_code == b.rmbe_size_code && a.qp_mtu == b.qp_mtu &&
           a.rmb_dma_addr == b.rmb_dma_addr && a.psn == b.psn && a.eid == b.eid &&
           a.gid_list == b.gid_list;
}

// A v1 Decline has no OS type (the byte is reserved there): encode() writes
// 0 for it, so it is compared only from v2 on.
bool same(const Decline& a, const Decline& b) {
    return a.version == b.version && a.peer_id == b.peer_id && a.diagnosis == b.diagnosis &&
           a.out_of_sync == b.out_of_sync && (a.version < 2 || a.os_type == b.os_type);
}

void check_header_of(const std::vector<uint8_t>& bytes, Type type) {
    auto h = parse_header(bytes);
    FUZZ_CHECK(std::holds_alternative<Header>(h));
    FUZZ_CHECK(std::get<Header>(h).type == type);
    FUZZ_CHECK(std::get<Header>(h).length == bytes.size());
}

template <typename M, typename Decode>
void round_trip(const std::variant<M, Error>& decoded, Decode decode) {
    if (auto* e = std::get_if<Error>(&decoded)) {
        FUZZ_CHECK(error_name(*e) != nullptr);
        return;
    }
    const M& m = std::get<M>(decoded);
    std::vector<uint8_t> again = encode(m);
    FUZZ_CHECK(again.size() <= kMaxLen);
    auto redecoded = decode(again);
    FUZZ_CHECK(std::holds_alternative<M>(redecoded));
    FUZZ_CHECK(same(m, std::get<M>(redecoded)));
    // The re-encoded form is canonical: encoding it once more changes nothing.
    FUZZ_CHECK(encode(std::get<M>(redecoded)) == again);
}

void check_proposal(const std::variant<Proposal, Error>& r) {
    if (auto* m = std::get_if<Proposal>(&r)) {
        FUZZ_CHECK(m->version >= 2);
        FUZZ_CHECK(m->v6_prefixes.size() <= kMaxV6Prefixes);
        FUZZ_CHECK(m->ueids.size() <= kMaxUeids);
        FUZZ_CHECK(m->ism_v2.size() <= kMaxIsmV2);
        FUZZ_CHECK(m->ipv4_prefix_len <= 32);
        for (const auto& v6 : m->v6_prefixes)
            FUZZ_CHECK(v6.len <= 128);
        check_header_of(encode(*m), Type::Proposal);
    }
    round_trip(r, [](std::span<const uint8_t> b) { return decode_proposal(b); });
}

void check_accept_confirm(const std::variant<AcceptConfirmD, Error>& r) {
    if (auto* m = std::get_if<AcceptConfirmD>(&r)) {
        FUZZ_CHECK(m->type == Type::Accept || m->type == Type::Confirm);
        FUZZ_CHECK(m->dmbe_size_code <= kMaxDmbeSizeCode);
        FUZZ_CHECK(code_to_size(m->dmbe_size_code) <= (uint64_t{1} << 20));
        FUZZ_CHECK(!m->fce || (m->first_contact && m->version >= 2));
        check_header_of(encode(*m), m->type);
    }
    round_trip(r, [](std::span<const uint8_t> b) { return decode_accept_confirm_d(b); });
}

void check_accept_confirm_r(const std::variant<AcceptConfirmR, Error>& r) {
    if (auto* m = std::get_if<AcceptConfirmR>(&r)) {
        FUZZ_CHECK(m->type == Type::Accept || m->type == Type::Confirm);
        FUZZ_CHECK(m->rmbe_idx >= 1);
        FUZZ_CHECK(m->qp_mtu >= 1 && m->qp_mtu <= 5);
        FUZZ_CHECK(m->qpn <= 0xffffff && m->psn <= 0xffffff);
        FUZZ_CHECK(m->gid_list.size() <= kMaxGidList);
        FUZZ_CHECK(!m->fce || (m->first_contact && m->version >= 2));
        FUZZ_CHECK(m->gid_list.empty() || (m->fce && m->type == Type::Confirm));
        check_header_of(encode(*m), m->type);
    }
    round_trip(r, [](std::span<const uint8_t> b) { return decode_accept_confirm_r(b); });
}

// The dispatch by typev1 gives what the transport's own decoder gives.
void check_dispatch(std::span<const uint8_t> b) {
    auto any = decode_accept_confirm(b);
    auto d = decode_accept_confirm_d(b);
    auto r = decode_accept_confirm_r(b);
    if (auto* m = std::get_if<AcceptConfirmD>(&any))
        FUZZ_CHECK(std::holds_alternative<AcceptConfirmD>(d) &&
                   same(*m, std::get<AcceptConfirmD>(d)));
    else if (auto* m = std::get_if<AcceptConfirmR>(&any))
        FUZZ_CHECK(std::holds_alternative<AcceptConfirmR>(r) &&
                   same(*m, std::get<AcceptConfirmR>(r)));
    else
        FUZZ_CHECK(std::holds_alternative<Error>(d) && std::holds_alternative<Error>(r));
}

void check_decline(const std::variant<Decline, Error>& r) {
    if (auto* m = std::get_if<Decline>(&r)) check_header_of(encode(*m), Type::Decline);
    round_trip(r, [](std::span<const uint8_t> b) { return decode_decline(b); });
}

// The size code announced in an Accept/Confirm: the smallest code whose size
// holds `bytes`, capped at `max_code`.
void check_size_code(const uint8_t* data, size_t size) {
    if (size < 9) return;
    uint64_t bytes;
    std::memcpy(&bytes, data, 8);
    bytes >>= data[8] & 63; // reach small sizes too
    uint8_t max_code = data[8] >> 6 == 0 ? kMaxDmbeSizeCode : (data[8] >> 2) & 0xf;
    uint8_t code = size_to_code(bytes, max_code);
    FUZZ_CHECK(code <= max_code);
    FUZZ_CHECK(code == max_code || code_to_size(code) >= bytes);
    FUZZ_CHECK(code == 0 || code_to_size(code - 1) < bytes);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::span<const uint8_t> all(data, size);

    // Each decoder on the whole input, whatever type the header claims.
    check_proposal(decode_proposal(all));
    check_accept_confirm(decode_accept_confirm_d(all));
    check_accept_confirm_r(decode_accept_confirm_r(all));
    check_dispatch(all);
    check_decline(decode_decline(all));

    // As read_message() and the handshakes: the header's length cuts the
    // message, its type picks the decoder.
    auto h = parse_header(all);
    if (auto* hdr = std::get_if<Header>(&h)) {
        FUZZ_CHECK(hdr->length >= kHeaderLen + kTrailerLen && hdr->length <= kMaxLen);
        FUZZ_CHECK(hdr->version >= 1);
        FUZZ_CHECK(hdr->typev1 <= 3 && hdr->typev2 <= 3);
        if (hdr->length <= size) {
            auto msg = all.first(hdr->length);
            switch (hdr->type) {
            case Type::Proposal:
                check_proposal(decode_proposal(msg));
                break;
            case Type::Accept:
            case Type::Confirm:
                check_accept_confirm(decode_accept_confirm_d(msg));
                check_accept_confirm_r(decode_accept_confirm_r(msg));
                check_dispatch(msg);
                break;
            case Type::Decline:
                check_decline(decode_decline(msg));
                break;
            }
        }
    } else {
        FUZZ_CHECK(error_name(std::get<Error>(h)) != nullptr);
    }

    check_size_code(data, size);
    return 0;
}
