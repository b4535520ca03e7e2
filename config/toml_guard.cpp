// SPDX-License-Identifier: MIT
#include "config/toml_guard.hpp"

#include <cstdint>

namespace usmc::config {

namespace {

// The code points toml++ 3.3's whitespace test must not see.
bool unsafe(uint32_t cp) {
    return (cp >= 0xA1 && cp <= 0x499) || (cp >= 0x2C5E && cp <= 0x3057 && cp != 0x3000) ||
           (cp >= 0xFB26 && cp <= 0xFEFE);
}

// The code point of the UTF-8 sequence at t[i] and its length; a malformed
// one counts as one byte of no concern (toml++ refuses malformed UTF-8).
uint32_t decode(std::string_view t, size_t i, size_t* len) {
    auto b = [&](size_t k) { return static_cast<unsigned char>(t[i + k]); };
    auto cont = [&](size_t k) { return i + k < t.size() && (b(k) & 0xC0) == 0x80; };
    *len = 1;
    if (b(0) >= 0xC2 && b(0) <= 0xDF && cont(1)) {
        *len = 2;
        return (b(0) & 0x1Fu) << 6 | (b(1) & 0x3Fu);
    }
    if (b(0) >= 0xE0 && b(0) <= 0xEF && cont(1) && cont(2)) {
        *len = 3;
        return (b(0) & 0x0Fu) << 12 | (b(1) & 0x3Fu) << 6 | (b(2) & 0x3Fu);
    }
    return 0;
}

// Whether a quote after `last` (the previous character of code on its
// line, 0 at its start) opens a string: a value after '=', in an array or an
// inline table, or a quoted key at a line's start or after a dot.
bool string_may_start(char last) {
    return last == 0 || last == '=' || last == '[' || last == ',' || last == '{' || last == '.';
}

} // namespace

GuardedText guard_for_toml(std::string_view t) {
    enum class In { Code, Comment, String } in = In::Code;
    GuardedText out{std::string(t), {}};
    std::string_view close; // the open string's closing quote(s)
    bool escapes = false;   // a basic string: backslash escapes
    char last = 0;
    size_t line = 1;
    size_t line_start = 0;
    auto ahead = [&](size_t i, std::string_view s) { return t.substr(i, s.size()) == s; };
    for (size_t i = 0; i < t.size();) {
        char c = t[i];
        if (static_cast<unsigned char>(c) >= 0x80) {
            size_t len = 0;
            uint32_t cp = decode(t, i, &len);
            if (unsafe(cp)) {
                if (in != In::Comment) {
                    out.refused = {line, i - line_start + 1};
                    return out;
                }
                out.text.replace(i, len, len, ' ');
            }
            i += len;
            if (in == In::Code) last = 'x';
            continue;
        }
        if (c == '\n') {
            ++line;
            line_start = i + 1;
            last = 0;
            // A one-line string or a comment ends here, well formed or not.
            if (in == In::Comment || (in == In::String && close.size() == 1)) in = In::Code;
            ++i;
            continue;
        }
        switch (in) {
        case In::Code:
            if (c == '#') {
                in = In::Comment;
            } else if ((c == '"' || c == '\'') && string_may_start(last)) {
                bool multi = ahead(i, c == '"' ? "\"\"\"" : "'''");
                close = t.substr(i, multi ? 3 : 1);
                escapes = c == '"';
                in = In::String;
                i += close.size();
                continue;
            } else if (c != ' ' && c != '\t' && c != '\r') {
                last = c;
            }
            break;
        case In::Comment:
            break;
        case In::String:
            if (escapes && c == '\\' && i + 1 < t.size() && t[i + 1] != '\n' &&
                static_cast<unsigned char>(t[i + 1]) < 0x80) {
                i += 2; // the escaped character
                continue;
            }
            if (ahead(i, close)) {
                i += close.size();
                in = In::Code;
                last = '"';
                continue;
            }
            break;
        }
        ++i;
    }
    return out;
}

} // namespace usmc::config
