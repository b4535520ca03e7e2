// SPDX-License-Identifier: MIT
// Library load and unload, and the process-splitting calls.
//
// The child's side of fork (re-creating the stats segment under its own pid)
// runs in a pthread_atfork handler registered at runtime init: glibc runs it
// for fork() and for its internal forks (daemon(), and anything else inside
// libc), which an interposed fork() alone would miss.
#include "engine/sock/engine.hpp"
#include "preload/shim.hpp"

#include <cerrno>
#include <unistd.h>

namespace {

// glibc passes (argc, argv, envp) to constructors in .init_array.
__attribute__((constructor)) void usmc_load(int argc, char** argv, char**) {
    usmc::sys::resolve();
    usmc::runtime::early_init(argc, argv);
}

__attribute__((destructor)) void usmc_unload() {
    usmc::runtime::shutdown();
}

} // namespace

// A fork returns here in the parent, in the thread that began it: if it
// failed, glibc ran the prepare handler for a child that does not exist,
// and no handler of its tells the parent so.
USMC_EXPORT pid_t fork(void) {
    pid_t pid = usmc::sys::real().fork();
    if (pid != 0 && !usmc::shim::vfork_child()) {
        int err = errno;
        usmc::runtime::fork_returned(pid < 0);
        errno = err;
    }
    return pid;
}

// A process that ends with _exit (a forked child: Python's os._exit, the end
// of every multiprocessing worker) runs no destructor: its connections are
// counted out here, so the process that still holds them closes them last
// and tells the peer. (Not a vfork child's: it runs on our memory.) Only
// atomics and a wake-up write: safe in a signal handler.
USMC_EXPORT void _exit(int status) noexcept {
    if (!usmc::shim::vfork_child()) usmc::runtime::quick_exit_conns();
    usmc::sys::real()._exit(status);
    __builtin_unreachable();
}

USMC_EXPORT void _Exit(int status) noexcept {
    if (!usmc::shim::vfork_child()) usmc::runtime::quick_exit_conns();
    usmc::sys::real()._Exit(status);
    __builtin_unreachable();
}

USMC_EXPORT int daemon(int nochdir, int noclose) noexcept {
    return usmc::sys::real().daemon(nochdir, noclose);
}
