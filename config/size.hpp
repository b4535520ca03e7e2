// SPDX-License-Identifier: MIT
#pragma once
// Byte sizes as users write them, one grammar wherever usmc reads a size: the
// file (rmem = "64K"), the environment (SMC_RCVBUF/SMC_SNDBUF) and
// usmc-run's -r/-t. Digits, then an optional unit in any case: b, k/kb/kib
// (x1024), m/mb/mib (x1048576), g/gb/gib (x1073741824); spaces around the
// number and the unit are allowed. "64k", "64K", "64KiB", "64kib", "1m",
// "1MiB" and "65536" are all sizes; "1.5M", "-1", "0x4000" and "12X" are not.
// smc_run's ^[0-9]+[kKmM]?$ is a subset.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace usmc::config {

// nullopt for anything else; `too_large` (if given) tells a well-formed
// size beyond 64 bits from a malformed one.
std::optional<uint64_t> parse_size(std::string_view text, bool* too_large = nullptr);
std::string format_size(uint64_t bytes); // "64KiB", "1MiB", "1000"

} // namespace usmc::config
