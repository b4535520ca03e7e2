#include "tools/peer_reasons.hpp"

#include "engine/base/fallback.hpp"
#include "tools/observe.hpp"

#include <fmt/format.h>

namespace usmc::tools {

std::string unmapped(const std::string& address) {
    constexpr std::string_view kMapped = "[::ffff:";
    if (!address.starts_with(kMapped)) return address;
    size_t close = address.find("]:");
    if (close == std::string::npos) return address;
    std::string v4 = address.substr(kMapped.size(), close - kMapped.size());
    if (v4.find('.') == std::string::npos) return address; // ::ffff:x:y written in hex
    return v4 + address.substr(close + 1);
}

ClientReasons ClientReasons::collect(const std::vector<statseg::View>& views) {
    ClientReasons out;
    for (const auto& v : views) {
        if (!v.alive) continue;
        pid_t pid = v.header->pid;
        uint32_t high = v.header->fd_high.load(std::memory_order_relaxed);
        if (high > v.header->fd_capacity) high = v.header->fd_capacity;
        std::map<uint64_t, TcpEntry> table;
        bool read = false;
        for (uint32_t fd = 0; fd < high; ++fd) {
            SockInfo s = SockInfo::unpack(v.slots()[fd].load(std::memory_order_relaxed));
            if (!s.tracked() || s.role != SockRole::Client || s.mode != SockMode::Tcp || !s.reason)
                continue;
            if (!read) { // only processes with such sockets cost a table
                table = read_tcp_table(pid);
                read = true;
            }
            uint64_t inode = socket_inode(pid, static_cast<int>(fd));
            auto it = inode ? table.find(inode) : table.end();
            if (it == table.end()) continue;
            out.by_pair_[{unmapped(it->second.local), unmapped(it->second.peer)}] = s.reason;
        }
    }
    return out;
}

uint32_t ClientReasons::for_server(const SockInfo& s, const TcpEntry& e) const {
    if (s.role != SockRole::Server || s.mode != SockMode::Tcp) return 0;
    auto it = by_pair_.find({unmapped(e.peer), unmapped(e.local)});
    if (it == by_pair_.end() || it->second == s.reason) return 0;
    return it->second;
}

std::string with_client_reason(std::string text, uint32_t client_reason) {
    if (!client_reason) return text;
    return fmt::format("{} client:{}", text, fallback::name_of(client_reason));
}

std::string reason_json(uint32_t reason) {
    if (!reason) return "null";
    return fmt::format("{{\"name\":{},\"code\":{}}}", json_string(fallback::name_of(reason)),
                       reason);
}

} // namespace usmc::tools
