// SPDX-License-Identifier: MIT
// vfork(): the child borrows our memory, our stack and the calling thread's
// TLS until it execs or exits (shim.hpp: VforkMark). A C wrapper cannot
// call the real vfork: the child would return through the wrapper's frame
// and the parent, resuming in that frame, would find it overwritten. So the
// exported vfork is a few instructions that call usmc_vfork_prepare (which
// marks the TLS and returns the real vfork) and then jump to it with the
// caller's own frame, exactly as if the caller had called it.
//
// posix_spawn, system and popen need nothing: glibc's spawn child calls
// only its internal functions, never the interposed ones.
#include "preload/shim.hpp"

#include <sys/syscall.h>
#include <unistd.h>

namespace usmc::shim {

thread_local VforkMark t_vfork __attribute__((tls_model("initial-exec"))) = {false, 0};

bool vfork_child_slow() {
    pid_t now = static_cast<pid_t>(sys::real().syscall(SYS_getpid));
    if (now != t_vfork.parent) return true;
    t_vfork.active = false; // the parent, back from vfork
    return false;
}

} // namespace usmc::shim

extern "C" __attribute__((visibility("hidden"), used)) void* usmc_vfork_prepare() {
    using namespace usmc;
    shim::t_vfork.parent = static_cast<pid_t>(sys::real().syscall(SYS_getpid));
    shim::t_vfork.active = true;
    auto real = sys::real().vfork;
    // Without a real vfork (never on glibc), fork is what POSIX allows.
    return reinterpret_cast<void*>(real ? real : sys::real().fork);
}

#if defined(__x86_64__)
asm(R"(
    .text
    .globl vfork
    .type vfork, @function
vfork:
    endbr64
    sub $8, %rsp
    call usmc_vfork_prepare
    add $8, %rsp
    jmp *%rax
    .size vfork, .-vfork
)");
#elif defined(__aarch64__)
asm(R"(
    .text
    .globl vfork
    .type vfork, %function
vfork:
    hint #34
    stp x29, x30, [sp, #-16]!
    mov x29, sp
    bl usmc_vfork_prepare
    ldp x29, x30, [sp], #16
    br x0
    .size vfork, .-vfork
)");
#else
// Elsewhere vfork is not interposed: a vfork child's interposed calls
// would reach the parent's state (README: limits).
#endif
