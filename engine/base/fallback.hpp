// SPDX-License-Identifier: MIT
#pragma once
// Why a connection runs as plain TCP: the kernel's decline/fallback codes
// (SMC_CLC_DECL_*, as smcss and `smcd stats` show them) plus usmc's own
// reasons in the 0x0a.. range, which the kernel does not use.
#include <cstdint>
#include <optional>

namespace usmc::fallback {

// X(name, code, description). The order is each reason's slot in a stats
// segment (statseg.hpp): new reasons go at the end.
#define USMC_FALLBACK_REASONS(X)                                                                   \
    X(MEM, 0x01010000, "insufficient memory")                                                      \
    X(TIMEOUT_CL, 0x02010000, "timeout waiting for CONFIRM_LINK")                                  \
    X(TIMEOUT_AL, 0x02020000, "timeout waiting for ADD_LINK")                                      \
    X(CNFERR, 0x03000000, "configuration error")                                                   \
    X(PEERNOSMC, 0x03010000, "peer did not indicate SMC")                                          \
    X(IPSEC, 0x03020000, "IPsec in use")                                                           \
    X(NOSMCDEV, 0x03030000, "no SMC device found")                                                 \
    X(NOSMCDDEV, 0x03030001, "no SMC-D device found")                                              \
    X(NOSMCRDEV, 0x03030002, "no SMC-R device found")                                              \
    X(MODEUNSUPP, 0x03040000, "SMC modes do not match")                                            \
    X(RMBE_EC, 0x03050000, "peer requires RMBE eyecatcher")                                        \
    X(OPTUNSUPP, 0x03060000, "TCP option not supported with SMC")                                  \
    X(DIFFPREFIX, 0x03070000, "IP prefix mismatch")                                                \
    X(VERSMISMAT, 0x030c0000, "SMC version mismatch")                                              \
    X(MAX_DMB, 0x030d0000, "DMB limit exceeded")                                                   \
    X(SYNCERR, 0x04000000, "synchronization error")                                                \
    X(PEERDECL, 0x05000000, "peer declined during handshake")                                      \
    X(INTERR, 0x09990000, "internal error")                                                        \
    X(POLICY, 0x0a010000, "usmc: policy or launcher selects TCP")                                  \
    X(CONFIG, 0x0a020000, "usmc: configuration error, running as TCP")                             \
    X(FDTABLE, 0x0a030000, "usmc: fd beyond the shim's table")                                     \
    X(NOLISTENER, 0x0a040000, "usmc: no SMC listener at the destination")                          \
    X(SAMEPROC, 0x0a060000, "usmc: blocking connect to a listener in the same process")            \
    X(HSLIMIT, 0x0a070000, "usmc: listener's handshakes congested (SMC_LIMIT_HS)")                 \
    X(FDLIMIT, 0x0a080000, "usmc: too close to the descriptor limit (RLIMIT_NOFILE)")              \
    X(CLCWAIT, 0x0a090000, "usmc: no CLC Accept in time (server not accepting): gave up, TCP")     \
    X(LEARNED, 0x0a0a0000,                                                                         \
      "usmc: learned that SMC does not pay for these connections (short-lived): TCP")              \
    X(EPOLLEARLY, 0x0a0b0000,                                                                      \
      "usmc: in an epoll set before connect(): readiness is the TCP socket's")                     \
    X(MOVED, 0x0a0c0000,                                                                           \
      "usmc: moved to TCP with its peer (an exec or a seccomp filter in a process holding it)")    \
    X(SECCOMP, 0x0a0d0000, "usmc: the process runs under a seccomp filter: TCP")                   \
    X(NOISM2SUPP, 0x03030003, "hardware has no ISMv2 support")                                     \
    X(NOV2DEXT, 0x03030005, "peer sent no SMC-Dv2 extension")                                      \
    X(NOSMCD2DEV, 0x03030007, "no SMC-Dv2 device found")                                           \
    X(NOUEID, 0x03030008, "peer sent no UEID")                                                     \
    X(IOURING, 0x0a0e0000, "usmc: the process set up io_uring, which bypasses usmc: TCP")

enum Index : uint8_t {
#define USMC_FALLBACK_INDEX(name, code, text) k##name,
    USMC_FALLBACK_REASONS(USMC_FALLBACK_INDEX)
#undef USMC_FALLBACK_INDEX
        kCount
};

enum Code : uint32_t {
#define USMC_FALLBACK_CODE(name, code, text) name = code,
    USMC_FALLBACK_REASONS(USMC_FALLBACK_CODE)
#undef USMC_FALLBACK_CODE
};

// Index in the counter array of a code; nullopt for codes usmc does not count.
std::optional<Index> index_of(uint32_t code);
const char* name_of(uint32_t code);        // "PEERNOSMC", or "UNKNOWN"
const char* description_of(uint32_t code); // human text
uint32_t code_at(Index index);

} // namespace usmc::fallback
