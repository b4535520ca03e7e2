// SPDX-License-Identifier: MIT
#include "config/size.hpp"

#include <charconv>

namespace usmc::config {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && s.front() == ' ')
        s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ')
        s.remove_suffix(1);
    return s;
}

char lower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// The power of two a unit stands for, or -1 if it is none.
int unit_shift(std::string_view unit) {
    if (unit.empty()) return 0;
    int shift = 0;
    switch (lower(unit.front())) {
    case 'b':
        return unit.size() == 1 ? 0 : -1;
    case 'k':
        shift = 10;
        break;
    case 'm':
        shift = 20;
        break;
    case 'g':
        shift = 30;
        break;
    default:
        return -1;
    }
    std::string_view rest = unit.substr(1);
    if (rest.size() == 2 && lower(rest[0]) == 'i') rest.remove_prefix(1); // KiB
    return rest.empty() || (rest.size() == 1 && lower(rest[0]) == 'b') ? shift : -1;
}

} // namespace

std::optional<uint64_t> parse_size(std::string_view text, bool* too_large) {
    if (too_large) *too_large = false;
    text = trim(text);
    const char* first = text.data();
    const char* last = text.data() + text.size();
    const char* digits_end = first;
    while (digits_end != last && *digits_end >= '0' && *digits_end <= '9')
        ++digits_end;
    if (digits_end == first) return std::nullopt;
    int shift = unit_shift(trim(std::string_view(digits_end, size_t(last - digits_end))));
    if (shift < 0) return std::nullopt;
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(first, digits_end, value);
    bool overflow = ec == std::errc::result_out_of_range ||
                    (ec == std::errc() && value > (UINT64_MAX >> shift));
    if (overflow) {
        if (too_large) *too_large = true;
        return std::nullopt;
    }
    if (ec != std::errc() || end != digits_end) return std::nullopt;
    return value << shift;
}

std::string format_size(uint64_t bytes) {
    static constexpr const char* units[] = {"GiB", "MiB", "KiB"};
    static constexpr unsigned shifts[] = {30, 20, 10};
    for (int i = 0; i < 3; ++i) {
        uint64_t unit = uint64_t{1} << shifts[i];
        if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + units[i];
    }
    return std::to_string(bytes);
}

} // namespace usmc::config
