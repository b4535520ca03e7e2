// SPDX-License-Identifier: MIT
#pragma once
// Big-endian (network byte order) fields of wire messages: CLC, and SMC-R's
// CDC and LLC messages. Byte by byte, so a field at any offset of a peer's
// buffer is read without alignment or aliasing assumptions.
#include <cstdint>

namespace usmc::be {

inline void put16(uint8_t* p, uint16_t v) {
    p[0] = uint8_t(v >> 8);
    p[1] = uint8_t(v);
}
inline void put24(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 3; ++i)
        p[i] = uint8_t(v >> (16 - 8 * i));
}
inline void put32(uint8_t* p, uint32_t v) {
    for (int i = 0; i < 4; ++i)
        p[i] = uint8_t(v >> (24 - 8 * i));
}
inline void put64(uint8_t* p, uint64_t v) {
    for (int i = 0; i < 8; ++i)
        p[i] = uint8_t(v >> (56 - 8 * i));
}
inline uint16_t get16(const uint8_t* p) {
    return uint16_t(p[0] << 8 | p[1]);
}
inline uint32_t get24(const uint8_t* p) {
    return uint32_t(p[0]) << 16 | uint32_t(p[1]) << 8 | p[2];
}
inline uint32_t get32(const uint8_t* p) {
    return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}
inline uint64_t get64(const uint8_t* p) {
    return uint64_t(get32(p)) << 32 | get32(p + 4);
}

} // namespace usmc::be
