// SPDX-License-Identifier: MIT
#include "tools/peer_reasons.hpp"

#include "engine/base/fallback.hpp"
#include "tools/live_sockets.hpp"

#include <fmt/format.h>

#include <set>

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
    // The client sockets that chose TCP for a reason of their own, then the
    // kernel's view of all of them in one query.
    struct Pending {
        uint64_t inode;
        uint32_t reason;
    };
    std::vector<Pending> clients;
    std::map<pid_t, std::set<uint64_t>> wanted;
    for_each_live_socket(views, [&](const statseg::View&, pid_t pid, int fd, const SockInfo& s) {
        if (s.role != SockRole::Client || s.mode != SockMode::Tcp || !s.reason) return;
        uint64_t inode = socket_inode(pid, fd);
        if (!inode) return;
        wanted[pid].insert(inode);
        clients.push_back({inode, s.reason});
    });
    if (clients.empty()) return out;
    auto table = tcp_sockets(wanted);
    for (const auto& c : clients) {
        auto it = table.find(c.inode);
        if (it == table.end()) continue;
        out.by_pair_[{unmapped(it->second.local), unmapped(it->second.peer)}] = c.reason;
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

Json reason_json(uint32_t reason) {
    if (!reason) return Json();
    return Json{{"name", fallback::name_of(reason)}, {"code", reason}};
}

} // namespace usmc::tools
