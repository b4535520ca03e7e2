// SPDX-License-Identifier: MIT
#include "tools/reasons.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace usmc::tools::reasons {

namespace {

constexpr const char* kKernelOnly =
    "Nothing on usmc's side: usmc never sends it; a kernel SMC peer does.";

// SMC-R's and the kernel's v2 reasons share their advice: usmc meets them
// only from a kernel SMC peer.
constexpr Advice kernel(const char* meaning) {
    return {meaning, kKernelOnly, Origin::Kernel};
}

} // namespace

const Advice& advice_of(fallback::Code code) {
    using namespace fallback;
    switch (code) {
    case MEM: {
        static constexpr Advice a{
            "No memory for the connection's buffer (DMB) or its descriptors: the process's "
            "DMB memory reached *max_dmb_memory*, or an allocation failed.",
            "Raise *max_dmb_memory* or lower *rmem* and *wmem* in *usmc.toml*(5); look at the "
            "process's memory limits (cgroup *memory.max*, *ulimit -v*).",
            Origin::Usmc};
        return a;
    }
    case TIMEOUT_CL: {
        static constexpr Advice a = kernel("An SMC-R link was not confirmed in time.");
        return a;
    }
    case TIMEOUT_AL: {
        static constexpr Advice a = kernel("An SMC-R link was not added in time.");
        return a;
    }
    case CNFERR: {
        static constexpr Advice a{
            "The peer's CLC handshake message was malformed or asked for something usmc does "
            "not speak.",
            "Run the same usmc version at both ends; against a kernel SMC peer, its own "
            "counters (*smcd stats*) say more.",
            Origin::Usmc};
        return a;
    }
    case PEERNOSMC: {
        static constexpr Advice a{
            "The other end did not speak SMC: on a server, no CLC Proposal came within "
            "*clc_detect_timeout_ms* (the client does not run under usmc, chose TCP itself, "
            "or was late); on a client, the server answered as plain TCP.",
            "Run both ends under *usmc-run*(8). Where both run on this host, *usmc ss* shows "
            "the client's own reason beside this one (client:NAME), and that reason says "
            "what to do. On a loaded machine raise *clc_detect_timeout_ms*.",
            Origin::Usmc};
        return a;
    }
    case IPSEC: {
        static constexpr Advice a = kernel("The connection is protected by IPsec.");
        return a;
    }
    case NOSMCDEV: {
        static constexpr Advice a{
            "The server has no SMC device the client offered (the client offered only a "
            "transport usmc does not have, such as SMC-R).",
            "Let the client offer SMC-D: mode *auto* or *smcd* at both ends.", Origin::Usmc};
        return a;
    }
    case NOSMCDDEV: {
        static constexpr Advice a{
            "No SMC-D device matched the client's offer (SMC-Dv1 needs a native ISM device, "
            "which usmc does not emulate).",
            "Use usmc at both ends: its client offers SMC-Dv2, which usmc's device serves.",
            Origin::Usmc};
        return a;
    }
    case NOSMCRDEV: {
        static constexpr Advice a{
            "Only SMC-R was allowed (mode *smcr*), and this build of usmc has no SMC-R.",
            "Use mode *auto* or *smcd* (in *usmc.toml*(5), the policy rule, or *usmc-run "
            "--smcd*).",
            Origin::Usmc};
        return a;
    }
    case MODEUNSUPP: {
        static constexpr Advice a{
            "The two ends found no SMC mode in common: the server's Accept named a transport "
            "the client had not offered, or was malformed.",
            "Run the same usmc version at both ends, with SMC-D allowed at both (mode *auto* "
            "or *smcd*).",
            Origin::Usmc};
        return a;
    }
    case RMBE_EC: {
        static constexpr Advice a = kernel("The peer requires an RMBE eyecatcher.");
        return a;
    }
    case OPTUNSUPP: {
        static constexpr Advice a = kernel("A TCP option in use is not supported with SMC.");
        return a;
    }
    case DIFFPREFIX: {
        static constexpr Advice a =
            kernel("The two ends are not in the same IP subnet (SMC-Dv1's prefix check).");
        return a;
    }
    case VERSMISMAT: {
        static constexpr Advice a{
            "The peer speaks another SMC version, or is an older usmc whose handshake this "
            "one no longer accepts.",
            "Run the same usmc version at both ends (restart long-running servers after an "
            "upgrade).",
            Origin::Usmc};
        return a;
    }
    case MAX_DMB: {
        static constexpr Advice a{
            "No room for another buffer (DMB): the process's DMB memory reached "
            "*max_dmb_memory*, or the descriptor limit was reached while making one.",
            "Raise *max_dmb_memory* or lower *rmem* and *wmem* in *usmc.toml*(5); raise the "
            "descriptor limit (*ulimit -n*) of processes with many connections.",
            Origin::Usmc};
        return a;
    }
    case SYNCERR: {
        static constexpr Advice a = kernel("The peer lost synchronisation of an SMC link group.");
        return a;
    }
    case PEERDECL: {
        static constexpr Advice a{
            "The peer declined during the handshake; its own reason is the diagnosis in this "
            "code's low bits, and its row in *usmc ss* when it runs on this host.",
            "Look up the peer's reason (its *usmc ss* row or *usmc stats*) and follow its "
            "advice.",
            Origin::Usmc};
        return a;
    }
    case INTERR: {
        static constexpr Advice a{
            "A handshake step failed inside usmc (no handshake worker free, a descriptor or "
            "memory error half way).",
            "Run the program with *usmc-run -v* to see the log; if it repeats without load, "
            "report it.",
            Origin::Usmc};
        return a;
    }
    case POLICY: {
        static constexpr Advice a{
            "TCP was chosen on purpose: a *[[policy]]* rule, *mode = \"tcp\"* in "
            "*usmc.toml*(5), *usmc-run --tcp*, or *USMC_MODES=tcp* in the environment (or a "
            "value of *USMC_MODES* usmc does not know).",
            "If SMC-D was wanted, find the rule with *usmc check ADDRESS PORT* (it names its "
            "line) or *usmc config check*, and change it; or drop *--tcp* / *USMC_MODES*.",
            Origin::Usmc};
        return a;
    }
    case CONFIG: {
        static constexpr Advice a{
            "The configuration file has an error: every socket of the program runs as plain "
            "TCP.",
            "Run *usmc config check*: it names the file, line and key.", Origin::Usmc};
        return a;
    }
    case FDTABLE: {
        static constexpr Advice a{
            "The socket's descriptor number lies beyond usmc's table, which is sized from the "
            "descriptor limit (*RLIMIT_NOFILE*) when the program starts.",
            "Raise the descriptor limit (*ulimit -n*, *LimitNOFILE=*) before the program "
            "starts, not while it runs.",
            Origin::Usmc};
        return a;
    }
    case NOLISTENER: {
        static constexpr Advice a{
            "No usmc listener is published for the destination: the server does not run "
            "under usmc, runs on another host (SMC-D joins processes of one host), is another "
            "user's whose uid is not in *trusted_uids*, has exited, or publishes in another "
            "stats directory (*USMC_STATS_DIR* must be the same at both ends).",
            "Run the server under *usmc-run*(8) on this host; *usmc check ADDRESS PORT* says "
            "which of these it is.",
            Origin::Usmc};
        return a;
    }
    case SAMEPROC: {
        static constexpr Advice a{
            "A blocking connect to a listener of the same process: the handshake would wait "
            "for the process's own accept().",
            "Nothing to do for most programs (a self-connect is rare); a nonblocking connect "
            "gets SMC-D.",
            Origin::Usmc};
        return a;
    }
    case HSLIMIT: {
        static constexpr Advice a{
            "The listener set *SMC_LIMIT_HS* and its handshakes are congested: new "
            "connections run as TCP until it catches up, as the kernel's do.",
            "Expected under connection storms. To try SMC-D always, turn the limit off "
            "(*usmc limit-hs disable*, or *limit_smc_hs = false*); more *hs_workers* let a "
            "server keep up.",
            Origin::Usmc};
        return a;
    }
    case FDLIMIT: {
        static constexpr Advice a{
            "The process is too close to its descriptor limit (*RLIMIT_NOFILE*): SMC-D takes "
            "a few descriptors more per connection.",
            "Raise the descriptor limit (*ulimit -n*, *LimitNOFILE=*).", Origin::Usmc};
        return a;
    }
    case CLCWAIT: {
        static constexpr Advice a{
            "The server did not answer the CLC Proposal in time: its application did not "
            "accept the connection while the client waited.",
            "Nothing to do if the server is just busy; a server that accepts late always "
            "gets TCP for those connections.",
            Origin::Usmc};
        return a;
    }
    case LEARNED: {
        static constexpr Advice a{
            "usmc learned that SMC-D does not pay for these connections (short-lived: fewer "
            "than 64 round trips and less than 1 MiB each) and runs them as TCP; it probes "
            "now and then and goes back to SMC-D by itself when they grow longer.",
            "Nothing, usually. To make every connection try SMC-D: *learn_smc = false* in "
            "*usmc.toml*(5), or mode *smcd* for those connections (a policy rule, or "
            "*usmc-run --smcd*).",
            Origin::Usmc};
        return a;
    }
    case EPOLLEARLY: {
        static constexpr Advice a{
            "The program put the socket into an epoll set before connect(): its readiness "
            "stays the TCP socket's. Its server shows PEERNOSMC.",
            "Nothing to set: the program would have to register the socket after connect() "
            "(event libraries that do so get SMC-D).",
            Origin::Usmc};
        return a;
    }
    case MOVED: {
        static constexpr Advice a{
            "An SMC-D connection moved to TCP with its peer, byte for byte: a process holding "
            "it executed a new program that inherits it, passed it to another process "
            "(SCM_RIGHTS), set up an io_uring, or installed a seccomp filter; or it had to "
            "wait (a blocking call, poll, an epoll set the kernel holds) and no wake-up "
            "socket could be made for it: usmc's quarter of RLIMIT_NOFILE was full (or its "
            "name was taken by someone who knows its token).",
            "Nothing is lost. Where SMC-D matters, do not hand SMC-D connections across "
            "exec (close-on-exec), start the sandbox before connecting, or raise "
            "RLIMIT_NOFILE.",
            Origin::Usmc};
        return a;
    }
    case SECCOMP: {
        static constexpr Advice a{
            "The process runs under a seccomp filter (a container runtime, systemd's "
            "*SystemCallFilter=*, a sandbox): its new connections are plain TCP, since the "
            "filter may forbid calls SMC-D makes.",
            "Run the program without the filter, or with one that is not in force when it "
            "connects.",
            Origin::Usmc};
        return a;
    }
    case IOURING: {
        static constexpr Advice a{
            "The process set up an io_uring (libuv does, and programs built on liburing): its "
            "reads, writes and epoll registrations through the ring reach sockets without "
            "usmc, so its connections moved to TCP with their peers and new ones are plain TCP.",
            "Nothing is lost. Where SMC-D matters, run the program without io_uring (libuv: "
            "*UV_USE_IO_URING=0*).",
            Origin::Usmc};
        return a;
    }
    case NOISM2SUPP: {
        static constexpr Advice a = kernel("The peer's ISM hardware has no SMC-Dv2 support.");
        return a;
    }
    case NOV2DEXT: {
        static constexpr Advice a{
            "The client's SMC-Dv2 offer named no device.",
            "Run the same usmc version at both ends; a kernel SMC client sends the extension "
            "when it has an SMC-Dv2 device.",
            Origin::Usmc};
        return a;
    }
    case NOSMCD2DEV: {
        static constexpr Advice a{
            "No SMC-Dv2 device matched the client's offer (the client's device is not one "
            "usmc serves, as a native ISM).",
            "Use usmc at both ends.", Origin::Usmc};
        return a;
    }
    case NOUEID: {
        static constexpr Advice a = kernel("The peer sent no user-defined EID (UEID).");
        return a;
    }
    }
    static constexpr Advice unknown{"An unknown reason.", "Compare the usmc versions at both ends.",
                                    Origin::Usmc};
    return unknown;
}

std::optional<Advice> advice_for(uint32_t code) {
    if (!fallback::index_of(code)) return std::nullopt;
    return advice_of(static_cast<fallback::Code>(code));
}

std::string plain(std::string_view marked) {
    std::string out;
    out.reserve(marked.size());
    for (char c : marked)
        if (c != '*') out += c;
    return out;
}

std::string explain(uint32_t code) {
    auto a = advice_for(code);
    if (!a) return fmt::format("UNKNOWN (0x{:08x}): an unknown reason.", code);
    return fmt::format("{} (0x{:08x}): {} What to do: {}", fallback::name_of(code), code,
                       plain(a->meaning), plain(a->remedy));
}

namespace {
// Words of `text` on lines of at most `width` columns, each led by a tab.
// A bold span (*usmc check ADDRESS PORT*) stays on one line: scdoc's
// markup does not cross lines.
std::string wrapped(std::string_view text, size_t width) {
    std::string out, line;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t end = text.find(' ', pos);
        if (end == std::string_view::npos) end = text.size();
        auto stars = [&] { return std::count(text.begin() + pos, text.begin() + end, '*'); };
        while (stars() % 2 && end < text.size()) {
            end = text.find(' ', end + 1);
            if (end == std::string_view::npos) end = text.size();
        }
        std::string_view word = text.substr(pos, end - pos);
        if (!line.empty() && line.size() + 1 + word.size() > width) {
            out += "\t" + line + "\n";
            line.clear();
        }
        if (!line.empty()) line += ' ';
        line += word;
        pos = end + 1;
    }
    if (!line.empty()) out += "\t" + line + "\n";
    return out;
}
} // namespace

std::string man_section() {
    std::string out;
    for (unsigned i = 0; i < fallback::kCount; ++i) {
        uint32_t code = fallback::code_at(static_cast<fallback::Index>(i));
        const Advice& a = advice_of(static_cast<fallback::Code>(code));
        if (i) out += "\n";
        out += fmt::format("*{}* 0x{:08x}\n", fallback::name_of(code), code);
        out += wrapped(fmt::format("{} What to do: {}", a.meaning, a.remedy), 72);
    }
    return out;
}

} // namespace usmc::tools::reasons
