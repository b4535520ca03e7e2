// SPDX-License-Identifier: MIT
// usmc ss: the sockets of usmc processes with their mode and fallback
// reason (smcss), the kernel's state and addresses from sock_diag, and for
// SMC-D connections what their records and control lines say (-d, -D).
#include "engine/base/fallback.hpp"
#include "engine/base/fdtable.hpp"
#include "engine/base/statseg.hpp"
#include "tools/live_sockets.hpp"
#include "tools/observe.hpp"
#include "tools/peer_reasons.hpp"
#include "tools/procnet.hpp"
#include "tools/views.hpp"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>

namespace usmc::tools {

namespace {

// The details of one SMC-D connection: its record (by the descriptor it was
// made on), and copies of its two control lines (ours, and the peer's from
// the peer process's record). Unknown parts stay unknown.
struct Observed {
    std::optional<Located> mine, peer;
    Detail detail;
};

Observed observe(pid_t pid, int fd,
                 const std::map<std::pair<pid_t, int>, statseg::ConnRecord>& by_fd,
                 const std::vector<Located>& all) {
    Observed o;
    auto it = by_fd.find({pid, fd});
    if (it == by_fd.end()) return o;
    o.mine = Located{pid, it->second};
    o.peer = find_peer(it->second, all);
    auto own = read_control(pid, it->second);
    std::optional<ControlWords> peers;
    if (o.peer) peers = read_control(o.peer->pid, o.peer->rec);
    o.detail = detail_of(it->second, own, peers);
    return o;
}

Json cursor_json(const std::optional<core::Cursor>& c) {
    return c ? Json{{"wrap", c->wrap}, {"count", c->count}} : Json();
}
Json byte_json(const std::optional<uint8_t>& b) {
    return b ? Json(*b) : Json();
}

Json details_json(const Observed& o) {
    if (!o.mine) return nullptr;
    const auto& d = o.detail;
    return Json{{"shutdown", shutdown_text(d)},
                {"rcvbuf", d.rcvbuf},
                {"peerbuf", d.peerbuf},
                {"sndbuf", nullptr},
                {"rx_prod", cursor_json(d.rx_prod)},
                {"rx_cons", cursor_json(d.rx_cons)},
                {"rx_prod_flags", byte_json(d.rx_pflags)},
                {"rx_conn_flags", byte_json(d.rx_flags)},
                {"tx_prod", cursor_json(d.tx_prod)},
                {"tx_cons", cursor_json(d.tx_cons)},
                {"tx_prod_flags", byte_json(d.tx_pflags)},
                {"tx_conn_flags", byte_json(d.tx_flags)},
                {"rx_consistent", d.rx_ok},
                {"tx_consistent", d.tx_ok}};
}

Json smcd_json(const Observed& o) {
    if (!o.mine) return nullptr;
    const auto& r = o.mine->rec;
    return Json{{"gid", hex64(r.gid)},
                {"token", hex64(r.token)},
                {"peer_gid", hex64(r.peer_gid)},
                {"peer_token", hex64(r.peer_token)},
                {"dmb_size", r.dmb_size},
                {"peer_dmb_size", r.peer_dmb_size},
                {"peer_pid", o.peer ? Json(o.peer->pid) : Json()},
                {"peer_fd", o.peer ? Json(o.peer->rec.fd) : Json()}};
}

// One tracked descriptor of a live process.
struct Sock {
    const statseg::View* view;
    uint32_t fd;
    SockInfo info;
    uint64_t inode;
};

} // namespace

int cmd_ss(const std::string& dir, const SsOptions& opt) {
    auto views = statseg::open_all(dir, true);
    auto client_reasons = ClientReasons::collect(views);
    bool want_records = opt.details || opt.smcd;
    std::map<std::pair<pid_t, int>, statseg::ConnRecord> by_fd;
    std::vector<Located> all;
    if (want_records) {
        for (const auto& v : views) {
            if (!v.alive) continue;
            for (const auto& r : statseg::live_records(v)) {
                if (!record_plausible(r)) continue;
                by_fd.emplace(std::pair{v.header->pid, r.fd}, r);
                all.push_back({v.header->pid, r});
            }
        }
    }
    // The descriptors to show, then the kernel's view of all of them at once.
    std::vector<Sock> socks;
    std::map<pid_t, std::set<uint64_t>> wanted;
    for_each_live_socket(views, [&](const statseg::View& v, pid_t pid, int fd, const SockInfo& s) {
        bool is_listener = s.role == SockRole::Listener;
        if (!opt.all && opt.listening != is_listener) return;
        if (opt.smcd && s.mode != SockMode::SmcD) return; // as smcss -D
        uint64_t inode = socket_inode(pid, fd);
        if (inode) wanted[pid].insert(inode);
        socks.push_back({&v, static_cast<uint32_t>(fd), s, inode});
    });
    auto table = tcp_sockets(wanted);

    Json sockets = Json::array();
    std::vector<std::vector<std::string>> rows;
    for (const auto& k : socks) {
        pid_t pid = k.view->header->pid;
        const SockInfo& s = k.info;
        auto it = k.inode ? table.find(k.inode) : table.end();
        TcpEntry e =
            it != table.end() ? it->second : TcpEntry{"-", "-", k.inode ? "UNCONN" : "gone"};
        Observed o;
        if (want_records && s.mode == SockMode::SmcD)
            o = observe(pid, static_cast<int>(k.fd), by_fd, all);
        // A server's TCP end shows the reason its client end chose, where
        // that end is a process of ours (LEARNED, EPOLLEARLY, POLICY, not
        // the server's PEERNOSMC).
        uint32_t client_reason = client_reasons.for_server(s, e);
        if (opt.json) {
            Json j{{"pid", pid},
                   {"program", program_of(k.view->header)},
                   {"fd", k.fd},
                   {"state", e.state},
                   {"local", e.local},
                   {"peer", e.peer},
                   {"role", role_name(s.role)},
                   {"mode", mode_name(s.mode)},
                   {"fallback",
                    s.reason ? Json{{"name", fallback::name_of(s.reason)}, {"code", s.reason}}
                             : Json()},
                   {"limit_hs", s.has(kFlagLimitHs)},
                   {"client_fallback", reason_json(client_reason)}};
            if (opt.details) j["details"] = details_json(o);
            if (opt.smcd) j["smcd"] = smcd_json(o);
            sockets.push_back(std::move(j));
            continue;
        }
        std::string reason = with_client_reason(
            s.reason ? fmt::format("{} 0x{:08x}", fallback::name_of(s.reason), s.reason) : "-",
            client_reason);
        std::vector<std::string> row{std::to_string(pid),
                                     program_of(k.view->header),
                                     std::to_string(k.fd),
                                     e.state,
                                     e.local,
                                     e.peer,
                                     role_name(s.role),
                                     mode_name(s.mode),
                                     reason + (s.has(kFlagLimitHs) ? " limit_hs" : "")};
        if (want_records) {
            bool shown = s.mode == SockMode::SmcD && o.mine;
            const auto& d = o.detail;
            if (opt.details) {
                if (shown)
                    for (std::string v :
                         {shutdown_text(d), hex64(o.mine->rec.token),
                          fmt::format("{:08x}", d.rcvbuf), fmt::format("{:08x}", d.peerbuf),
                          cursor_text(d.rx_prod), cursor_text(d.rx_cons),
                          flags_text(d.rx_pflags, d.rx_flags), cursor_text(d.tx_prod),
                          cursor_text(d.tx_cons), flags_text(d.tx_pflags, d.tx_flags)})
                        row.push_back(v);
                else
                    row.resize(row.size() + 10);
            }
            if (opt.smcd) {
                if (shown)
                    for (uint64_t v : {o.mine->rec.gid, o.mine->rec.token, o.mine->rec.peer_gid,
                                       o.mine->rec.peer_token})
                        row.push_back(hex64(v));
                else
                    row.resize(row.size() + 4);
            }
            if (s.mode == SockMode::SmcD && !o.mine) {
                // (Said where the details would be.)
                row.resize(9);
                row.push_back("(no record: see usmc ss --help)");
            }
        }
        rows.push_back(std::move(row));
    }
    statseg::close_all(views);
    if (opt.json) {
        fmt::print("{}\n", dump(Json{{"schema", kJsonSchema}, {"sockets", std::move(sockets)}}));
        return 0;
    }
    std::vector<Column> cols{{"PID", 8},
                             {"Program", 16, false, true},
                             {"Fd", 5, true},
                             {"State", 12},
                             {"Local Address", 24},
                             {"Peer Address", 24},
                             {"Role", 7},
                             {"Mode", 5},
                             {"Fallback", want_records ? 24u : 0u}};
    if (opt.details)
        for (Column c : std::initializer_list<Column>{{"Shutd", 5},
                                                      {"Token", 16},
                                                      {"Rcvbuf", 8, true},
                                                      {"Peerbuf", 8, true},
                                                      {"rxprod-Cursor", 13},
                                                      {"rxcons-Cursor", 13},
                                                      {"rxFlags", 7},
                                                      {"txprod-Cursor", 13},
                                                      {"txcons-Cursor", 13},
                                                      {"txFlags", 7}})
            cols.push_back(c);
    if (opt.smcd)
        for (const char* t : {"GID", "Token", "Peer-GID", "Peer-Token"})
            cols.push_back({t, 16});
    for (const auto& l : table_lines(cols, rows, opt.wide))
        fmt::print("{}\n", l);
    return 0;
}

} // namespace usmc::tools
