// SPDX-License-Identifier: MIT
#pragma once
// When a wait busy-polls. A spin pays when what it waits for comes while it
// spins, and only when the CPU it burns is spare: with more runnable threads
// than CPUs, the peer (or whatever must run before the answer can come)
// waits for the very CPU the spinner holds, and every spin makes the answer
// later. Pure CPU hogs hide this (a spinner keeps its CPU against them and
// its peer answers at once); blocking work that needs the CPU shows it.
//
// Three signals, all checked before every spin:
// - this thread's recent spins: after a spin that found nothing, the next
//   1, 2, 4 .. 64 waits sleep at once; a spin that finds its event starts
//   over. (An event loop is one thread, so this follows its workload.)
// - the machine's: runnable threads (the kernel's nr_running, the fourth
//   field of /proc/loadavg, counting the reader itself) against the online
//   CPUs, sampled at most once a millisecond by whichever thread is about
//   to wait. While a sample showed more runnable threads than CPUs, and for
//   kHoldNs after, no thread of this process spins.
// - this thread's own CPU: the time it spent runnable but waiting for a
//   CPU (the run-queue wait, the second field of
//   /proc/thread-self/schedstat), sampled at most once a millisecond per
//   thread while the machine's signal allows spins (open, read, close). A
//   thread that waited an eighth of the time since its last sample shares
//   its CPU with someone runnable, though the machine as a whole may not
//   look full: a server pinned to one CPU, all its backends queued behind
//   each other there while the other CPU idles. No spin for kWaitedHoldNs
//   after. Not the count of involuntary context switches: a
//   kernel worker or our own event loop taking a few microseconds of a
//   pinned server's CPU is a preemption too, and stopped its spins for
//   most of the time.
// /proc/pressure/cpu was the other candidate: its averages span 10 s and
// more, far slower than the loads that come and go here, and its total
// would need two reads to give a rate.
// busy_poll_us stays the upper bound of one spin; 0 still means never.
#include <cstddef>
#include <cstdint>

namespace usmc::spin {

constexpr uint64_t kSampleNs = 1'000'000; // one read of each source per ms at most
constexpr uint64_t kHoldNs = 10'000'000;  // a contended sample stops spins this long
constexpr uint64_t kWaitedHoldNs =
    50'000'000;                      // a thread that waited for its CPU stops spinning this long
constexpr uint64_t kWaitedShare = 8; // waited 1/kWaitedShare of the time since the last sample
constexpr uint32_t kMaxBackoff = 64;

// One thread's spin history.
struct Thread {
    uint32_t skip = 0;    // waits left that sleep at once
    uint32_t backoff = 0; // how many the next miss skips
};
// Whether this wait may spin (consumes one skipped wait if not).
bool take_turn(Thread& t);
// What the spin found.
void after(Thread& t, bool hit);

// The fourth field of /proc/loadavg ("0.10 0.20 0.30 3/456 789"): the
// runnable threads before the slash. False if the text is not that.
bool parse_running(const char* text, size_t n, uint32_t* running);
// Reads it now.
bool read_running(uint32_t* running);
// The second field of /proc/thread-self/schedstat ("1234 5678 9"): the
// nanoseconds this thread spent runnable, waiting for a CPU.
bool parse_run_delay(const char* text, size_t n, uint64_t* ns);
// Reads it now, for the calling thread (false without schedstat).
bool read_run_delay(uint64_t* ns);
// Whether `waited_ns` of run-queue wait in a window of `window_ns` means
// the thread shares its CPU: an eighth of the window or more.
constexpr bool waited_too_long(uint64_t waited_ns, uint64_t window_ns) {
    return window_ns > 0 && waited_ns >= window_ns / kWaitedShare;
}

// The spin budget of the calling thread for a wait now, in ns: 0 means
// sleep at once (this thread's spins missed lately, or the CPUs are
// taken). Otherwise the wait spins at most that long and reports with end().
uint64_t begin(uint32_t busy_poll_us);
void end(bool hit);

// busy_poll_adaptive = false: every wait spins up to busy_poll_us, for
// machines whose cores are set aside for the application.
void set_adaptive(bool on);

// Whether the machine has a CPU to spare (samples when due).
bool cpu_spare();

// For tests: where samples come from (nullptr: /proc/loadavg), the CPU
// count to compare with (0: online CPUs), and forgetting past samples.
namespace testing {
void set_source(bool (*running)(uint32_t*), uint32_t cpus);
// Where this thread's run-queue wait comes from (nullptr:
// /proc/thread-self/schedstat).
void set_delay_source(bool (*run_delay)(uint64_t*));
void reset();
} // namespace testing

} // namespace usmc::spin
