// SPDX-License-Identifier: MIT
#pragma once
// The kernel's own handshake-limitation switch (net/smc, per network
// namespace) through generic netlink: family "SMC_GEN_NETLINK",
// SMC_NETLINK_{DUMP,ENABLE,DISABLE}_HS_LIMITATION (16/17/18), attribute
// SMC_NLA_HS_LIMITATION_ENABLED (u8). Kernels without SMC have no such
// family; callers say so and go on with usmc's own knob.
#include <optional>
#include <string>

namespace usmc::tools {

struct KernelKnob {
    bool available = false;      // the running kernel has the SMC netlink family
    std::optional<bool> enabled; // its current value (show / after a change)
    std::string error;           // why it could not be read or changed
};

KernelKnob kernel_hs_limitation_show();
KernelKnob kernel_hs_limitation_set(bool on);

} // namespace usmc::tools
