// SPDX-License-Identifier: MIT
#include "tools/table.hpp"

#include <algorithm>

namespace usmc::tools {

namespace {
// Widths in characters, not bytes: a program name in UTF-8 ("café") takes
// one column per character (bytes that continue a sequence take none).
size_t columns(const std::string& s) {
    return size_t(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xc0) != 0x80; }));
}
// `s` cut to `n` characters, never inside a sequence.
void cut_to(std::string& s, size_t n) {
    size_t chars = 0;
    for (size_t i = 0; i < s.size(); ++i)
        if ((s[i] & 0xc0) != 0x80 && chars++ == n) {
            s.resize(i);
            return;
        }
}

// Bytes a UTF-8 sequence starting with `lead` has (0: not a lead byte).
size_t sequence_length(unsigned char lead) {
    if (lead < 0x80) return 1;
    if (lead >= 0xc2 && lead <= 0xdf) return 2;
    if (lead >= 0xe0 && lead <= 0xef) return 3;
    if (lead >= 0xf0 && lead <= 0xf4) return 4;
    return 0;
}
} // namespace

std::string printable(const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        auto lead = static_cast<unsigned char>(s[i]);
        size_t n = sequence_length(lead);
        bool ok = n && i + n <= s.size();
        for (size_t k = 1; ok && k < n; ++k)
            ok = (static_cast<unsigned char>(s[i + k]) & 0xc0) == 0x80;
        if (!ok) {
            out += "\xef\xbf\xbd"; // U+FFFD
            ++i;
        } else if (n == 1 && (lead < 0x20 || lead == 0x7f)) {
            out += '?';
            ++i;
        } else {
            out.append(s, i, n);
            i += n;
        }
    }
    return out;
}

std::vector<std::string> table_lines(std::vector<Column> cols,
                                     const std::vector<std::vector<std::string>>& rows, bool wide) {
    if (wide)
        for (size_t c = 0; c < cols.size(); ++c) {
            cols[c].width = columns(cols[c].title);
            for (const auto& r : rows)
                if (c < r.size()) cols[c].width = std::max(cols[c].width, columns(r[c]));
        }
    auto line = [&](auto cell, bool header) {
        std::string out;
        for (size_t c = 0; c < cols.size(); ++c) {
            std::string v = printable(cell(c));
            if (cols[c].cut && !wide && !header) cut_to(v, cols[c].width);
            if (c) out += ' ';
            size_t n = columns(v);
            std::string pad(n < cols[c].width ? cols[c].width - n : 0, ' ');
            out += cols[c].right ? pad + v : v + pad;
        }
        while (!out.empty() && out.back() == ' ')
            out.pop_back();
        return out;
    };
    std::vector<std::string> out;
    out.push_back(line([&](size_t c) { return cols[c].title; }, true));
    for (const auto& r : rows)
        out.push_back(line([&](size_t c) { return c < r.size() ? r[c] : std::string(); }, false));
    return out;
}

} // namespace usmc::tools
