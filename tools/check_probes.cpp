// SPDX-License-Identifier: MIT
#include "tools/check_probes.hpp"

#include "engine/base/fallback.hpp"
#include "engine/base/statseg.hpp"
#include "engine/sock/runtime.hpp"
#include "tools/elfcheck.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <variant>

namespace usmc::tools::check {

std::string self_path() {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return {};
    exe[n] = 0;
    return exe;
}

std::string find_launcher() {
    std::string self = self_path();
    if (!self.empty()) {
        std::string beside = self.substr(0, self.rfind('/')) + "/usmc-run";
        if (access(beside.c_str(), X_OK) == 0) return beside;
    }
    return find_program("usmc-run", std::getenv("PATH"));
}

config::ModeSet environment_modes() {
    bool ok = true;
    auto o = runtime::parse_options(std::getenv("USMC_MODES"), nullptr, nullptr, &ok);
    return ok ? o.modes : config::ModeSet{0};
}

std::optional<config::Config> check_configuration(Report& r, bool judge_mode) {
    std::string path = config::default_config_path();
    auto loaded = config::load_default_config();
    if (auto* err = std::get_if<config::LoadError>(&loaded)) {
        r.fail("configuration", err->message + ": every socket runs as plain TCP",
               fallback::CONFIG);
        return std::nullopt;
    }
    auto cfg = std::get<config::Config>(loaded);
    // USMC_MODES as the shim reads it: a value it does not know is plain TCP.
    const char* env_modes = std::getenv("USMC_MODES");
    bool modes_ok = true;
    auto opts = runtime::parse_options(env_modes, nullptr, nullptr, &modes_ok);
    if (!modes_ok) {
        r.fail("environment",
               fmt::format("USMC_MODES='{}' is not a mode usmc knows: programs started from here "
                           "run every socket as plain TCP",
                           env_modes),
               fallback::POLICY, "set USMC_MODES to auto, smcd, smcr or tcp, or unset it");
        return std::nullopt;
    }
    if (!judge_mode)
        r.ok("configuration",
             fmt::format("{}: mode {}, {} policy rule{}", path.empty() ? cfg.source : path,
                         config::mode_name(cfg.mode), cfg.policies.size(),
                         cfg.policies.size() == 1 ? "" : "s"));
    else if (cfg.mode == 0)
        r.fail("configuration",
               fmt::format("mode = \"tcp\" in {}: every connection no rule matches is plain TCP",
                           cfg.source),
               fallback::POLICY,
               fmt::format("set mode = \"auto\" in {} (or remove the line)", cfg.source));
    else if (!(cfg.mode & config::kModeSmcD))
        r.fail("configuration",
               fmt::format("mode = \"{}\" in {}: SMC-D is not allowed", config::mode_name(cfg.mode),
                           cfg.source),
               fallback::NOSMCRDEV);
    else
        r.ok("configuration",
             fmt::format("{}: mode {}, {} policy rule{}", path.empty() ? cfg.source : path,
                         config::mode_name(cfg.mode), cfg.policies.size(),
                         cfg.policies.size() == 1 ? "" : "s"));
    if (judge_mode && cfg.learn_smc && cfg.mode == config::kModeAuto)
        r.info("learning",
               "learn_smc is on: short-lived connections (a window of 16 that did not pay) "
               "run as TCP afterwards, LEARNED at the client and PEERNOSMC at the server; "
               "expected, see usmc(8), FALLBACK REASONS");
    if (judge_mode && env_modes && *env_modes) {
        if (!(opts.modes & config::kModeSmcD))
            r.fail("environment",
                   fmt::format("USMC_MODES={}: programs started from here run TCP", env_modes),
                   opts.modes ? uint32_t{fallback::NOSMCRDEV} : uint32_t{fallback::POLICY},
                   "unset USMC_MODES (or use usmc-run without --tcp)");
        else
            r.info("environment", fmt::format("USMC_MODES={}", env_modes));
    }
    return cfg;
}

bool check_stats_dir(Report& r, const std::string& dir) {
    struct stat st;
    std::string remedy =
        fmt::format("make {} a directory every user of usmc can write (mode 1777, as /dev/shm), "
                    "or set USMC_STATS_DIR to one, the same for servers and clients",
                    dir);
    bool there = ::stat(dir.c_str(), &st) == 0;
    if (!there || !S_ISDIR(st.st_mode)) {
        r.fail("stats directory",
               fmt::format("{}: {}: listeners cannot publish themselves, so clients go TCP", dir,
                           there ? "not a directory" : std::strerror(errno)),
               fallback::NOLISTENER, remedy);
        return false;
    }
    if (access(dir.c_str(), W_OK | X_OK) != 0) {
        r.fail("stats directory",
               fmt::format("{} is not writable for uid {}: listeners cannot publish themselves, "
                           "so clients go TCP",
                           dir, geteuid()),
               fallback::NOLISTENER, remedy);
        return false;
    }
    r.ok("stats directory", fmt::format("{} (writable; listeners are published there)", dir));
    return true;
}

namespace {

// A sealed memfd mapped shared, as a DMB is; "" or what failed.
std::string try_memfd(int* out_fd) {
    int fd = memfd_create("usmc-check", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return fmt::format("memfd_create: {}", std::strerror(errno));
    std::string err;
    if (ftruncate(fd, 64 << 10) != 0)
        err = fmt::format("ftruncate: {}", std::strerror(errno));
    else if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        err = fmt::format("F_ADD_SEALS: {}", std::strerror(errno));
    else {
        void* p = mmap(nullptr, 64 << 10, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            err = fmt::format("mmap: {}", std::strerror(errno));
        else {
            std::memset(p, 0x5a, 64 << 10);
            munmap(p, 64 << 10);
        }
    }
    if (!err.empty()) {
        close(fd);
        return err;
    }
    *out_fd = fd;
    return {};
}

// `fd` through an AF_UNIX SOCK_SEQPACKET pair with SCM_RIGHTS, and a bind
// to an abstract address (what the ISM endpoint does); "" or what failed.
std::string try_fd_passing(int fd) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
        return fmt::format("socketpair(AF_UNIX, SOCK_SEQPACKET): {}", std::strerror(errno));
    std::string err;
    char byte = 1;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl;
    m.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    if (sendmsg(sv[0], &m, MSG_NOSIGNAL) != 1) {
        err = fmt::format("sendmsg(SCM_RIGHTS): {}", std::strerror(errno));
    } else {
        msghdr in{};
        alignas(cmsghdr) char rctl[CMSG_SPACE(sizeof(int))] = {};
        in.msg_iov = &iov;
        in.msg_iovlen = 1;
        in.msg_control = rctl;
        in.msg_controllen = sizeof rctl;
        cmsghdr* rc = nullptr;
        if (recvmsg(sv[1], &in, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) != 1 ||
            !(rc = CMSG_FIRSTHDR(&in)) || rc->cmsg_type != SCM_RIGHTS) {
            err = "no descriptor came through SCM_RIGHTS";
        } else {
            int got;
            std::memcpy(&got, CMSG_DATA(rc), sizeof got);
            struct stat a, b;
            if (fstat(got, &a) != 0 || fstat(fd, &b) != 0 || a.st_ino != b.st_ino)
                err = "the descriptor that came is not the one sent";
            close(got);
        }
    }
    close(sv[0]);
    close(sv[1]);
    if (!err.empty()) return err;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un sun{};
    sun.sun_family = AF_UNIX;
    int n = std::snprintf(sun.sun_path + 1, sizeof sun.sun_path - 1, "usmc-check.%d", getpid());
    socklen_t len = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + size_t(n));
    if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&sun), len) != 0 || listen(s, 1) != 0)
        err = fmt::format("an abstract AF_UNIX listener: {}", std::strerror(errno));
    if (s >= 0) close(s);
    return err;
}

// Seccomp: 2 in /proc/self/status: a filter, which every program started
// from here inherits.
bool under_seccomp_filter() {
    FILE* f = std::fopen("/proc/self/status", "re");
    if (!f) return false;
    char line[256];
    bool filtered = false;
    while (std::fgets(line, sizeof line, f))
        if (!std::strncmp(line, "Seccomp:", 8)) filtered = std::atoi(line + 8) == 2;
    std::fclose(f);
    return filtered;
}

} // namespace

void check_system(Report& r) {
    int fd = -1;
    std::string err = try_memfd(&fd);
    if (!err.empty())
        r.fail("shared memory", err + ": SMC-D's buffers cannot be made", 0,
               "SMC-D's buffers are sealed memfds (memfd_create(2) with MFD_ALLOW_SEALING, "
               "Linux 3.17 or later): allow memfd_create, fcntl(F_ADD_SEALS) and shared mmap in "
               "the container's or sandbox's profile, and check the memory limits");
    else
        r.ok("shared memory", "sealed memfd made and mapped shared (the DMBs are such files)");
    if (fd >= 0) {
        err = try_fd_passing(fd);
        close(fd);
        if (!err.empty())
            r.fail("descriptor passing", err + ": buffers cannot be handed to the peer", 0,
                   "SMC-D hands buffers to the peer over AF_UNIX sockets (SCM_RIGHTS, abstract "
                   "addresses of the network namespace): allow them in the sandbox's profile");
        else
            r.ok("descriptor passing", "a memfd went through an AF_UNIX socket (SCM_RIGHTS)");
    }
    int pidfd = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));
    if (pidfd < 0)
        r.fail("pidfd", fmt::format("pidfd_open: {}", std::strerror(errno)), fallback::NOLISTENER,
               "clients believe a listener's entry only through a pidfd of its process "
               "(pidfd_open(2), Linux 5.3 or later): allow pidfd_open in the sandbox's profile "
               "or run a newer kernel");
    else {
        close(pidfd);
        r.ok("pidfd", "pidfd_open works (clients check that a listener's process lives)");
    }
    FILE* tcp = std::fopen("/proc/self/net/tcp", "re");
    if (statseg::process_start_time(getpid()) == 0 || !tcp)
        r.fail("/proc", "/proc/self/stat or /proc/self/net/tcp cannot be read",
               fallback::NOLISTENER,
               "mount procfs on /proc: listeners' entries are checked against /proc/PID/stat");
    else
        r.ok("/proc", "process start times and TCP tables readable");
    if (tcp) std::fclose(tcp);
    if (under_seccomp_filter())
        r.fail("seccomp",
               "this process runs under a seccomp filter, which programs started "
               "from it inherit",
               fallback::SECCOMP);
    else
        r.ok("seccomp", "no seccomp filter");
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        r.info(
            "descriptor limit",
            fmt::format("{} (SMC-D takes a few descriptors more per connection; FDLIMIT near it)",
                        rl.rlim_cur == RLIM_INFINITY ? std::string("unlimited")
                                                     : std::to_string(rl.rlim_cur)));
}

std::optional<std::vector<SocketState>> sockets_of(const std::string& dir, pid_t pid) {
    auto views = statseg::open_all(dir, false);
    std::optional<std::vector<SocketState>> out;
    for (const auto& v : views) {
        if (!v.alive || v.header->pid != pid) continue;
        out.emplace();
        uint32_t high = v.header->fd_high.load(std::memory_order_relaxed);
        if (high > v.header->fd_capacity) high = v.header->fd_capacity;
        for (uint32_t fd = 0; fd < high; ++fd) {
            SockInfo s = SockInfo::unpack(v.slots()[fd].load(std::memory_order_relaxed));
            if (s.tracked()) out->push_back({int(fd), s.role, s.mode, s.reason});
        }
        break;
    }
    statseg::close_all(views);
    return out;
}

} // namespace usmc::tools::check
