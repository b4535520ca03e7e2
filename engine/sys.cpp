#include "engine/sys.hpp"

#include <dlfcn.h>
#include <sched.h>

namespace usmc::sys {

Table g_table{};
std::atomic<int> g_state{0};

void resolve() {
    int expected = 0;
    if (g_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
#define USMC_SYS_RESOLVE(name, ret, params)                                                        \
    g_table.name = reinterpret_cast<ret(*) params>(dlsym(RTLD_NEXT, #name));
        USMC_SYS_FUNCTIONS(USMC_SYS_RESOLVE)
#undef USMC_SYS_RESOLVE
        g_state.store(2, std::memory_order_release);
        return;
    }
    // Another thread is resolving: dlsym is quick, wait for it.
    while (g_state.load(std::memory_order_acquire) != 2)
        sched_yield();
}

} // namespace usmc::sys
