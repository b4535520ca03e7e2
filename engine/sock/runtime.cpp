// SPDX-License-Identifier: MIT
#include "engine/sock/runtime.hpp"

#include "config/size.hpp"
#include "engine/base/count.hpp"
#include "engine/base/fdtable.hpp"
#include "engine/base/log.hpp"
#include "engine/base/sys.hpp"
#include "engine/conn/spin.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <variant>

namespace usmc::runtime {

// A forked child's segment: 0 its own (or none to be had), 1 private until
// the child is to be seen (publish_own_stats), 2 being published.
std::atomic<int> g_seg_deferred{0};

namespace {

// The engine's hooks (null: no engine linked in).
const EngineHooks* engine() {
    return &engine_hooks;
}

// A function-local static: the library constructor uses the state before
// this file's own dynamic initialisers may have run.
State& storage() {
    static State state;
    // Every layer counts into the segment this keeps (base/count.hpp).
    static const bool counting = (counters::count_into(&state.seg), true);
    (void)counting;
    return state;
}
std::atomic<int> g_init{0}; // 0 not yet, 1 in progress, 2 done

constexpr uint32_t kMaxCapacity = 1u << 22; // 4M fds = 32 MiB of (sparse) table

void copy_basename(char* dst, size_t len, const char* path) {
    if (!path) return;
    const char* slash = std::strrchr(path, '/');
    const char* src = slash ? slash + 1 : path;
    size_t i = 0;
    for (; i + 1 < len && src[i]; ++i)
        dst[i] = src[i];
    dst[i] = 0;
}

uint32_t table_capacity() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 65536;
    rlim_t want = rl.rlim_max == RLIM_INFINITY ? kMaxCapacity : rl.rlim_max;
    if (want < rl.rlim_cur && rl.rlim_cur != RLIM_INFINITY) want = rl.rlim_cur;
    if (want < 1024) want = 1024;
    if (want > kMaxCapacity) want = kMaxCapacity;
    return static_cast<uint32_t>(want);
}

void publish_child_segment(State& s) {
    if (statseg::publish_in_child(s.seg, s.seg_path, sizeof s.seg_path))
        g_fds.remirror(statseg::slots_of(s.seg), &s.seg->fd_high);
    s.seg->counters[counters::forks].fetch_add(1, std::memory_order_relaxed);
}

// A forked child makes no file of its own until it is to be seen: a
// fork-per-connection server's child (PostgreSQL's backends) that only
// reads and writes the plain TCP socket it inherited would otherwise create,
// fill, retire and unlink a segment per connection, with a page fault on
// every page of our code and of libc that it touches on the way.
void on_fork_child() {
    State& s = storage();
    if (!s.seg) return;
    bool file = s.seg_path[0] || g_seg_deferred.load(std::memory_order_relaxed) != 0;
    s.seg_path[0] = 0; // the parent's: never this child's to unlink
    if (!statseg::privatise_in_child(s.seg)) return;
    g_seg_deferred.store(0, std::memory_order_relaxed);
    if (!file) {
        g_fds.remirror(statseg::slots_of(s.seg), &s.seg->fd_high); // private, as before
        s.seg->counters[counters::forks].store(1, std::memory_order_relaxed);
    } else if (engine() && engine()->holds_connections()) {
        publish_child_segment(s); // their records (af_smc::on_fork_child) go there
    } else {
        g_fds.remirror(nullptr, nullptr);
        g_seg_deferred.store(1, std::memory_order_relaxed);
    }
    if (engine()) engine()->on_fork_child();
}

// One environment size: the value to use (0: the config's), and one
// message when it is not taken as it stands.
uint64_t env_size(const char* name, const char* config_key) {
    const char* text = std::getenv(name);
    EnvSize e = parse_env_size(text);
    switch (e.status) {
    case EnvSize::Unset:
        return 0;
    case EnvSize::Ok:
        return e.bytes;
    case EnvSize::Clamped:
        log::warn("{}='{}' is outside {}..{}; using {}", name, text,
                  config::format_size(config::kBufMin), config::format_size(config::kBufMax),
                  config::format_size(e.bytes));
        return e.bytes;
    case EnvSize::Malformed:
        log::warn("{}='{}' is not a size (bytes, or with a unit: 64k, 64KiB, 1m, 1MiB; {}..{}); "
                  "using the configuration's {}",
                  name, text, config::format_size(config::kBufMin),
                  config::format_size(config::kBufMax), config_key);
        return 0;
    }
    return 0;
}

void full_init() {
    State& s = storage();
    // smc-tools' SMC_RCVBUF/SMC_SNDBUF, read here rather than at load time so
    // that a process that never touches TCP (a shell, a version manager's
    // shim) says nothing about them.
    s.opts.rmem = env_size("SMC_RCVBUF", "rmem");
    s.opts.wmem = env_size("SMC_SNDBUF", "wmem");
    auto loaded = config::load_default_config();
    if (auto* err = std::get_if<config::LoadError>(&loaded)) {
        // One line, whatever the file holds: usmc-run and `usmc config check`
        // list every error; a program must not be drowned in them.
        s.config_ok = false;
        if (err->more.empty())
            log::error("config error: {}; running every socket as plain TCP", err->message);
        else
            log::error("config error: {} (and {} more); running every socket as plain TCP",
                       err->message, err->more.size());
    } else {
        s.cfg = std::move(std::get<config::Config>(loaded));
        // The environment over the file, as USMC_MODES and USMC_LIMIT_HS.
        if (s.opts.rmem) s.cfg.rmem = s.opts.rmem;
        if (s.opts.wmem) s.cfg.wmem = s.opts.wmem;
        log::set_level(s.opts.verbose && s.cfg.log_level < config::LogLevel::Info
                           ? config::LogLevel::Info
                           : s.cfg.log_level);
    }
    uint32_t capacity = table_capacity();
    // The name the program was started by (redis-server is a symlink to
    // redis-check-rdb): what users recognise in usmc ss.
    const char* program = s.argv0_name[0] ? s.argv0_name : s.exe_name;
    s.seg = statseg::create(program, capacity, s.seg_path, sizeof s.seg_path);
    if (!s.seg) {
        log::info("cannot create stats segment in {}; counters stay private", statseg::stats_dir());
        s.seg = statseg::create_anonymous(program, capacity);
    }
    // The private table: copy-on-write across fork, see fdtable.hpp.
    void* table = mmap(nullptr, size_t{capacity} * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (table == MAP_FAILED) {
        log::error("cannot map the fd table ({} entries); every socket runs as plain TCP",
                   capacity);
    } else if (s.seg) {
        g_fds.attach(static_cast<std::atomic<uint64_t>*>(table), capacity, statseg::slots_of(s.seg),
                     &s.seg->fd_high);
    } else {
        g_fds.attach(static_cast<std::atomic<uint64_t>*>(table), capacity, nullptr, nullptr);
    }
    if (engine()) engine()->init(capacity, s.config_ok ? s.cfg.busy_poll_us : 0);
    spin::set_adaptive(!s.config_ok || s.cfg.busy_poll_adaptive);
    pthread_atfork(engine() ? engine()->before_fork : nullptr,
                   engine() ? engine()->after_fork_parent : nullptr, on_fork_child);
    log::info("usmc active in {} (modes {}, rmem {}{}, wmem {}{}, config {})", program,
              config::mode_name(s.opts.modes), config::format_size(s.cfg.rmem),
              s.opts.rmem ? " from SMC_RCVBUF" : "", config::format_size(s.cfg.wmem),
              s.opts.wmem ? " from SMC_SNDBUF" : "", s.cfg.source);
}

} // namespace

EnvSize parse_env_size(const char* text) {
    EnvSize e;
    if (!text || !*text) return e;
    bool too_large = false;
    auto value = config::parse_size(text, &too_large);
    if (!value && !too_large) {
        e.status = EnvSize::Malformed;
        return e;
    }
    e.bytes = too_large ? config::kBufMax : std::clamp(*value, config::kBufMin, config::kBufMax);
    e.status = !too_large && e.bytes == *value ? EnvSize::Ok : EnvSize::Clamped;
    return e;
}

bool smc_debug_on(const char* text) {
    return text && *text && *text != '0';
}

Options parse_options(const char* modes, const char* limit_hs, const char* verbose, bool* ok) {
    Options o;
    *ok = true;
    if (modes && *modes) {
        std::string_view m(modes);
        if (m == "smcd,smcr" || m == "smcr,smcd")
            o.modes = config::kModeAuto;
        else if (auto parsed = config::parse_mode(m))
            o.modes = *parsed;
        else {
            o.modes = 0; // unknown: the safe choice is plain TCP
            *ok = false;
        }
    }
    if (limit_hs && *limit_hs) {
        if (!std::strcmp(limit_hs, "1"))
            o.limit_hs = 1;
        else if (!std::strcmp(limit_hs, "0"))
            o.limit_hs = 0;
        else
            *ok = false;
    }
    // Either variable bad: what the user asked for is unknown, so every
    // socket is plain TCP, as the error line says.
    if (!*ok) o.modes = 0;
    o.verbose = verbose && *verbose && std::strcmp(verbose, "0") != 0;
    return o;
}

void early_init(int argc, char** argv) {
    State& s = storage();
    statseg::remember_stats_dir();
    if (argc > 0 && argv && argv[0]) copy_basename(s.argv0_name, sizeof s.argv0_name, argv[0]);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        copy_basename(s.exe_name, sizeof s.exe_name, exe);
    }
    bool ok = true;
    s.opts = parse_options(std::getenv("USMC_MODES"), std::getenv("USMC_LIMIT_HS"),
                           std::getenv("USMC_VERBOSE"), &ok);
    // smc-tools' preload library's variable, whoever set it (usmc-run -d or
    // the user beside LD_PRELOAD).
    if (smc_debug_on(std::getenv("SMC_DEBUG"))) s.opts.verbose = true;
    if (s.opts.verbose) log::set_level(config::LogLevel::Info);
    if (!ok)
        log::error("bad USMC_MODES/USMC_LIMIT_HS in the environment (USMC_MODES='{}', "
                   "USMC_LIMIT_HS='{}'); running every socket as plain TCP",
                   std::getenv("USMC_MODES") ? std::getenv("USMC_MODES") : "",
                   std::getenv("USMC_LIMIT_HS") ? std::getenv("USMC_LIMIT_HS") : "");
}

State& get() {
    if (g_init.load(std::memory_order_acquire) == 2) return storage();
    int expected = 0;
    if (g_init.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
        full_init();
        g_init.store(2, std::memory_order_release);
    } else {
        while (g_init.load(std::memory_order_acquire) != 2)
            sched_yield();
    }
    return storage();
}

bool initialised() {
    return g_init.load(std::memory_order_acquire) == 2;
}

namespace {
// The global knob as last read from the configuration file: -1 = as loaded
// at start (s.cfg), else 0/1. The file is looked at (stat) at most once a
// second and parsed again only when it changed, so `usmc limit-hs` and
// editors reach running programs without a restart.
std::atomic<int> g_limit_hs{-1};
std::atomic<int64_t> g_knob_checked{-1};
std::mutex g_knob_mu;
struct Stamp {
    ino_t ino = 0;
    off_t size = -1;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
} g_knob_stamp;
bool g_knob_stamped = false;

void refresh_knob(State& s) {
    timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    if (g_knob_checked.exchange(now.tv_sec, std::memory_order_relaxed) == now.tv_sec) return;
    std::unique_lock lock(g_knob_mu, std::try_to_lock);
    if (!lock.owns_lock()) return;
    std::string path = config::default_config_path();
    struct stat st;
    if (path.empty() || stat(path.c_str(), &st) != 0) return;
    Stamp stamp{st.st_ino, st.st_size,
                int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    if (!g_knob_stamped) {
        // The first look: the file as loaded at start is the baseline.
        g_knob_stamped = true;
        g_knob_stamp = stamp;
        if (s.cfg.source == path || !s.config_ok) return; // (a bad file was reported at start)
    } else {
        if (stamp == g_knob_stamp) return;
        g_knob_stamp = stamp;
    }
    auto loaded = config::load_config_file(path);
    if (auto* cfg = std::get_if<config::Config>(&loaded)) {
        int was = g_limit_hs.exchange(cfg->limit_smc_hs ? 1 : 0);
        if (was != (cfg->limit_smc_hs ? 1 : 0))
            log::info("limit_smc_hs is now {} ({})", cfg->limit_smc_hs, path);
    } else {
        log::warn("{}; keeping limit_smc_hs as it was",
                  std::get<config::LoadError>(loaded).message);
    }
}
} // namespace

bool default_limit_hs() {
    State& s = get();
    if (s.opts.limit_hs >= 0) return s.opts.limit_hs == 1;
    refresh_knob(s);
    int v = g_limit_hs.load(std::memory_order_relaxed);
    return v >= 0 ? v == 1 : s.cfg.limit_smc_hs;
}

namespace {
std::atomic<bool> g_sandboxed{false}; // note_sandboxed
std::atomic<bool> g_io_uring{false};  // note_io_uring
} // namespace

config::ModeSet decide(config::Role role, const sockaddr* addr, socklen_t len, uint32_t* reason) {
    State& s = get();
    // Under a seccomp filter the data path's calls may be fatal.
    if (g_sandboxed.load(std::memory_order_relaxed)) {
        *reason = fallback::SECCOMP;
        return 0;
    }
    // io_uring's reads, writes and epoll_ctl reach sockets without usmc.
    if (g_io_uring.load(std::memory_order_relaxed)) {
        *reason = fallback::IOURING;
        return 0;
    }
    if (!s.config_ok) {
        *reason = fallback::CONFIG;
        return 0;
    }
    config::MatchInput in;
    in.exe_name = s.exe_name;
    in.argv0_name = s.argv0_name;
    in.role = role;
    in.endpoint = config::Endpoint::from_sockaddr(addr, len);
    config::ModeSet modes = config::match_policy(s.cfg.policies, in, s.cfg.mode) & s.opts.modes;
    *reason = modes ? 0u : uint32_t{fallback::POLICY};
    return modes;
}

void publish_own_stats_slow() {
    int expected = 1;
    if (!g_seg_deferred.compare_exchange_strong(expected, 2, std::memory_order_acq_rel)) {
        while (g_seg_deferred.load(std::memory_order_acquire) == 2)
            sched_yield(); // another thread is publishing: a few system calls
        return;
    }
    publish_child_segment(storage());
    g_seg_deferred.store(0, std::memory_order_release);
}

void fork_returned(bool failed) {
    if (initialised() && engine()) engine()->fork_returned(failed);
}

void quick_exit_conns() {
    if (initialised() && engine()) engine()->on_exit();
}

void note_sandboxed() {
    g_sandboxed.store(true, std::memory_order_release);
    // Nor does it write usmc's lines but errors from here on: stderr may be
    // a file the sandbox forbids growing (OpenSSH sets RLIMIT_FSIZE to 0:
    // a write is SIGXFSZ).
    log::set_level(config::LogLevel::Error);
}

void note_io_uring() {
    g_io_uring.store(true, std::memory_order_release);
}

void shutdown() {
    State& s = storage();
    if (initialised() && engine()) engine()->on_exit();
    if (!s.seg || s.seg->pid != getpid()) return;
    if (g_sandboxed.load(std::memory_order_acquire)) return;
    if (g_seg_deferred.load(std::memory_order_acquire) != 0) {
        // Never published: what it counted (if anything) still goes to the totals.
        if (statseg::counted_anything(s.seg)) statseg::retire(s.seg);
        return;
    }
    if (s.seg_path[0]) {
        statseg::retire(s.seg);
        unlink(s.seg_path);
    }
}

} // namespace usmc::runtime
