// SPDX-License-Identifier: MIT
#pragma once
// The rdma-core calls SMC-R's verbs backend makes, as one table of function
// pointers: filled by dlopen of libibverbs only when SMC-R is enabled and a
// device is wanted (so no other wrapped program maps rdma-core), or by a
// test with its own functions (the mock, test/unit/smcr_verbs_test.cpp).
// Data-path verbs (ibv_post_send, ibv_post_recv, ibv_poll_cq,
// ibv_req_notify_cq) are not here: rdma-core inlines them through the
// provider's ops in the context, which a test builds itself.
#include <infiniband/verbs.h>

namespace usmc::smcr::verbs {

struct Table {
    ibv_device** (*get_device_list)(int* num) = nullptr;
    void (*free_device_list)(ibv_device** list) = nullptr;
    const char* (*get_device_name)(ibv_device* dev) = nullptr;
    ibv_context* (*open_device)(ibv_device* dev) = nullptr;
    int (*close_device)(ibv_context* ctx) = nullptr;
    // The exported (compat) symbol; callers go through query_port() below.
    int (*query_port)(ibv_context* ctx, uint8_t port, _compat_ibv_port_attr* attr) = nullptr;
    int (*query_gid)(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) = nullptr;
    ibv_pd* (*alloc_pd)(ibv_context* ctx) = nullptr;
    int (*dealloc_pd)(ibv_pd* pd) = nullptr;
    ibv_comp_channel* (*create_comp_channel)(ibv_context* ctx) = nullptr;
    int (*destroy_comp_channel)(ibv_comp_channel* ch) = nullptr;
    ibv_cq* (*create_cq)(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch,
                         int comp_vector) = nullptr;
    int (*destroy_cq)(ibv_cq* cq) = nullptr;
    int (*get_cq_event)(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context) = nullptr;
    void (*ack_cq_events)(ibv_cq* cq, unsigned int n) = nullptr;
    ibv_qp* (*create_qp)(ibv_pd* pd, ibv_qp_init_attr* attr) = nullptr;
    int (*modify_qp)(ibv_qp* qp, ibv_qp_attr* attr, int mask) = nullptr;
    int (*destroy_qp)(ibv_qp* qp) = nullptr;
    ibv_mr* (*reg_mr)(ibv_pd* pd, void* addr, size_t length, int access) = nullptr;
    int (*dereg_mr)(ibv_mr* mr) = nullptr;

    bool complete() const;
};

// libibverbs.so.1 opened once (RTLD_LOCAL) and every symbol above found;
// nullptr, with `why` set, if the library or a symbol is missing. Safe to
// call from several threads; the table lives for the process.
const Table* load(const char** why);

} // namespace usmc::smcr::verbs
