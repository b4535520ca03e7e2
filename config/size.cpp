#include "config/size.hpp"

#include <charconv>

namespace usmc::config {

std::optional<uint64_t> parse_size(std::string_view text) {
    while (!text.empty() && text.front() == ' ')
        text.remove_prefix(1);
    while (!text.empty() && text.back() == ' ')
        text.remove_suffix(1);
    uint64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end == text.data()) return std::nullopt;
    std::string_view unit(end, text.data() + text.size() - end);
    while (!unit.empty() && unit.front() == ' ')
        unit.remove_prefix(1);
    unsigned shift = 0;
    if (unit.empty() || unit == "B") {
        shift = 0;
    } else {
        switch (unit.front()) {
        case 'k':
        case 'K':
            shift = 10;
            break;
        case 'm':
        case 'M':
            shift = 20;
            break;
        case 'g':
        case 'G':
            shift = 30;
            break;
        default:
            return std::nullopt;
        }
        std::string_view rest = unit.substr(1);
        if (!(rest.empty() || rest == "B" || rest == "iB")) return std::nullopt;
    }
    if (shift && value > (UINT64_MAX >> shift)) return std::nullopt;
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
