// SPDX-License-Identifier: MIT
#include "config/knob.hpp"

#include "config/config.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

namespace usmc::config {

namespace {

// A top-level `limit_smc_hs = ...` line: before any [table] header.
bool is_knob_line(const std::string& line) {
    size_t i = line.find_first_not_of(" \t");
    if (i == std::string::npos || line.compare(i, 12, "limit_smc_hs") != 0) return false;
    size_t j = line.find_first_not_of(" \t", i + 12);
    return j != std::string::npos && line[j] == '=';
}

bool is_table_header(const std::string& line) {
    size_t i = line.find_first_not_of(" \t");
    return i != std::string::npos && line[i] == '[';
}

} // namespace

std::optional<std::string> with_limit_smc_hs(const std::string& text, bool on,
                                             const std::string& source, std::string* error) {
    auto before = parse_config(text, source);
    if (auto* e = std::get_if<LoadError>(&before)) {
        *error = e->message;
        return std::nullopt;
    }
    std::string value = std::string("limit_smc_hs = ") + (on ? "true" : "false") + "\n";
    std::istringstream in(text);
    std::string line, out;
    bool replaced = false, in_table = false;
    while (std::getline(in, line)) {
        if (is_table_header(line)) in_table = true;
        if (!in_table && !replaced && is_knob_line(line)) {
            out += value;
            replaced = true;
        } else {
            out += line + "\n";
        }
    }
    if (!replaced) out = value + out;
    auto check = parse_config(out, source);
    if (auto* e = std::get_if<LoadError>(&check)) {
        *error = e->message;
        return std::nullopt;
    }
    if (std::get<Config>(check).limit_smc_hs != on) {
        *error = source + ": limit_smc_hs could not be set";
        return std::nullopt;
    }
    return out;
}

std::string write_limit_smc_hs(const std::string& path, bool on) {
    std::string text;
    struct stat st {};
    bool exists = stat(path.c_str(), &st) == 0;
    if (exists) {
        std::ifstream f(path);
        if (!f) return path + ": " + std::strerror(errno);
        std::ostringstream ss;
        ss << f.rdbuf();
        text = ss.str();
    }
    std::string error;
    auto updated = with_limit_smc_hs(text, on, path, &error);
    if (!updated) return error;
    std::string dir = path.substr(0, path.find_last_of('/') + 1);
    if (!dir.empty()) mkdir(dir.c_str(), 0755); // /etc/usmc on first use
    std::string tmp = path + ".tmp." + std::to_string(getpid());
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, exists ? st.st_mode & 07777 : 0644);
    if (fd < 0) return tmp + ": " + std::strerror(errno);
    const char* p = updated->data();
    size_t left = updated->size();
    while (left > 0) {
        ssize_t n = write(fd, p, left);
        if (n < 0) {
            if (errno == EINTR) continue;
            std::string e = tmp + ": " + std::strerror(errno);
            close(fd);
            unlink(tmp.c_str());
            return e;
        }
        p += n;
        left -= size_t(n);
    }
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
        std::string e = path + ": " + std::strerror(errno);
        unlink(tmp.c_str());
        return e;
    }
    return "";
}

} // namespace usmc::config
