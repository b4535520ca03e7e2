// SPDX-License-Identifier: MIT
#pragma once
// TCP_NODELAY and TCP_CORK of an SMC connection as the application set
// them (nginx toggles both around each response). While the data flows
// through shared memory they are kept here, so setsockopt and getsockopt
// cost no system call; the kernel's socket is told them before it carries
// the data (a move to TCP), so it then behaves as the application asked.
//
// One byte (ConnSocket::tcp_opts) holds both options, four bits each:
//   known         usmc knows the socket's value: set through usmc, or read
//                 from the kernel's socket once. Not known: the kernel's
//                 socket holds it (set before connect(), inherited from
//                 the listener).
//   on            that value (a nonzero int, as the kernel reads it).
//   kernel_known  usmc knows what the kernel's socket holds,
//   kernel_on     and that is on.
// Each change is one compare-and-swap of the whole byte; these functions
// compute the new byte from the old.
#include <cstdint>

namespace usmc::tcp_opts {

enum class Opt : uint8_t { Nodelay = 0, Cork = 1 };
constexpr Opt kOpts[] = {Opt::Nodelay, Opt::Cork};

constexpr uint8_t kKnown = 1, kOn = 2, kKernelKnown = 4, kKernelOn = 8;

constexpr unsigned shift(Opt o) {
    return 4 * static_cast<unsigned>(o);
}
constexpr uint8_t bits(uint8_t w, Opt o) {
    return static_cast<uint8_t>((w >> shift(o)) & 15);
}
constexpr uint8_t with(uint8_t w, Opt o, unsigned b) {
    return static_cast<uint8_t>((w & ~(15u << shift(o))) | (b << shift(o)));
}

constexpr bool known(uint8_t w, Opt o) {
    return bits(w, o) & kKnown;
}
constexpr bool on(uint8_t w, Opt o) {
    return bits(w, o) & kOn;
}
// The kernel's socket holds the value usmc answers.
constexpr bool synced(uint8_t w, Opt o) {
    uint8_t b = bits(w, o);
    return (b & kKnown) && (b & kKernelKnown) && bool(b & kOn) == bool(b & kKernelOn);
}

// The application set `o` to `v`; `kernel`: on the kernel's socket too.
constexpr uint8_t set(uint8_t w, Opt o, bool v, bool kernel) {
    unsigned b = (bits(w, o) & (kKernelKnown | kKernelOn)) | kKnown | (v ? kOn : 0);
    if (kernel) b = kKnown | kKernelKnown | (v ? kOn | kKernelOn : 0);
    return with(w, o, b);
}

// The kernel's socket answered `v` for `o`: known from now on, unless the
// application set it meanwhile (that value stands).
constexpr uint8_t read(uint8_t w, Opt o, bool v) {
    return known(w, o) ? w : with(w, o, kKnown | kKernelKnown | (v ? kOn | kKernelOn : 0));
}

// The kernel's socket must be told `o` before it carries the data: usmc
// keeps a value the socket may not hold.
constexpr bool to_apply(uint8_t w, Opt o) {
    return known(w, o) && !synced(w, o);
}

// The kernel's socket was told `v` for `o`.
constexpr uint8_t applied(uint8_t w, Opt o, bool v) {
    return with(w, o, (bits(w, o) & (kKnown | kOn)) | kKernelKnown | (v ? kKernelOn : 0));
}

} // namespace usmc::tcp_opts
