// SPDX-License-Identifier: MIT
#pragma once
// Editing the global knob in usmc.toml (`usmc limit-hs enable|disable`):
// the file is changed in one rename, so a running program that re-reads it
// sees the old or the new file, never half of one.
#include <optional>
#include <string>

namespace usmc::config {

// Sets `limit_smc_hs` in the TOML text: replaces the existing top-level
// assignment or adds one at the top. The result is checked by parsing it;
// nullopt with `error` set if the text does not parse before or after.
std::optional<std::string> with_limit_smc_hs(const std::string& text, bool on,
                                             const std::string& source, std::string* error);

// Reads `path` (a missing file counts as empty), sets the knob, writes a
// temporary file beside it and renames it over `path`. "" on success, else
// what went wrong.
std::string write_limit_smc_hs(const std::string& path, bool on);

} // namespace usmc::config
