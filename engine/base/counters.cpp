// SPDX-License-Identifier: MIT
#include "engine/base/counters.hpp"

namespace usmc::counters {

namespace {
constexpr const char* kNames[] = {
#define USMC_COUNTER_NAME(name, text) #name,
    USMC_COUNTERS(USMC_COUNTER_NAME)
#undef USMC_COUNTER_NAME
};
constexpr const char* kTexts[] = {
#define USMC_COUNTER_TEXT(name, text) text,
    USMC_COUNTERS(USMC_COUNTER_TEXT)
#undef USMC_COUNTER_TEXT
};
} // namespace

bool is_gauge(Id id) {
    return id == handshakes_inflight || id == accept_queue || id == dmb_bytes ||
           id == dmb_spare_bytes || (id >= hs_client_connecting && id <= hs_server_blocking);
}

const char* name_of(Id id) {
    return id < kCount ? kNames[id] : "?";
}
const char* description_of(Id id) {
    return id < kCount ? kTexts[id] : "?";
}

const char* bucket_name(unsigned bucket) {
    static constexpr const char* kNames[kBuckets] = {"8KB",   "16KB",  "32KB",   "64KB",   "128KB",
                                                     "256KB", "512KB", "1024KB", ">1024KB"};
    return bucket < kBuckets ? kNames[bucket] : "?";
}

} // namespace usmc::counters
