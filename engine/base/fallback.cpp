// SPDX-License-Identifier: MIT
#include "engine/base/fallback.hpp"

namespace usmc::fallback {

namespace {
struct Entry {
    uint32_t code;
    const char* name;
    const char* text;
};
constexpr Entry kEntries[] = {
#define USMC_FALLBACK_ENTRY(name, code, text) {code, #name, text},
    USMC_FALLBACK_REASONS(USMC_FALLBACK_ENTRY)
#undef USMC_FALLBACK_ENTRY
};
static_assert(sizeof kEntries / sizeof kEntries[0] == kCount);
} // namespace

std::optional<Index> index_of(uint32_t code) {
    for (unsigned i = 0; i < kCount; ++i)
        if (kEntries[i].code == code) return static_cast<Index>(i);
    return std::nullopt;
}

const char* name_of(uint32_t code) {
    auto i = index_of(code);
    return i ? kEntries[*i].name : "UNKNOWN";
}

const char* description_of(uint32_t code) {
    auto i = index_of(code);
    return i ? kEntries[*i].text : "unknown reason";
}

uint32_t code_at(Index index) {
    return index < kCount ? kEntries[index].code : 0;
}

} // namespace usmc::fallback
