// SPDX-License-Identifier: MIT
#include "tools/check_spawn.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace usmc::tools::check {

namespace {

void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

int ms_until(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return left.count() > 0 ? static_cast<int>(left.count()) : 0;
}

constexpr size_t kErrKeep = 4096;

} // namespace

Child Child::start(const std::vector<std::string>& argv,
                   const std::vector<std::pair<std::string, std::string>>& set) {
    Child c;
    if (argv.empty()) return c;
    // Everything the child needs is built before fork.
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
        std::string_view kv(*e);
        std::string_view key = kv.substr(0, kv.find('='));
        bool replaced =
            std::any_of(set.begin(), set.end(), [&](const auto& s) { return s.first == key; });
        if (!replaced) env.emplace_back(kv);
    }
    for (const auto& [k, v] : set)
        if (!v.empty()) env.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& e : env)
        envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_copy = argv;
    for (auto& a : argv_copy)
        args.push_back(a.data());
    args.push_back(nullptr);

    int in[2], out[2], err[2];
    if (pipe2(in, O_CLOEXEC) != 0) return c;
    if (pipe2(out, O_CLOEXEC) != 0) {
        ::close(in[0]), ::close(in[1]);
        return c;
    }
    if (pipe2(err, O_CLOEXEC) != 0) {
        ::close(in[0]), ::close(in[1]), ::close(out[0]), ::close(out[1]);
        return c;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(out[1], 1);
        dup2(err[1], 2);
        execve(args[0], args.data(), envp.data());
        _exit(127);
    }
    ::close(in[0]), ::close(out[1]), ::close(err[1]);
    if (pid < 0) {
        ::close(in[1]), ::close(out[0]), ::close(err[0]);
        return c;
    }
    c.pid_ = pid;
    c.in_ = in[1];
    c.out_ = out[0];
    c.err_ = err[0];
    // A child that exits early must not kill us with SIGPIPE when told something.
    signal(SIGPIPE, SIG_IGN);
    return c;
}

Child::Child(Child&& o) noexcept {
    *this = std::move(o);
}

Child& Child::operator=(Child&& o) noexcept {
    if (this != &o) {
        stop(std::chrono::milliseconds(0));
        pid_ = std::exchange(o.pid_, -1);
        in_ = std::exchange(o.in_, -1);
        out_ = std::exchange(o.out_, -1);
        err_ = std::exchange(o.err_, -1);
        out_buf_ = std::move(o.out_buf_);
        err_buf_ = std::move(o.err_buf_);
        out_eof_ = o.out_eof_;
        status_ = o.status_;
    }
    return *this;
}

Child::~Child() {
    stop(std::chrono::milliseconds(0));
}

// Reads what is there on standard output and error, waiting up to
// `timeout_ms` for something.
void Child::drain(int timeout_ms) {
    pollfd p[2] = {{out_eof_ ? -1 : out_, POLLIN, 0}, {err_, POLLIN, 0}};
    if (p[0].fd < 0 && p[1].fd < 0) {
        poll(nullptr, 0, timeout_ms); // nothing left to read: just the wait
        return;
    }
    if (poll(p, 2, timeout_ms) <= 0) return;
    char buf[4096];
    if (p[0].revents) {
        ssize_t n = ::read(out_, buf, sizeof buf);
        if (n > 0)
            out_buf_.append(buf, size_t(n));
        else if (n == 0 || errno != EINTR)
            out_eof_ = true;
    }
    if (p[1].revents) {
        ssize_t n = ::read(err_, buf, sizeof buf);
        if (n > 0) {
            err_buf_.append(buf, size_t(n));
            if (err_buf_.size() > 2 * kErrKeep) err_buf_.erase(0, err_buf_.size() - kErrKeep);
        } else if (n == 0 || errno != EINTR) {
            close_fd(err_);
        }
    }
}

std::optional<std::string> Child::line(Clock::time_point deadline) {
    if (pid_ < 0) return std::nullopt;
    while (true) {
        size_t nl = out_buf_.find('\n');
        if (nl != std::string::npos) {
            std::string l = out_buf_.substr(0, nl);
            out_buf_.erase(0, nl + 1);
            return l;
        }
        if (out_eof_) return std::nullopt;
        int left = ms_until(deadline);
        if (left == 0) return std::nullopt;
        drain(left);
    }
}

std::optional<std::string> Child::line_with(std::string_view prefix, Clock::time_point deadline) {
    while (auto l = line(deadline))
        if (l->starts_with(prefix)) return l;
    return std::nullopt;
}

bool Child::tell(std::string_view text) {
    if (in_ < 0) return false;
    std::string l(text);
    l += '\n';
    return ::write(in_, l.data(), l.size()) == ssize_t(l.size());
}

int Child::stop(std::chrono::milliseconds grace) {
    if (pid_ < 0) return status_;
    close_fd(in_);
    auto deadline = Clock::now() + grace;
    int status = 0;
    pid_t r = 0;
    // Its standard error may still have words on the way out; a bounded wait.
    while ((r = waitpid(pid_, &status, WNOHANG)) == 0 && Clock::now() < deadline)
        drain(std::min(10, std::max(1, ms_until(deadline))));
    if (r == 0) {
        kill(pid_, SIGKILL);
        r = waitpid(pid_, &status, 0);
    }
    drain(0);
    status_ = r == pid_ ? status : -1;
    pid_ = -1;
    close_fd(out_);
    close_fd(err_);
    out_eof_ = true;
    return status_;
}

const std::string& Child::errors() {
    if (pid_ >= 0) drain(0);
    if (err_buf_.size() > kErrKeep) err_buf_.erase(0, err_buf_.size() - kErrKeep);
    return err_buf_;
}

} // namespace usmc::tools::check
