// SPDX-License-Identifier: MIT
#include "engine/conn/tcp_opts.hpp"

#include <catch2/catch.hpp>

using namespace usmc::tcp_opts;

namespace {
constexpr Opt N = Opt::Nodelay, C = Opt::Cork;
}

TEST_CASE("tcp_opts: nothing known until set or read; the kernel's socket is right") {
    uint8_t w = 0;
    for (Opt o : kOpts) {
        CHECK_FALSE(known(w, o));
        CHECK_FALSE(to_apply(w, o));
    }
    // Read from the kernel: known, synced, nothing to apply.
    w = read(w, N, true);
    CHECK(known(w, N));
    CHECK(on(w, N));
    CHECK(synced(w, N));
    CHECK_FALSE(to_apply(w, N));
    CHECK_FALSE(known(w, C)); // the other option untouched
    // A later read does not overwrite what is known.
    CHECK(read(w, N, false) == w);
}

TEST_CASE("tcp_opts: a value kept by usmc is applied once, unless the kernel holds it") {
    // Set before the kernel's value was ever read: it may differ.
    uint8_t w = set(0, C, true, false);
    CHECK(known(w, C));
    CHECK(on(w, C));
    CHECK(to_apply(w, C));
    CHECK_FALSE(known(w, N));
    w = applied(w, C, true);
    CHECK(synced(w, C));
    CHECK_FALSE(to_apply(w, C));

    // Read first (the kernel's value known): a set to it needs nothing, a
    // change needs the socket told, and a change back needs nothing again.
    uint8_t r = read(0, N, true);
    CHECK_FALSE(to_apply(set(r, N, true, false), N));
    uint8_t off = set(r, N, false, false);
    CHECK(to_apply(off, N));
    CHECK_FALSE(on(off, N));
    CHECK_FALSE(to_apply(set(off, N, true, false), N));
}

TEST_CASE("tcp_opts: set on the kernel's socket too (connecting, shared by fork): synced") {
    uint8_t w = set(0, N, true, true);
    CHECK(synced(w, N));
    CHECK(on(w, N));
    w = set(w, N, false, true);
    CHECK(synced(w, N));
    CHECK_FALSE(on(w, N));
    // A read that raced a set leaves the set's value.
    CHECK(read(w, N, true) == w);
}

TEST_CASE("tcp_opts: a value changed while the socket was told the old one stays to apply") {
    uint8_t w = set(0, C, true, false);
    uint8_t changed = set(w, C, false, false); // another thread set it off meanwhile
    uint8_t told = applied(changed, C, true);  // the socket got the old value
    CHECK_FALSE(on(told, C));
    CHECK(to_apply(told, C));
    CHECK_FALSE(to_apply(applied(told, C, false), C));
}

TEST_CASE("tcp_opts: the two options never touch each other") {
    for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) {
            uint8_t w = set(set(0, N, a, false), C, b, true);
            CHECK(on(w, N) == bool(a));
            CHECK(on(w, C) == bool(b));
            CHECK(to_apply(w, N));
            CHECK_FALSE(to_apply(w, C));
            w = applied(w, N, a);
            CHECK_FALSE(to_apply(w, N));
            CHECK(on(w, C) == bool(b));
            CHECK(synced(w, C));
        }
}
