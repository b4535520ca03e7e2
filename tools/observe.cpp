// SPDX-License-Identifier: MIT
#include "tools/observe.hpp"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace usmc::tools {

namespace {
constexpr uint32_t kMinDmb = 16 << 10, kMaxDmb = 1 << 20;

bool dmb_size_ok(uint32_t size) {
    return size >= kMinDmb && size <= kMaxDmb && std::has_single_bit(size);
}
constexpr uint8_t kEnding = core::kPeerDoneWriting | core::kPeerConnClosed | core::kPeerConnAbort;
} // namespace

std::optional<ControlWords> parse_control(const uint8_t* line, size_t len) {
    if (len < smcd::kControlBytes || line[0] != smcd::kCdcType) return std::nullopt;
    ControlWords w;
    std::memcpy(&w.prod, line + 8, 8);
    std::memcpy(&w.cons, line + 16, 8);
    std::memcpy(&w.waiting, line + 32, 8);
    return w;
}

std::optional<ControlWords> read_control(pid_t pid, const statseg::ConnRecord& rec) {
    if (!record_plausible(rec)) return std::nullopt;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/fd/%d", static_cast<int>(pid), rec.dmb_fd);
    // Before opening (opening a device may do something): it must name a
    // usmc DMB memfd of the recorded inode and size. The descriptor can
    // change meanwhile, so O_NONBLOCK (a FIFO must not make us wait) and the
    // same checks again on what was opened.
    char target[64] = {};
    ssize_t n = readlink(path, target, sizeof target - 1);
    constexpr char kMemfd[] = "/memfd:usmc-dmb";
    struct stat st;
    if (n <= 0 || std::strncmp(target, kMemfd, sizeof kMemfd - 1) != 0 || stat(path, &st) != 0 ||
        !S_ISREG(st.st_mode) || uint64_t(st.st_ino) != rec.dmb_ino)
        return std::nullopt;
    int fd = ::open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) return std::nullopt;
    std::optional<ControlWords> out;
    uint8_t line[smcd::kControlBytes];
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && uint64_t(st.st_ino) == rec.dmb_ino &&
        st.st_size >= off_t(rec.dmb_offset) + off_t(rec.dmb_size) &&
        pread(fd, line, sizeof line, off_t(rec.dmb_offset)) == ssize_t(sizeof line))
        out = parse_control(line, sizeof line);
    ::close(fd);
    return out;
}

bool record_plausible(const statseg::ConnRecord& rec) {
    return rec.fd >= 0 && rec.dmb_fd >= 0 && dmb_size_ok(rec.dmb_size) &&
           dmb_size_ok(rec.peer_dmb_size);
}

std::optional<Located> find_peer(const statseg::ConnRecord& mine, const std::vector<Located>& all) {
    for (const auto& l : all) {
        const auto& r = l.rec;
        if (r.gid == mine.peer_gid && r.token == mine.peer_token && r.peer_gid == mine.gid &&
            r.peer_token == mine.token && r.dmb_ino == mine.peer_dmb_ino &&
            r.dmb_size == mine.peer_dmb_size)
            return l;
    }
    return std::nullopt;
}

Detail detail_of(const statseg::ConnRecord& mine, const std::optional<ControlWords>& own,
                 const std::optional<ControlWords>& peers) {
    Detail d;
    if (!record_plausible(mine)) return d;
    d.rcvbuf = mine.dmb_size - smcd::kControlBytes;
    d.peerbuf = mine.peer_dmb_size - smcd::kControlBytes;
    // Our control line: the peer's producer cursor into our ring, and its
    // consumer cursor of its ring with the flags it sent.
    if (own) {
        d.rx_prod = smcd::unpack_prod(own->prod);
        d.tx_cons = smcd::unpack_cons(own->cons);
        d.rx_flags = smcd::conn_flags_of(own->cons);
        d.rx_pflags = smcd::prod_flags_of(own->cons);
    }
    // The peer's: ours, the other way round.
    if (peers) {
        d.tx_prod = smcd::unpack_prod(peers->prod);
        d.rx_cons = smcd::unpack_cons(peers->cons);
        d.tx_flags = smcd::conn_flags_of(peers->cons);
        d.tx_pflags = smcd::prod_flags_of(peers->cons);
    }
    if (d.rx_prod && d.rx_cons)
        d.rx_ok = core::distance(*d.rx_cons, *d.rx_prod, d.rcvbuf).has_value();
    if (d.tx_prod && d.tx_cons)
        d.tx_ok = core::distance(*d.tx_cons, *d.tx_prod, d.peerbuf).has_value();
    return d;
}

std::string cursor_text(const std::optional<core::Cursor>& c) {
    if (!c) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%04x:%08x", unsigned{c->wrap}, unsigned{c->count});
    return buf;
}

std::string flags_text(const std::optional<uint8_t>& prod, const std::optional<uint8_t>& conn) {
    if (!prod || !conn) return "-";
    char buf[8];
    std::snprintf(buf, sizeof buf, "%02x:%02x", unsigned{*prod}, unsigned{*conn});
    return buf;
}

std::string shutdown_text(const Detail& d) {
    std::string s;
    s += !d.rx_flags ? '?' : (*d.rx_flags & kEnding) ? 'R' : '<';
    s += '-';
    s += !d.tx_flags ? '?' : (*d.tx_flags & kEnding) ? 'W' : '>';
    return s;
}

std::string hex64(uint64_t v) {
    char buf[20];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

} // namespace usmc::tools
