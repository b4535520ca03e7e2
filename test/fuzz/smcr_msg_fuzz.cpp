// SPDX-License-Identifier: MIT
// SMC-R's link messages as a hostile peer sends them: any bytes, any
// length, fed to the CDC and LLC decoders (engine/smcr). A decoder must
// read nothing past what it was given, and what it accepts must survive
// its own encoder unchanged (so the fields it checked are the ones sent).
#include "engine/smcr/cdc_msg.hpp"
#include "engine/smcr/llc_msg.hpp"
#include "test/fuzz/fuzz_check.hpp"

#include <vector>

using namespace usmc;
using namespace usmc::smcr;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // An exact-size copy: AddressSanitizer sees any read past its end.
    std::vector<uint8_t> in(data, data + size);
    const uint8_t* p = in.empty() ? nullptr : in.data();
    MsgKind kind = kind_of(p, in.size());
    if (auto m = decode_cdc(p, in.size())) {
        FUZZ_CHECK(kind == MsgKind::Cdc);
        Msg again = encode(*m);
        auto back = decode_cdc(again.data(), again.size());
        FUZZ_CHECK(back && *back == *m);
        // The core's view keeps the cursors and flags as sent.
        core::PeerCdc peer = to_peer_cdc(*m, 0);
        FUZZ_CHECK(peer.prod == m->prod && peer.cons == m->cons);
    }
    llc::Decoded d = llc::decode(p, in.size());
    if (d.error == llc::Error::None) {
        FUZZ_CHECK(kind == MsgKind::Llc && in.size() >= kMsgLen);
        Msg again = llc::encode(d.msg);
        llc::Decoded back = llc::decode(again.data(), again.size());
        FUZZ_CHECK(back.error == llc::Error::None && back.msg == d.msg);
    } else {
        FUZZ_CHECK(std::holds_alternative<llc::Unsupported>(d.msg));
    }
    return 0;
}
