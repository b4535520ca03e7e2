// SPDX-License-Identifier: MIT
#pragma once
// The server's end of a connection can only say PEERNOSMC when its client
// chose TCP on its own (LEARNED, EPOLLEARLY, POLICY, ...): no byte tells it
// why. Where both ends run here under usmc, `usmc ss` sees both, and joins
// them by their address pair: the server row shows the client's reason too.
#include "engine/base/fdtable.hpp"
#include "engine/base/statseg.hpp"
#include "tools/procnet.hpp"
#include "tools/stats_view.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace usmc::tools {

class ClientReasons {
  public:
    // The TCP client sockets with a reason among the live processes of `views`.
    static ClientReasons collect(const std::vector<statseg::View>& views);
    // For a server's TCP connection (its socket word and the kernel's view
    // of it): the reason its client end gave, when that end is known and its
    // reason differs from the server's own; else 0.
    uint32_t for_server(const SockInfo& s, const TcpEntry& e) const;

  private:
    std::map<std::pair<std::string, std::string>, uint32_t> by_pair_; // (local, peer) -> reason
};

// `usmc ss`'s reason text with the client's: "PEERNOSMC 0x03010000 client:LEARNED".
std::string with_client_reason(std::string text, uint32_t client_reason);
// JSON: {"name":..,"code":..} or null.
Json reason_json(uint32_t reason);

// "[::ffff:127.0.0.1]:80" -> "127.0.0.1:80": the two ends of one loopback
// connection may see it in different families.
std::string unmapped(const std::string& address);

} // namespace usmc::tools
