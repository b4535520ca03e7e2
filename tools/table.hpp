// SPDX-License-Identifier: MIT
#pragma once
// The text tables of the usmc CLI: fixed widths as smcss prints them, or
// (-W) each column as wide as its widest cell.
#include <string>
#include <vector>

namespace usmc::tools {

// Columns of a table: each as wide as `width` (wide: as its widest cell,
// the header's included), left-aligned unless `right`; cells longer than
// the width are cut where `cut` says so (else they push the rest along).
struct Column {
    std::string title;
    size_t width;
    bool right = false;
    bool cut = false;
};
// A cell as a terminal may be given it: control bytes as '?' (a program
// name must not move the cursor or change colours) and bytes that are not
// UTF-8 as U+FFFD. (Overlong and surrogate forms pass: they only misprint.)
std::string printable(const std::string& s);
// The lines of a table, each without trailing blanks, cells printable().
std::vector<std::string> table_lines(std::vector<Column> cols,
                                     const std::vector<std::vector<std::string>>& rows, bool wide);

} // namespace usmc::tools
