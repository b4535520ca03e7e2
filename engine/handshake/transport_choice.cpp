// SPDX-License-Identifier: MIT
#include "engine/handshake/transport_choice.hpp"

#include "engine/base/fallback.hpp"

namespace usmc {

const char* transport_name(TransportKind k) {
    switch (k) {
    case TransportKind::None:
        return "none";
    case TransportKind::SmcdV2:
        return "SMC-Dv2";
    case TransportKind::SmcdV1:
        return "SMC-Dv1";
    case TransportKind::SmcrV2:
        return "SMC-Rv2";
    case TransportKind::SmcrV1:
        return "SMC-Rv1";
    }
    return "?";
}

namespace {

bool smcd_indicated(uint8_t type) {
    return type == clc::kTypeD || type == clc::kTypeB;
}
bool smcr_indicated(uint8_t type) {
    return type == clc::kTypeR || type == clc::kTypeB;
}

// The client's SMC-Dv2 device our emulated ISM can reach: the native one
// of the SMC-D area, then the SMC-Dv2 extension's list (a device matches
// by CHID, as smc_check_ism_v2_match's does). 0: none.
uint64_t ism_v2_match(const clc::Proposal& p) {
    if (p.ism_chid == clc::kChidEmulated && p.ism_gid_v1 != 0) return p.ism_gid_v1;
    for (const auto& e : p.ism_v2)
        if (e.chid == clc::kChidEmulated && e.gid != 0) return e.gid;
    return 0;
}

} // namespace

TransportChoice choose_transport(const clc::Proposal& p, const LocalTransports& local) {
    uint32_t first_rc = 0;
    auto store = [&](uint32_t rc) {
        if (!first_rc) first_rc = rc;
    };
    auto none = [](uint32_t rc) { return TransportChoice{TransportKind::None, rc, 0}; };

    // Which versions of each the client offered (smc_listen_v2_check).
    const bool v2 = p.version > 1;
    bool smcd_v1 = smcd_indicated(p.typev1), smcr_v1 = smcr_indicated(p.typev1);
    bool smcd_v2 = v2 && smcd_indicated(p.typev2), smcr_v2 = v2 && smcr_indicated(p.typev2);
    uint32_t v2_rc = fallback::PEERNOSMC;
    if (smcd_v2 && !local.smcd_v2) {
        smcd_v2 = false;
        v2_rc = fallback::NOISM2SUPP;
    } else if (smcd_v2 && p.ism_v2.empty() && p.ism_chid == 0) {
        smcd_v2 = false;
        v2_rc = fallback::NOV2DEXT;
    }
    if (smcr_v2 && p.ueids.empty()) {
        smcr_v2 = false;
        v2_rc = fallback::NOUEID;
    }
    if (!smcd_v1 && !smcd_v2 && !smcr_v1 && !smcr_v2) return none(v2_rc);

    // smc_listen_find_device.
    if (smcd_v2) {
        if (uint64_t gid = ism_v2_match(p)) return {TransportKind::SmcdV2, 0, gid};
        store(fallback::NOSMCD2DEV);
    }
    if (smcd_v1) {
        if (local.smcd_v1 && p.ism_gid_v1 != 0) return {TransportKind::SmcdV1, 0, p.ism_gid_v1};
        store(fallback::NOSMCDDEV);
    }
    if (!smcr_indicated(p.typev1) && !smcr_indicated(p.typev2))
        return none(first_rc ? first_rc : uint32_t{fallback::NOSMCDDEV});
    if (smcr_v2) {
        if (local.smcr_v2) return {TransportKind::SmcrV2, 0, 0};
        store(fallback::NOSMCRDEV);
    }
    if (smcr_v1 && local.smcr_v1) return {TransportKind::SmcrV1, 0, 0};
    store(fallback::NOSMCDEV);
    return none(first_rc);
}

uint32_t check_accept_offered(const clc::Proposal& offered, const clc::Header& accept) {
    if (accept.typev1 != clc::kTypeR && accept.typev1 != clc::kTypeD) return fallback::MODEUNSUPP;
    const uint8_t in_offer = accept.version >= 2 ? offered.typev2 : offered.typev1;
    bool ok = accept.typev1 == clc::kTypeD ? smcd_indicated(in_offer) : smcr_indicated(in_offer);
    return ok ? 0 : uint32_t{fallback::MODEUNSUPP};
}

TransportKind accepted_transport(const clc::Header& accept) {
    const bool v2 = accept.version >= 2;
    switch (accept.typev1) {
    case clc::kTypeD:
        return v2 ? TransportKind::SmcdV2 : TransportKind::SmcdV1;
    case clc::kTypeR:
        return v2 ? TransportKind::SmcrV2 : TransportKind::SmcrV1;
    default:
        return TransportKind::None;
    }
}

} // namespace usmc
