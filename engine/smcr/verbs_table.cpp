// SPDX-License-Identifier: MIT
#include "engine/smcr/verbs_table.hpp"

#include <dlfcn.h>
#include <mutex>

namespace usmc::smcr::verbs {

bool Table::complete() const {
    return get_device_list && free_device_list && get_device_name && open_device && close_device &&
           query_port && query_gid && alloc_pd && dealloc_pd && create_comp_channel &&
           destroy_comp_channel && create_cq && destroy_cq && get_cq_event && ack_cq_events &&
           create_qp && modify_qp && destroy_qp && reg_mr && dereg_mr;
}

namespace {

template <class F>
void bind(void* lib, const char* name, F& slot) {
    slot = reinterpret_cast<F>(dlsym(lib, name));
}

Table g_table;
const char* g_why = nullptr;
bool g_ok = false;

void load_once() {
    void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        g_why = "libibverbs.so.1 not found (install rdma-core's libibverbs1)";
        return;
    }
    Table t;
    bind(lib, "ibv_get_device_list", t.get_device_list);
    bind(lib, "ibv_free_device_list", t.free_device_list);
    bind(lib, "ibv_get_device_name", t.get_device_name);
    bind(lib, "ibv_open_device", t.open_device);
    bind(lib, "ibv_close_device", t.close_device);
    bind(lib, "ibv_query_port", t.query_port);
    bind(lib, "ibv_query_gid", t.query_gid);
    bind(lib, "ibv_alloc_pd", t.alloc_pd);
    bind(lib, "ibv_dealloc_pd", t.dealloc_pd);
    bind(lib, "ibv_create_comp_channel", t.create_comp_channel);
    bind(lib, "ibv_destroy_comp_channel", t.destroy_comp_channel);
    bind(lib, "ibv_create_cq", t.create_cq);
    bind(lib, "ibv_destroy_cq", t.destroy_cq);
    bind(lib, "ibv_get_cq_event", t.get_cq_event);
    bind(lib, "ibv_ack_cq_events", t.ack_cq_events);
    bind(lib, "ibv_create_qp", t.create_qp);
    bind(lib, "ibv_modify_qp", t.modify_qp);
    bind(lib, "ibv_destroy_qp", t.destroy_qp);
    bind(lib, "ibv_reg_mr", t.reg_mr);
    bind(lib, "ibv_dereg_mr", t.dereg_mr);
    if (!t.complete()) {
        g_why = "libibverbs.so.1 lacks a verb usmc needs (too old an rdma-core)";
        dlclose(lib);
        return;
    }
    g_table = t;
    g_ok = true;
}

} // namespace

const Table* load(const char** why) {
    static std::once_flag once;
    std::call_once(once, load_once);
    if (why) *why = g_ok ? nullptr : g_why;
    return g_ok ? &g_table : nullptr;
}

} // namespace usmc::smcr::verbs
