// SPDX-License-Identifier: MIT
#include "tools/check_report.hpp"

#include "engine/base/fallback.hpp"
#include "tools/reasons.hpp"
#include "tools/stats_view.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace usmc::tools::check {

void Report::ok(std::string name, std::string detail) {
    items_.push_back({std::move(name), Status::Ok, std::move(detail), {}, 0});
}

void Report::info(std::string name, std::string detail) {
    items_.push_back({std::move(name), Status::Info, std::move(detail), {}, 0});
}

void Report::fail(std::string name, std::string detail, uint32_t reason, std::string remedy) {
    if (remedy.empty() && reason)
        if (auto a = reasons::advice_for(reason)) remedy = reasons::plain(a->remedy);
    // One form for the table's sentences and the checks' own advice.
    if (!remedy.empty()) {
        if (remedy[0] >= 'a' && remedy[0] <= 'z') remedy[0] = char(remedy[0] - 'a' + 'A');
        if (remedy.back() != '.') remedy += '.';
    }
    items_.push_back({std::move(name), Status::Fail, std::move(detail), std::move(remedy), reason});
}

bool Report::failed() const {
    for (const auto& i : items_)
        if (i.status == Status::Fail) return true;
    return false;
}

std::string Report::first_failure() const {
    for (const auto& i : items_)
        if (i.status == Status::Fail) return i.name + ": " + i.detail;
    return {};
}

uint32_t Report::first_reason() const {
    for (const auto& i : items_)
        if (i.status == Status::Fail && i.reason) return i.reason;
    return 0;
}

namespace {
const char* status_name(Status s) {
    switch (s) {
    case Status::Ok:
        return "ok";
    case Status::Fail:
        return "FAIL";
    case Status::Info:
        return "info";
    }
    return "?";
}
} // namespace

int Report::finish(bool works, const std::string& verdict, bool json) const {
    if (json) {
        Json out{{"schema", kJsonSchema}};
        auto checks = nlohmann::ordered_json::array();
        for (const auto& i : items_) {
            nlohmann::ordered_json c;
            c["name"] = i.name;
            c["status"] = i.status == Status::Fail ? "fail" : status_name(i.status);
            c["detail"] = i.detail;
            if (i.remedy.empty())
                c["remedy"] = nullptr;
            else
                c["remedy"] = i.remedy;
            if (i.reason)
                c["reason"] = {{"name", fallback::name_of(i.reason)}, {"code", i.reason}};
            else
                c["reason"] = nullptr;
            checks.push_back(std::move(c));
        }
        out["checks"] = std::move(checks);
        out["smcd_works"] = works;
        out["verdict"] = verdict;
        fmt::print("{}\n", dump(out));
        return works ? 0 : 1;
    }
    std::vector<std::string> said;
    for (const auto& i : items_) {
        std::string why =
            i.reason ? fmt::format(" [{} 0x{:08x}]", fallback::name_of(i.reason), i.reason) : "";
        fmt::print("{:<5} {}: {}{}\n", status_name(i.status), i.name, i.detail, why);
        if (i.remedy.empty()) continue;
        bool again = std::find(said.begin(), said.end(), i.remedy) != said.end();
        fmt::print("      what to do: {}\n", again ? "as above." : i.remedy);
        said.push_back(i.remedy);
    }
    fmt::print("verdict: {}\n", verdict);
    return works ? 0 : 1;
}

} // namespace usmc::tools::check
