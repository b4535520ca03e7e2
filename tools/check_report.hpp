// SPDX-License-Identifier: MIT
#pragma once
// The lines of a `usmc check` run and their verdict, as text or JSON.
#include <cstdint>
#include <string>
#include <vector>

namespace usmc::tools::check {

enum class Status { Ok, Fail, Info };

struct Item {
    std::string name;    // what was checked ("configuration")
    Status status;       // Info: worth knowing, decides nothing
    std::string detail;  // what was found
    std::string remedy;  // what to do (Fail)
    uint32_t reason = 0; // the fallback reason it leads to (0: none)
};

class Report {
  public:
    void ok(std::string name, std::string detail);
    void info(std::string name, std::string detail);
    // `remedy` empty: the reason's (reasons.hpp).
    void fail(std::string name, std::string detail, uint32_t reason, std::string remedy = {});
    bool failed() const;
    // The first failed item's reason (0: none).
    uint32_t first_reason() const;
    // "name: detail" of the first failed item ("" if none).
    std::string first_failure() const;
    const std::vector<Item>& items() const { return items_; }

    // Prints the lines and `verdict`; returns the exit status (0: works).
    int finish(bool works, const std::string& verdict, bool json) const;

  private:
    std::vector<Item> items_;
};

} // namespace usmc::tools::check
