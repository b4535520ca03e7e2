// SPDX-License-Identifier: MIT
#include "tools/smc_netlink.hpp"

#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/netlink.h>

namespace usmc::tools {

namespace {

constexpr const char* kFamily = "SMC_GEN_NETLINK";
constexpr int kVersion = 1;
constexpr uint8_t kCmdDump = 16, kCmdEnable = 17, kCmdDisable = 18;
constexpr int kAttrEnabled = 1;

class Session {
  public:
    Session() : sk_(nl_socket_alloc()) {
        if (!sk_) return;
        if (genl_connect(sk_) < 0) return;
        family_ = genl_ctrl_resolve(sk_, kFamily);
    }
    ~Session() {
        if (sk_) nl_socket_free(sk_);
    }
    bool ok() const { return family_ >= 0; }
    nl_sock* sk() const { return sk_; }
    int family() const { return family_; }

  private:
    nl_sock* sk_;
    int family_ = -1;
};

int on_dump(nl_msg* msg, void* arg) {
    auto* out = static_cast<KernelKnob*>(arg);
    nlattr* attrs[kAttrEnabled + 1] = {};
    if (genlmsg_parse(nlmsg_hdr(msg), 0, attrs, kAttrEnabled, nullptr) == 0 && attrs[kAttrEnabled])
        out->enabled = nla_get_u8(attrs[kAttrEnabled]) != 0;
    return NL_OK;
}

void dump(Session& s, KernelKnob& out) {
    nl_msg* msg = nlmsg_alloc();
    if (!msg) {
        out.error = "out of memory";
        return;
    }
    genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, s.family(), 0, NLM_F_DUMP, kCmdDump, kVersion);
    nl_socket_modify_cb(s.sk(), NL_CB_VALID, NL_CB_CUSTOM, on_dump, &out);
    int rc = nl_send_auto(s.sk(), msg);
    nlmsg_free(msg);
    if (rc >= 0) rc = nl_recvmsgs_default(s.sk());
    if (rc < 0) out.error = nl_geterror(rc);
}

} // namespace

KernelKnob kernel_hs_limitation_show() {
    KernelKnob out;
    Session s;
    out.available = s.ok();
    if (out.available) dump(s, out);
    return out;
}

KernelKnob kernel_hs_limitation_set(bool on) {
    KernelKnob out;
    Session s;
    out.available = s.ok();
    if (!out.available) return out;
    nl_msg* msg = nlmsg_alloc();
    if (!msg) {
        out.error = "out of memory";
        return out;
    }
    genlmsg_put(msg, NL_AUTO_PORT, NL_AUTO_SEQ, s.family(), 0, NLM_F_ACK,
                on ? kCmdEnable : kCmdDisable, kVersion);
    int rc = nl_send_auto(s.sk(), msg);
    nlmsg_free(msg);
    if (rc >= 0) rc = nl_wait_for_ack(s.sk());
    if (rc < 0) {
        out.error = nl_geterror(rc);
        return out;
    }
    dump(s, out);
    return out;
}

} // namespace usmc::tools
