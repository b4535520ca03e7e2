// SPDX-License-Identifier: MIT
// `usmc check ADDRESS PORT`: what a wrapped client on this host would get
// from a server there, and why, asked the way the client's connect() asks
// (af_smc_connect.cpp): its policy, the listener's registry entry (there,
// trusted, alive, SMC-D allowed, congested, learned TCP); then, unless told
// not to, one real connection under usmc-run that sends nothing.
#include "engine/base/fallback.hpp"
#include "engine/base/statseg.hpp"
#include "engine/base/sys.hpp"
#include "engine/discovery/registry.hpp"
#include "tools/check.hpp"
#include "tools/check_probes.hpp"
#include "tools/check_report.hpp"
#include "tools/check_spawn.hpp"
#include "tools/reasons.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace usmc::tools::check {

namespace {

struct Target {
    sockaddr_storage addr{};
    socklen_t len = 0;
    std::string host; // numeric
    uint16_t port = 0;
    std::string text() const {
        return addr.ss_family == AF_INET6 ? fmt::format("[{}]:{}", host, port)
                                          : fmt::format("{}:{}", host, port);
    }
};

// ADDRESS PORT, ADDRESS:PORT or [ADDRESS]:PORT; names are resolved.
std::optional<Target> parse_target(const std::vector<std::string>& words, std::string* err) {
    std::string host, port;
    if (words.size() == 2) {
        host = words[0];
        port = words[1];
    } else if (words.size() == 1) {
        const std::string& w = words[0];
        size_t colon = w.rfind(':');
        if (colon == std::string::npos) {
            *err = "give ADDRESS PORT or ADDRESS:PORT";
            return std::nullopt;
        }
        host = w.substr(0, colon);
        port = w.substr(colon + 1);
    } else {
        *err = "give ADDRESS PORT or ADDRESS:PORT";
        return std::nullopt;
    }
    if (host.size() > 1 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0 || !res) {
        *err = fmt::format("{} {}: {}", host, port, gai_strerror(rc));
        return std::nullopt;
    }
    Target t;
    std::memcpy(&t.addr, res->ai_addr, res->ai_addrlen);
    t.len = res->ai_addrlen;
    freeaddrinfo(res);
    char buf[INET6_ADDRSTRLEN] = {};
    if (t.addr.ss_family == AF_INET) {
        auto* in = reinterpret_cast<sockaddr_in*>(&t.addr);
        inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
        t.port = ntohs(in->sin_port);
    } else {
        auto* in6 = reinterpret_cast<sockaddr_in6*>(&t.addr);
        inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
        t.port = ntohs(in6->sin6_port);
    }
    t.host = buf;
    return t;
}

// Whether the destination is this host: loopback, unspecified, or an
// address of one of its interfaces (in this network namespace).
bool is_local(const Target& t, std::string* where) {
    if (t.addr.ss_family == AF_INET) {
        in_addr a = reinterpret_cast<const sockaddr_in*>(&t.addr)->sin_addr;
        uint32_t h = ntohl(a.s_addr);
        if ((h >> 24) == 127 || h == 0) {
            *where = "loopback";
            return true;
        }
    } else {
        const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&t.addr)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(&a) || IN6_IS_ADDR_UNSPECIFIED(&a)) {
            *where = "loopback";
            return true;
        }
    }
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) return false;
    bool found = false;
    for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != t.addr.ss_family) continue;
        if (t.addr.ss_family == AF_INET)
            found = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr ==
                    reinterpret_cast<const sockaddr_in*>(&t.addr)->sin_addr.s_addr;
        else
            found = !std::memcmp(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                                 &reinterpret_cast<const sockaddr_in6*>(&t.addr)->sin6_addr,
                                 sizeof(in6_addr));
        if (found) *where = i->ifa_name;
    }
    freeifaddrs(list);
    return found;
}

// Whether a TCP socket listens on the port (any address: the kernel then
// decides which one answers), from /proc/self/net/tcp{,6}.
bool something_listens(uint16_t port) {
    for (const char* path : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
        FILE* f = std::fopen(path, "re");
        if (!f) continue;
        char line[512];
        bool found = false;
        while (!found && std::fgets(line, sizeof line, f)) {
            char local[64];
            unsigned state = 0;
            if (std::sscanf(line, "%*s %63s %*s %x", local, &state) != 2 || state != 0x0A) continue;
            const char* colon = std::strrchr(local, ':');
            found = colon && std::strtoul(colon + 1, nullptr, 16) == port;
        }
        std::fclose(f);
        if (found) return true;
    }
    return false;
}

std::string program_of(int32_t pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/comm", pid);
    FILE* f = std::fopen(path, "re");
    if (!f) return "?";
    char name[64] = {};
    if (!std::fgets(name, sizeof name, f)) name[0] = 0;
    std::fclose(f);
    std::string s = name;
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s.empty() ? "?" : s;
}

// A copy of a registry entry file's fields, read without trusting it.
struct EntryCopy {
    std::string path;
    uid_t owner = 0;
    int32_t pid = 0;
    uint64_t start_time = 0;
    uint32_t flags = 0;
    uint64_t learned_until = 0, congested_until = 0;
};

std::optional<EntryCopy> read_entry(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    struct stat st;
    void* m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == off_t(sizeof(registry::Entry)))
        m = mmap(nullptr, sizeof(registry::Entry), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    EntryCopy c;
    c.path = path;
    c.owner = st.st_uid;
    if (m == MAP_FAILED) return c; // there, but not an entry this usmc reads
    const auto* e = static_cast<const registry::Entry*>(m);
    c.pid = e->pid;
    c.start_time = e->start_time;
    c.flags = e->flags.load(std::memory_order_acquire);
    c.learned_until = e->learned_tcp_until_ns.load(std::memory_order_acquire);
    c.congested_until = e->congested_until_ns.load(std::memory_order_acquire);
    munmap(m, sizeof(registry::Entry));
    return c;
}

sockaddr_storage wildcard(const Target& t, socklen_t* len) {
    sockaddr_storage w = t.addr;
    if (w.ss_family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(&w)->sin_addr.s_addr = htonl(INADDR_ANY);
        *len = sizeof(sockaddr_in);
    } else {
        reinterpret_cast<sockaddr_in6*>(&w)->sin6_addr = in6addr_any;
        *len = sizeof(sockaddr_in6);
    }
    return w;
}

bool trusted(uid_t owner, const std::vector<uint32_t>& uids) {
    return owner == 0 || owner == geteuid() ||
           std::find(uids.begin(), uids.end(), owner) != uids.end();
}

// The registry, as the client's connect() reads it: adds its lines; false
// when a client would not try SMC-D.
bool check_registry(Report& r, const Target& t, const std::string& dir, const config::Config& cfg,
                    config::ModeSet modes) {
    socklen_t wlen = 0;
    sockaddr_storage w = wildcard(t, &wlen);
    std::optional<EntryCopy> e;
    for (auto [a, l] : {std::pair{reinterpret_cast<const sockaddr*>(&t.addr), t.len},
                        std::pair{reinterpret_cast<const sockaddr*>(&w), wlen}}) {
        std::string name = registry::entry_name(a, l);
        if (!name.empty() && (e = read_entry(dir + "/" + name))) break;
    }
    if (!e) {
        r.fail("registry",
               fmt::format("no usmc listener is published for {} in {}: the server does not run "
                           "under usmc-run, or publishes in another stats directory",
                           t.text(), dir),
               fallback::NOLISTENER,
               "start the server under usmc-run(8), with the same USMC_STATS_DIR as its clients");
        return false;
    }
    if (!trusted(e->owner, cfg.trusted_uids)) {
        r.fail("registry",
               fmt::format("{} is published by uid {}, whom uid {} does not trust", e->path,
                           e->owner, geteuid()),
               fallback::NOLISTENER,
               fmt::format("add {} to trusted_uids in the client's usmc.toml(5), if that user's "
                           "servers are to be trusted with SMC-D connections",
                           e->owner));
        return false;
    }
    if (e->pid <= 0) {
        r.fail("registry", fmt::format("{} is not an entry this usmc reads", e->path),
               fallback::NOLISTENER,
               "run the same usmc version for server and client (restart the server)");
        return false;
    }
    bool alive = (kill(e->pid, 0) == 0 || errno == EPERM) &&
                 statseg::process_start_time(e->pid) == e->start_time;
    if (!alive) {
        r.fail("registry",
               fmt::format("{} names pid {}, which has exited (a stale entry)", e->path, e->pid),
               fallback::NOLISTENER, "restart the server under usmc-run(8)");
        return false;
    }
    auto found =
        registry::lookup(reinterpret_cast<const sockaddr*>(&t.addr), t.len, cfg.trusted_uids);
    if (!found) {
        r.fail("registry",
               fmt::format("{} (pid {}) is not an entry this usmc believes (another version?)",
                           e->path, e->pid),
               fallback::NOLISTENER,
               "run the same usmc version for server and client (restart the server)");
        return false;
    }
    if (!(found->flags & registry::kSmcD)) {
        r.fail("registry",
               fmt::format("pid {} ({}) publishes the listener without SMC-D", found->pid,
                           program_of(found->pid)),
               fallback::NOLISTENER, "allow SMC-D for the server (its policy or mode)");
        return false;
    }
    r.ok("registry", fmt::format("published by pid {} ({}), uid {}{}", found->pid,
                                 program_of(found->pid), found->owner,
                                 (found->flags & registry::kLimitHs) ? ", SMC_LIMIT_HS set" : ""));
    bool smc = true;
    if (found->flags & registry::kCongested) {
        r.fail("handshake congestion",
               "the listener's handshakes are congested now: new connections run TCP until it "
               "catches up",
               fallback::HSLIMIT);
        smc = false;
    } else {
        r.ok("handshake congestion", (found->flags & registry::kLimitHs)
                                         ? "not congested now (SMC_LIMIT_HS set)"
                                         : "none (SMC_LIMIT_HS not set)");
    }
    if (found->flags & registry::kLearnedTcp) {
        uint64_t now = sys::mono_ns();
        double left = e->learned_until > now ? double(e->learned_until - now) / 1e9 : 0.0;
        if (cfg.learn_smc && modes == config::kModeAuto) {
            r.fail("learned",
                   fmt::format("the listener learned that SMC-D does not pay for its connections "
                               "(short-lived): clients connect as TCP, but for a probe now and "
                               "then, for {:.1f} s more unless renewed",
                               left),
                   fallback::LEARNED);
            smc = false;
        } else {
            r.ok("learned", "the listener learned TCP, but a client here tries SMC-D anyway "
                            "(learn_smc off or mode smcd)");
        }
    } else {
        r.ok("learned", "the listener has not learned TCP");
    }
    return smc;
}

// The client's policy for the destination; false when it says TCP.
bool check_policy(Report& r, const Target& t, const config::Config& cfg, const std::string& program,
                  config::ModeSet* modes) {
    config::MatchInput in;
    in.exe_name = program;
    in.argv0_name = program;
    in.role = config::Role::Client;
    in.endpoint =
        config::Endpoint::from_sockaddr(reinterpret_cast<const sockaddr*>(&t.addr), t.len);
    int line = 0;
    *modes = config::match_policy(cfg.policies, in, cfg.mode, &line) & environment_modes();
    std::string who = program.empty() ? "a client" : program;
    std::string by =
        line ? fmt::format("the rule at {}:{}", cfg.source, line)
             : fmt::format("mode = \"{}\" ({})", config::mode_name(cfg.mode), cfg.source);
    bool named_rules = std::any_of(cfg.policies.begin(), cfg.policies.end(),
                                   [](const auto& p) { return !p.program.empty(); });
    if (program.empty() && named_rules)
        r.info("policy", "rules for named programs were not applied: give --program NAME to ask "
                         "for one");
    if (!*modes) {
        r.fail("policy", fmt::format("{} selects TCP for {} to {}", by, who, t.text()),
               fallback::POLICY);
        return false;
    }
    if (!(*modes & config::kModeSmcD)) {
        r.fail("policy",
               fmt::format("{} allows only {} for {} to {}", by, config::mode_name(*modes), who,
                           t.text()),
               fallback::NOSMCRDEV);
        return false;
    }
    r.ok("policy",
         fmt::format("{} allows {} for {} to {}", by, config::mode_name(*modes), who, t.text()));
    return true;
}

// One connection under usmc-run that sends nothing; its socket's mode.
void confirm(Report& r, const Target& t, const std::string& dir, Clock::time_point deadline) {
    std::string launcher = find_launcher();
    if (launcher.empty()) {
        r.fail("connection", "usmc-run is neither beside usmc nor on $PATH", 0,
               "install usmc-run, or pass --no-connect");
        return;
    }
    Child probe = Child::start(
        {launcher, "--", self_path(), "__check-peer", "connect", t.host, std::to_string(t.port)},
        {{"USMC_STATS_DIR", dir}});
    if (probe.pid() < 0) {
        r.fail("connection", fmt::format("cannot start {}", launcher), 0, "pass --no-connect");
        return;
    }
    auto preload = probe.line_with("PRELOAD ", deadline);
    auto answer = probe.line(deadline);
    std::optional<std::vector<SocketState>> socks;
    if (answer && answer->starts_with("CONNECTED")) socks = sockets_of(dir, probe.pid());
    probe.stop();
    if (!preload || preload->substr(8) == "none") {
        r.fail("connection", "usmc's library was not loaded in the probe: " + probe.errors(), 0,
               "run `usmc check` without arguments: it says what is missing");
        return;
    }
    if (!answer || !answer->starts_with("CONNECTED")) {
        r.fail("connection",
               answer ? answer->substr(answer->find(' ') + 1) : std::string("no answer in time"), 0,
               "start the server, or check the address");
        return;
    }
    const SocketState* s = nullptr;
    if (socks)
        for (const auto& x : *socks)
            if (x.role == SockRole::Client) s = &x;
    if (!s) {
        r.info("connection", "connected, but its socket cannot be seen (no stats segment)");
        return;
    }
    if (s->mode == SockMode::SmcD)
        r.ok("connection", "one connection made under usmc-run and closed, nothing sent: SMC-D");
    else
        r.fail("connection",
               fmt::format("one connection made under usmc-run and closed, nothing sent: plain "
                           "TCP, {}",
                           fallback::description_of(s->reason)),
               s->reason);
}

} // namespace

int run_destination(const Options& opt, const std::string& stats_dir) {
    Report r;
    auto deadline = Clock::now() + std::chrono::seconds(opt.timeout_s);
    std::string err;
    auto t = parse_target(opt.target, &err);
    if (!t) {
        r.fail("address", err, 0, "give ADDRESS PORT, e.g. usmc check 127.0.0.1 8080");
        return r.finish(false, "nothing to check", opt.json);
    }
    // The registry is read where clients read it.
    setenv("USMC_STATS_DIR", stats_dir.c_str(), 1);
    std::string where;
    bool local = is_local(*t, &where);
    if (!local) {
        r.fail("address", fmt::format("{} is not an address of this host", t->host),
               fallback::NOLISTENER,
               "nothing to do for usmc: SMC-D joins processes of one host, and connections to "
               "other hosts are plain TCP");
        return r.finish(false,
                        fmt::format("a wrapped client here gets plain TCP from {}: "
                                    "another host",
                                    t->text()),
                        opt.json);
    }
    r.ok("address", fmt::format("{} is this host's ({})", t->host, where));
    bool listens = something_listens(t->port);
    if (listens)
        r.ok("listening", fmt::format("a TCP socket listens on port {}", t->port));
    else
        r.fail("listening",
               fmt::format("nothing listens on port {}: a connect is refused", t->port), 0,
               "start the server");
    auto cfg = check_configuration(r, false);
    config::ModeSet modes = 0;
    if (cfg) {
        check_policy(r, *t, *cfg, opt.program, &modes);
        if (listens) check_registry(r, *t, stats_dir, *cfg, modes);
    }
    if (!opt.no_connect && listens) confirm(r, *t, stats_dir, deadline);

    bool works = !r.failed();
    std::string verdict;
    if (works)
        verdict = fmt::format("a wrapped client here gets SMC-D from {}", t->text());
    else if (uint32_t why = r.first_reason())
        verdict = fmt::format("a wrapped client here gets plain TCP from {}: {} ({})", t->text(),
                              fallback::name_of(why),
                              reasons::plain(reasons::advice_of(fallback::Code(why)).meaning));
    else
        verdict = fmt::format("a wrapped client here does not get SMC-D from {}: {}", t->text(),
                              r.first_failure());
    return r.finish(works, verdict, opt.json);
}

} // namespace usmc::tools::check
