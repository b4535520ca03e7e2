// Library load and unload, and the process-splitting calls.
//
// The child's side of fork (re-creating the stats segment under its own pid)
// runs in a pthread_atfork handler registered at runtime init: glibc runs it
// for fork() and for its internal forks (daemon(), and anything else inside
// libc), which an interposed fork() alone would miss.
#include "engine/af_smc.hpp"
#include "engine/runtime.hpp"
#include "preload/shim.hpp"

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

USMC_EXPORT pid_t fork(void) {
    return usmc::sys::real().fork();
}

USMC_EXPORT int daemon(int nochdir, int noclose) noexcept {
    return usmc::sys::real().daemon(nochdir, noclose);
}
