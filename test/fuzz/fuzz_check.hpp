// SPDX-License-Identifier: MIT
#pragma once
// An invariant a fuzz target asserts: a violation aborts, which libFuzzer
// reports as a crash and saves the input that caused it. (assert() would
// vanish under NDEBUG.)
#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond);      \
            std::abort();                                                                          \
        }                                                                                          \
    } while (0)
