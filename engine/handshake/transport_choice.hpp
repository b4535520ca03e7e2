// SPDX-License-Identifier: MIT
#pragma once
// The server's choice of a transport for a client's Proposal, as the
// kernel makes it (net/smc/af_smc.c: smc_listen_v2_check, then
// smc_listen_find_device): SMC-Dv2 first, then SMC-Dv1, SMC-Rv2, SMC-Rv1,
// each only when the client offered it and this process has it. When none
// fits, the Decline carries the first reason found on the way (the
// kernel's smc_find_ism_store_rc), or the one for the last step tried.
//
// The handshake goes on with the transport chosen here (listen.cpp); a
// transport usmc has not built is one this process never has, so a client
// that offers only it is declined with the kernel's reason.
//
// Left out: EID matching and the kernel's SMC-Dv2 NOUEID check (no UEID
// and no SEID flag: usmc's own client sends neither; SMC-Rv2 keeps it),
// the IP prefix check of v1. NOV2DEXT stands for an SMC-Dv2 offer that
// names no device at all: the decoder refuses a Proposal whose extension
// is missing (CNFERR) before this runs.
#include "engine/clc/clc.hpp"

#include <cstdint>

namespace usmc {

enum class TransportKind : uint8_t { None, SmcdV2, SmcdV1, SmcrV2, SmcrV1 };
const char* transport_name(TransportKind k);

// What this process can take a connection on. usmc: SMC-Dv2 through its
// user-space device (emulated ISM, CHID clc::kChidEmulated). SMC-Dv1 needs
// a native ISM and the IP prefix check; SMC-R is not built yet.
struct LocalTransports {
    bool smcd_v2 = false;
    bool smcd_v1 = false;
    bool smcr_v2 = false;
    bool smcr_v1 = false;
};

struct TransportChoice {
    TransportKind kind = TransportKind::None;
    uint32_t decline = 0;  // fallback::Code, when kind is None
    uint64_t peer_gid = 0; // SMC-D: the client's device the choice matched
};

TransportChoice choose_transport(const clc::Proposal& p, const LocalTransports& local);

// The client's side of the choice (the kernel's smc_connect_check_aclc):
// the server's Accept must name a transport the Proposal offered, in the
// version it was offered in (a v2 Accept: the Proposal's typev2; a v1
// Accept: its typev1). The transport an Accept names is its typev1.
// Otherwise the client declines with MODEUNSUPP (returned; 0: offered).
uint32_t check_accept_offered(const clc::Proposal& offered, const clc::Header& accept);
// The transport an Accept that passed that check goes on with.
TransportKind accepted_transport(const clc::Header& accept);

} // namespace usmc
