// SPDX-License-Identifier: MIT
// The exec family. A program that execs keeps its listening sockets (the
// new program inherits them) but not usmc's state: the endpoint that hands
// out the listener's announcement memory closes, and the new program may not
// speak CLC at all. So the listeners this process published are withdrawn
// from the registry before the exec (af_smc::before_exec), and marked live
// again if the exec fails. A vfork child shares our memory and its exec
// ends only the child: it passes straight through.
//
// The list forms (execl, execlp, execle) are built here on the stack and go
// to the vector forms of libc, as glibc's own do.
#include "engine/sock/engine.hpp"
#include "preload/shim.hpp"

#include <cerrno>
#include <cstdarg>
#include <unistd.h>

using namespace usmc;

namespace {

// Withdraws on construction, restores when the exec came back (failed).
struct ExecWindow {
    bool active = !shim::vfork_child();
    ExecWindow() {
        if (active) af_smc::before_exec();
    }
    ~ExecWindow() {
        if (active) {
            shim::ErrnoGuard keep;
            af_smc::exec_failed();
        }
    }
};

// Argument lists longer than this fail with E2BIG rather than exhaust the
// stack (the kernel's own limit on one argument list is far higher, but a
// list passed as C varargs that long is not a real program's).
constexpr size_t kMaxListArgs = 4096;

// Counts the arguments after `first` up to the terminating null.
size_t count_args(va_list ap) {
    va_list copy;
    va_copy(copy, ap);
    size_t n = 1;
    while (va_arg(copy, const char*) && n < kMaxListArgs)
        ++n;
    va_end(copy);
    return n;
}

} // namespace

USMC_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) noexcept {
    ExecWindow w;
    return sys::real().execve(path, argv, envp);
}

USMC_EXPORT int execv(const char* path, char* const argv[]) noexcept {
    ExecWindow w;
    return sys::real().execv(path, argv);
}

USMC_EXPORT int execvp(const char* file, char* const argv[]) noexcept {
    ExecWindow w;
    return sys::real().execvp(file, argv);
}

USMC_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) noexcept {
    ExecWindow w;
    return sys::real().execvpe(file, argv, envp);
}

USMC_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) noexcept {
    ExecWindow w;
    return sys::real().fexecve(fd, argv, envp);
}

USMC_EXPORT int execveat(int dirfd, const char* path, char* const argv[], char* const envp[],
                         int flags) noexcept {
    auto fn = sys::real().execveat;
    if (!fn) return shim::fail(ENOSYS);
    ExecWindow w;
    return fn(dirfd, path, argv, envp, flags);
}

// The list forms: `arg` is argv[0], the list ends with a null pointer
// (execle: followed by envp).
#define USMC_EXEC_LIST(argv_name, first, ap)                                                       \
    size_t n_ = count_args(ap); /* as glibc: `first` is not null */                                \
    if (n_ >= kMaxListArgs) return shim::fail(E2BIG);                                              \
    char** argv_name = static_cast<char**>(__builtin_alloca((n_ + 1) * sizeof(char*)));            \
    argv_name[0] = const_cast<char*>(first);                                                       \
    for (size_t i_ = 1; i_ <= n_; ++i_)                                                            \
        argv_name[i_] = va_arg(ap, char*);

USMC_EXPORT int execl(const char* path, const char* arg, ...) noexcept {
    va_list ap;
    va_start(ap, arg);
    USMC_EXEC_LIST(argv, arg, ap)
    va_end(ap);
    return execv(path, argv);
}

USMC_EXPORT int execlp(const char* file, const char* arg, ...) noexcept {
    va_list ap;
    va_start(ap, arg);
    USMC_EXEC_LIST(argv, arg, ap)
    va_end(ap);
    return execvp(file, argv);
}

USMC_EXPORT int execle(const char* path, const char* arg, ...) noexcept {
    va_list ap;
    va_start(ap, arg);
    USMC_EXEC_LIST(argv, arg, ap)
    char* const* envp = va_arg(ap, char* const*);
    va_end(ap);
    return execve(path, argv, envp);
}
