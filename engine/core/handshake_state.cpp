// SPDX-License-Identifier: MIT
#include "engine/core/handshake_state.hpp"

namespace usmc::core {

namespace {

using C = ClientHs;
constexpr C cC = C::Connecting, cAA = C::AwaitAccept, cAt = C::Attaching, cB = C::Blocking,
            cS = C::Smc, cT = C::Tcp, cF = C::Failed, cX = C::Invalid;

// kClientNext[state][event]. A Decline (FellBack) can end every wait: sent
// when no worker can take the handshake, received as the server's answer.
// Only the wait for the TCP connect, or a thread that waits for it, learns
// that the connect failed.
constexpr C kClientNext[kClientStates][kClientEvents] = {
    // TcpPend ProposSent ProposFail TcpFail NeedsAtt NeedsThr Up  FellBack Error
    /* Start       */ {cC, cAA, cF, cX, cX, cB, cX, cT, cX},
    /* Connecting  */ {cX, cAA, cF, cT, cX, cB, cX, cT, cX},
    /* AwaitAccept */ {cX, cX, cX, cX, cAt, cB, cS, cT, cF},
    /* Attaching   */ {cX, cX, cX, cX, cX, cB, cS, cT, cF},
    /* Blocking    */ {cX, cX, cX, cT, cX, cX, cS, cT, cF},
    /* Smc         */ {cX, cX, cX, cX, cX, cX, cX, cX, cX},
    /* Tcp         */ {cX, cX, cX, cX, cX, cX, cX, cX, cX},
    /* Failed      */ {cX, cX, cX, cX, cX, cX, cX, cX, cX},
};

using S = ServerHs;
constexpr S sAP = S::AwaitProposal, sBg = S::Begin, sAC = S::AwaitConfirm, sB = S::Blocking,
            sS = S::Smc, sT = S::Tcp, sF = S::Failed, sX = S::Invalid;

// kServerNext[state][event]. Before the Accept nothing is lost by going TCP
// (the client's bytes untouched, or a Decline sent); after it, the client
// may believe SMC is up, so only its own Decline makes it TCP again and
// anything else is an error.
constexpr S kServerNext[kServerStates][kServerEvents] = {
    // PropHere NothingYet NotSmc AccSent NeedsThr Up FellBack Error AccTook
    /* Intake        */ {sBg, sAP, sT, sX, sX, sX, sT, sX, sX},
    /* AwaitProposal */ {sBg, sAP, sT, sX, sX, sX, sT, sX, sX},
    /* Begin         */ {sX, sX, sT, sAC, sX, sX, sT, sF, sS},
    /* AwaitConfirm  */ {sX, sX, sX, sX, sB, sS, sT, sF, sX},
    /* Blocking      */ {sX, sX, sX, sX, sX, sS, sT, sF, sX},
    /* Smc           */ {sX, sX, sX, sX, sX, sX, sX, sX, sX},
    /* Tcp           */ {sX, sX, sX, sX, sX, sX, sX, sX, sX},
    /* Failed        */ {sX, sX, sX, sX, sX, sX, sX, sX, sX},
};

} // namespace

ClientHs next(ClientHs s, ClientEvent e) {
    if (int(s) >= kClientStates || int(e) >= kClientEvents) return C::Invalid;
    return kClientNext[int(s)][int(e)];
}

ServerHs next(ServerHs s, ServerEvent e) {
    if (int(s) >= kServerStates || int(e) >= kServerEvents) return S::Invalid;
    return kServerNext[int(s)][int(e)];
}

bool is_end(ClientHs s) {
    return s == C::Smc || s == C::Tcp || s == C::Failed;
}

bool is_end(ServerHs s) {
    return s == S::Smc || s == S::Tcp || s == S::Failed;
}

const char* name(ClientHs s) {
    constexpr const char* kNames[] = {"start",    "connecting", "await-accept", "attaching",
                                      "blocking", "smc",        "tcp",          "failed"};
    return int(s) < kClientStates ? kNames[int(s)] : "invalid";
}

const char* name(ClientEvent e) {
    constexpr const char* kNames[] = {"tcp-pending", "proposal-sent", "proposal-failed",
                                      "tcp-failed",  "needs-attach",  "needs-thread",
                                      "up",          "fell-back",     "error"};
    return int(e) < kClientEvents ? kNames[int(e)] : "?";
}

const char* name(ServerHs s) {
    constexpr const char* kNames[] = {
        "intake", "await-proposal", "begin", "await-confirm", "blocking", "smc", "tcp", "failed"};
    return int(s) < kServerStates ? kNames[int(s)] : "invalid";
}

const char* name(ServerEvent e) {
    constexpr const char* kNames[] = {"proposal-here", "nothing-yet",  "not-smc",
                                      "accept-sent",   "needs-thread", "up",
                                      "fell-back",     "error",        "accept-took"};
    return int(e) < kServerEvents ? kNames[int(e)] : "?";
}

} // namespace usmc::core
