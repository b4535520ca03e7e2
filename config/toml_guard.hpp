// SPDX-License-Identifier: MIT
#pragma once
// What toml++ 3.3 is never handed. Where it asks whether a character is
// whitespace (between tokens, and while it reads a malformed token to the
// end for its error message), its tables reach __builtin_unreachable for the
// code points U+00A1 to U+0499, U+2C5E to U+3057 (but U+3000) and U+FB26
// to U+FEFE (found by the config fuzzer under UBSan), and a configuration
// file is read inside every wrapped program. So such a code point in a
// comment becomes spaces, and one anywhere else refuses the file: no key or
// value of usmc's needs one. Other characters beyond ASCII pass untouched
// (toml++ answers those without reaching the tables).
//
// A comment is taken as one only where no string can hide it: a quote
// opens a string only where TOML lets one start (a value, a quoted key).
// Taking a malformed token's '#' for a comment only changes toml++'s error.
#include <cstddef>
#include <string>
#include <string_view>

namespace usmc::config {

struct TextPosition {
    size_t line = 0; // 1-based; 0: none
    size_t column = 0;
};

struct GuardedText {
    std::string text;     // what toml++ may parse (when refused is empty)
    TextPosition refused; // the first code point that refuses the file
};

GuardedText guard_for_toml(std::string_view text);

} // namespace usmc::config
