// SPDX-License-Identifier: MIT
#pragma once
// What each fallback reason (engine/base/fallback.hpp) means to a user and
// what to do about it: one table, which `usmc check` prints from and which
// the FALLBACK REASONS section of usmc(8) is checked against (the unit
// tests compare that section with man_section()).
//
// The texts carry scdoc's bold markup (*name*) around names a user types;
// plain() takes it out for the terminal.
#include "engine/base/fallback.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace usmc::tools::reasons {

enum class Origin : uint8_t {
    Usmc,   // usmc decides it (this host's shim, either end)
    Kernel, // only a kernel SMC peer sends it; usmc recognises it
};

struct Advice {
    const char* meaning; // what happened, a sentence or two
    const char* remedy;  // what to do about it
    Origin origin;
};

// Every fallback::Code has one (a switch without default: a new reason
// without advice does not compile).
const Advice& advice_of(fallback::Code code);
// The same for a code read from somewhere else; nullopt for an unknown one.
std::optional<Advice> advice_for(uint32_t code);

// Text without scdoc's *bold* markers.
std::string plain(std::string_view marked);

// "NAME (0x0a0a0000): meaning What to do: remedy" without markup, one line.
std::string explain(uint32_t code);

// The man page's list of reasons, in the table's order: for each one
// "*NAME* 0x........" and its meaning and remedy, tab-indented, wrapped.
std::string man_section();

} // namespace usmc::tools::reasons
