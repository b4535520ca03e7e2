// SPDX-License-Identifier: MIT
#include "engine/conn/spin.hpp"

#include "engine/base/count.hpp"
#include "engine/base/sys.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fcntl.h>
#include <sys/sysinfo.h>
#include <time.h>

namespace usmc::spin {

bool take_turn(Thread& t) {
    if (t.skip == 0) return true;
    --t.skip;
    return false;
}

void after(Thread& t, bool hit) {
    if (hit) {
        t.backoff = 0;
        return;
    }
    t.backoff = t.backoff ? std::min(t.backoff * 2, kMaxBackoff) : 1;
    t.skip = t.backoff;
}

bool parse_run_delay(const char* text, size_t n, uint64_t* ns) {
    size_t i = 0;
    while (i < n && text[i] != ' ') // the time on a CPU, then a space
        ++i;
    if (i == n) return false;
    ++i;
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < n && text[i] >= '0' && text[i] <= '9' && digits < 19; ++i, ++digits)
        v = v * 10 + uint64_t(text[i] - '0');
    if (digits == 0 || i == n || text[i] != ' ') return false;
    *ns = v;
    return true;
}

bool parse_running(const char* text, size_t n, uint32_t* running) {
    size_t i = 0;
    for (int field = 0; field < 3; ++field) { // three load averages, then a space
        while (i < n && text[i] != ' ')
            ++i;
        if (i == n) return false;
        ++i;
    }
    uint64_t v = 0;
    size_t digits = 0;
    for (; i < n && text[i] >= '0' && text[i] <= '9' && digits < 10; ++i, ++digits)
        v = v * 10 + uint64_t(text[i] - '0');
    if (digits == 0 || i == n || text[i] != '/' || v > UINT32_MAX) return false;
    *running = static_cast<uint32_t>(v);
    return true;
}

// open() is not interposed; read and close go to the real libc (both here).
// The caller's errno stays: the waits that sample succeed as they would
// have.
bool read_running(uint32_t* running) {
    int saved = errno;
    int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return false;
    }
    char buf[128];
    ssize_t n = sys::real().read(fd, buf, sizeof buf);
    sys::real().close(fd);
    errno = saved;
    return n > 0 && parse_running(buf, size_t(n), running);
}

namespace {
// No schedstat here (no /proc, a kernel without it, a sandbox): not asked
// again, once a millisecond in every spinning thread.
std::atomic<bool> g_no_schedstat{false};
} // namespace

bool read_run_delay(uint64_t* ns) {
    if (g_no_schedstat.load(std::memory_order_relaxed)) return false;
    int saved = errno;
    int fd = ::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == EACCES || errno == EPERM || errno == ENOSYS)
            g_no_schedstat.store(true, std::memory_order_relaxed);
        errno = saved;
        return false;
    }
    char buf[96];
    ssize_t n = sys::real().read(fd, buf, sizeof buf - 1);
    sys::real().close(fd);
    errno = saved;
    return n > 0 && parse_run_delay(buf, size_t(n), ns);
}

namespace {

std::atomic<bool (*)(uint32_t*)> g_source{read_running};
std::atomic<uint32_t> g_cpus{0};
std::atomic<bool> g_adaptive{true};
std::atomic<uint64_t> g_next_sample_ns{0};
std::atomic<uint64_t> g_busy_until_ns{0};
thread_local Thread t_thread;

uint64_t precise_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

// This thread's time spent waiting for a CPU at its last sample.
struct Waited {
    uint64_t next_ns = 0;
    uint64_t at_ns = 0;    // when the last sample was taken
    uint64_t delay_ns = 0; // the run-queue wait it read
    uint64_t busy_until_ns = 0;
    bool known = false;
};
thread_local Waited t_waited;

std::atomic<bool (*)(uint64_t*)> g_delay_source{read_run_delay};

bool own_cpu_spare(uint64_t now) {
    Waited& w = t_waited;
    if (now < w.next_ns) return now >= w.busy_until_ns;
    // The window by the precise clock, at least kSampleNs: the coarse one
    // moves a tick (up to 10 ms) at a time, and two samples a tick apart
    // by it may be microseconds apart.
    uint64_t at = precise_ns();
    if (w.known && at - w.at_ns < kSampleNs) return now >= w.busy_until_ns;
    w.next_ns = now + kSampleNs;
    uint64_t d = 0;
    if (g_delay_source.load(std::memory_order_relaxed)(&d)) {
        // (A forked child's count starts again from 0: a new baseline.)
        if (w.known && d >= w.delay_ns && waited_too_long(d - w.delay_ns, at - w.at_ns))
            w.busy_until_ns = now + kWaitedHoldNs;
        w.at_ns = at;
        w.delay_ns = d;
        w.known = true;
    }
    return now >= w.busy_until_ns;
}

uint64_t coarse_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint32_t cpus() {
    uint32_t n = g_cpus.load(std::memory_order_relaxed);
    if (n == 0) {
        n = static_cast<uint32_t>(std::max(1, get_nprocs()));
        g_cpus.store(n, std::memory_order_relaxed);
    }
    return n;
}

} // namespace

bool cpu_spare() {
    uint64_t now = coarse_ns();
    uint64_t next = g_next_sample_ns.load(std::memory_order_relaxed);
    // One thread takes each sample; the others use the last one.
    if (now >= next && g_next_sample_ns.compare_exchange_strong(next, now + kSampleNs,
                                                                std::memory_order_relaxed)) {
        uint32_t running = 0;
        if (g_source.load(std::memory_order_relaxed)(&running) && running > cpus())
            g_busy_until_ns.store(now + kHoldNs, std::memory_order_relaxed);
    }
    return now >= g_busy_until_ns.load(std::memory_order_relaxed);
}

void set_adaptive(bool on) {
    g_adaptive.store(on, std::memory_order_relaxed);
}

uint64_t begin(uint32_t busy_poll_us) {
    if (busy_poll_us == 0) return 0;
    if (!g_adaptive.load(std::memory_order_relaxed)) return uint64_t{busy_poll_us} * 1000;
    if (!take_turn(t_thread)) return 0;
    if (!cpu_spare() || !own_cpu_spare(coarse_ns())) {
        counters::count(counters::busy_poll_yields);
        return 0;
    }
    return uint64_t{busy_poll_us} * 1000;
}

void end(bool hit) {
    counters::count(hit ? counters::busy_poll_hits : counters::busy_poll_misses);
    if (g_adaptive.load(std::memory_order_relaxed)) after(t_thread, hit);
}

namespace testing {
void set_delay_source(bool (*run_delay)(uint64_t*)) {
    g_delay_source.store(run_delay ? run_delay : read_run_delay);
    t_waited = Waited{};
}
void set_source(bool (*running)(uint32_t*), uint32_t n) {
    g_source.store(running ? running : read_running);
    g_cpus.store(n);
    reset();
}
void reset() {
    g_adaptive.store(true);
    g_next_sample_ns.store(0);
    g_busy_until_ns.store(0);
    t_thread = Thread{};
    t_waited = Waited{};
}
} // namespace testing

} // namespace usmc::spin
