#pragma once
// Byte sizes as users write them: 65536, "64K", "64KiB", "1M" (powers of 1024,
// like smc_run's -r/-t options).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace usmc::config {

std::optional<uint64_t> parse_size(std::string_view text);
std::string format_size(uint64_t bytes); // "64KiB", "1MiB", "1000"

} // namespace usmc::config
