// SPDX-License-Identifier: MIT
#pragma once
// The processes `usmc check` starts: each with pipes on its standard
// streams, read with a deadline, and always stopped by its PID and reaped
// (stop()), whatever it does.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <utility>
#include <vector>

namespace usmc::tools::check {

using Clock = std::chrono::steady_clock;

class Child {
  public:
    // Starts `argv` with the environment of this process, `set` applied
    // over it (an empty value removes the variable). Not started (pid() < 0)
    // if fork or the pipes fail; an exec that fails exits 127.
    static Child start(const std::vector<std::string>& argv,
                       const std::vector<std::pair<std::string, std::string>>& set);
    Child() = default;
    Child(Child&& o) noexcept;
    Child& operator=(Child&& o) noexcept;
    Child(const Child&) = delete;
    ~Child(); // stop()

    pid_t pid() const { return pid_; }
    // The next line of its standard output (without the newline), or
    // nullopt at the deadline or at its end. Its standard error is kept
    // meanwhile (errors()).
    std::optional<std::string> line(Clock::time_point deadline);
    // The next line that starts with `prefix`, skipping others.
    std::optional<std::string> line_with(std::string_view prefix, Clock::time_point deadline);
    // Writes a line to its standard input (false if it is gone).
    bool tell(std::string_view text);
    // Closes its standard input, waits until `grace` for it to exit, then
    // kills it (SIGKILL, by PID) and reaps it. Returns its wait status, or
    // -1 if it was not started. Idempotent.
    int stop(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));
    // What it wrote to standard error so far (the last 4 KiB).
    const std::string& errors();

  private:
    void drain(int timeout_ms);
    pid_t pid_ = -1;
    int in_ = -1, out_ = -1, err_ = -1;
    std::string out_buf_, err_buf_;
    bool out_eof_ = false;
    int status_ = -1;
};

} // namespace usmc::tools::check
