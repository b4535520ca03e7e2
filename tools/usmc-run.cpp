// usmc-run: start a program with the usmc shim preloaded, in the spirit of
// smc-tools' smc_run. The options reach the shim through the environment.
#include "config/config.hpp"
#include "tools/elfcheck.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <variant>

namespace {

constexpr const char* kPreloadName = "libusmc-preload.so";

// The shim sits in ../lib beside this binary's bin/ (build tree and install
// prefix alike); USMC_PRELOAD_LIB overrides.
std::string find_preload_library() {
    if (const char* env = std::getenv("USMC_PRELOAD_LIB"); env && *env) return env;
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return {};
    exe[n] = 0;
    std::string dir(exe);
    dir.erase(dir.rfind('/'));
    for (const std::string& candidate :
         {dir + "/../lib/" + kPreloadName, dir + "/" + kPreloadName}) {
        char resolved[PATH_MAX];
        if (realpath(candidate.c_str(), resolved)) return resolved;
    }
    return {};
}

// Appends the shim to LD_PRELOAD, keeping what is there (space or colon
// separated, as ld.so accepts), and not adding it twice.
std::string merged_preload(const char* existing, const std::string& lib) {
    std::string current = existing ? existing : "";
    if (current.find(lib) != std::string::npos) return current;
    return current.empty() ? lib : current + ":" + lib;
}

} // namespace

int main(int argc, char** argv) {
    CLI::App app{"usage: usmc-run [OPTIONS] [--] PROGRAM [ARGS...]\n\n"
                 "Run PROGRAM with usmc: TCP connections use SMC-D (same host) or SMC-R (RDMA)\n"
                 "when both ends support it, plain TCP otherwise.",
                 "usmc-run"};
    std::string config_file;
    bool smcd = false, smcr = false, tcp = false, limit_hs = false, no_limit_hs = false,
         verbose = false;
    std::vector<std::string> command;
    app.add_option("-c,--config", config_file,
                   "usmc.toml to use (default: $USMC_CONFIG, /etc/usmc/usmc.toml)");
    app.add_flag("-d,--smcd", smcd, "allow SMC-D (shared memory, same host)");
    app.add_flag("-r,--smcr", smcr, "allow SMC-R (RDMA)");
    app.add_flag("-t,--tcp", tcp, "plain TCP only: intercept, count, change nothing");
    app.add_flag("--limit-hs", limit_hs,
                 "SMC_LIMIT_HS on for new sockets (overrides limit_smc_hs)");
    app.add_flag("--no-limit-hs", no_limit_hs, "SMC_LIMIT_HS off for new sockets");
    app.add_flag("-v,--verbose", verbose, "say what usmc does on stderr");
    // Everything from the first non-option on is the command and its own
    // arguments: usmc-run never interprets them.
    app.prefix_command();
    app.footer("Without -d/-r/-t the configuration decides (mode and [[policy]] rules);\n"
               "-d/-r/-t narrow what it allows, they never widen a rule that says tcp.");
    try {
        app.parse(argc, argv);
        if (tcp && (smcd || smcr))
            throw CLI::ValidationError("-t/--tcp", "cannot be combined with -d or -r");
        if (limit_hs && no_limit_hs)
            throw CLI::ValidationError("--limit-hs", "cannot be combined with --no-limit-hs");
        command = app.remaining();
        if (!command.empty() && command.front() == "--")
            command.erase(command.begin());
        else if (!command.empty() && command.front().size() > 1 && command.front()[0] == '-')
            throw CLI::ExtrasError({command.front()});
        if (command.empty()) throw CLI::RequiredError("PROGRAM");
    } catch (const CLI::ParseError& e) {
        int rc = app.exit(e);
        return rc == 0 ? 0 : 1; // smc_run: exit code 1 on an invalid option
    }

    if (!config_file.empty()) {
        char resolved[PATH_MAX];
        if (!realpath(config_file.c_str(), resolved)) {
            fmt::print(stderr, "usmc-run: {}: {}\n", config_file, std::strerror(errno));
            return 1;
        }
        setenv("USMC_CONFIG", resolved, 1);
    }
    // Check the configuration now, where the error is easy to see; the program
    // still runs (every socket as plain TCP), as it would under a shim that
    // finds the same error.
    auto loaded = usmc::config::load_default_config();
    if (auto* err = std::get_if<usmc::config::LoadError>(&loaded))
        fmt::print(stderr, "usmc-run: config error: {}; every socket will run as plain TCP\n",
                   err->message);

    const std::string& program = command.front();
    std::string path = usmc::tools::find_program(program, std::getenv("PATH"));
    if (path.empty()) {
        fmt::print(stderr, "usmc-run: {}: command not found\n", program);
        return 127;
    }
    auto info = usmc::tools::inspect_executable(path);
    if (info.kind == usmc::tools::ExecKind::StaticElf)
        fmt::print(stderr,
                   "usmc-run: warning: {} is statically linked; usmc cannot take effect there "
                   "(it runs as plain TCP)\n",
                   path);
    else if (info.go)
        fmt::print(stderr,
                   "usmc-run: warning: {} is a Go program; Go makes socket calls without libc, "
                   "so usmc cannot take effect there (it runs as plain TCP)\n",
                   path);
    if (info.setid)
        fmt::print(stderr,
                   "usmc-run: warning: {} is set-user/group-ID; the loader ignores LD_PRELOAD "
                   "for it, so usmc cannot take effect there (it runs as plain TCP)\n",
                   path);

    std::string lib = find_preload_library();
    if (lib.empty()) {
        fmt::print(stderr, "usmc-run: cannot find {} (looked beside {}; set USMC_PRELOAD_LIB)\n",
                   kPreloadName, argv[0]);
        return 1;
    }
    setenv("LD_PRELOAD", merged_preload(std::getenv("LD_PRELOAD"), lib).c_str(), 1);
    if (tcp)
        setenv("USMC_MODES", "tcp", 1);
    else if (smcd && smcr)
        setenv("USMC_MODES", "auto", 1);
    else if (smcd)
        setenv("USMC_MODES", "smcd", 1);
    else if (smcr)
        setenv("USMC_MODES", "smcr", 1);
    if (limit_hs) setenv("USMC_LIMIT_HS", "1", 1);
    if (no_limit_hs) setenv("USMC_LIMIT_HS", "0", 1);
    if (verbose) {
        setenv("USMC_VERBOSE", "1", 1);
        fmt::print(stderr, "usmc-run: {} with {} (modes {}, limit_hs {})\n", path, lib,
                   std::getenv("USMC_MODES") ? std::getenv("USMC_MODES") : "from config",
                   std::getenv("USMC_LIMIT_HS") ? std::getenv("USMC_LIMIT_HS") : "from config");
    }

    std::vector<char*> args;
    for (auto& a : command)
        args.push_back(a.data());
    args.push_back(nullptr);
    execv(path.c_str(), args.data());
    int err = errno;
    fmt::print(stderr, "usmc-run: {}: {}\n", path, std::strerror(err));
    return err == ENOENT ? 127 : 126;
}
