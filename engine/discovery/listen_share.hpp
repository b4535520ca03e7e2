// SPDX-License-Identifier: MIT
#pragma once
// Which processes hold one SMC listener, and which of them may accept().
//
// Connections usmc takes from the kernel listener wait in this process's
// queue: only this process can accept them. The kernel's SMC listen socket
// has one queue for all its holders; ours are one per process. A pre-fork
// child that takes a connection for its queue and then exits (its quota of
// connections served, as Apache's MaxConnectionsPerChild or gunicorn's
// max_requests do) takes it to its grave, and a sibling blocked in accept()
// waits for it forever. So while another process may accept from the same
// listener, this one takes a connection from the kernel only for an
// accept() call in progress: no listen watcher, and no second connection
// while one is in its handshake.
//
// The holders are slots in a page shared by fork and by nothing else
// (MAP_SHARED | MAP_ANONYMOUS, made at listen()): an exec'd program and
// other users never see it. A forking parent reserves its child's slot
// before the fork, so no child is ever invisible to its siblings; a parent
// that forked and never accepted (nginx's master) does not count. Dead
// holders (kill(pid, 0) says so) are cleared. Whatever is not known for
// sure (a full page, a reservation a failed fork left) counts as a holder
// that may accept: that costs only the watcher's help, never a connection.
#include <atomic>
#include <cstdint>

namespace usmc {

class ListenShare {
  public:
    ListenShare();
    ~ListenShare();
    ListenShare(const ListenShare&) = delete;
    ListenShare& operator=(const ListenShare&) = delete;

    // This process calls accept() on the listener.
    void accepting() {
        if (mine_ >= 0 && state_of(mine_) != kAcceptor) set_acceptor();
    }
    // Another live process may accept from it (or that cannot be ruled out).
    bool others_may_accept();

    // Around fork (the parent's prepare handler, the child's handler).
    // `gen` names the fork (af_smc's count); fork_failed(gen) undoes what
    // before_fork(gen) did, unless another fork has begun since (then the
    // reservation stays: a holder that may accept, which costs only the
    // watcher's help).
    void before_fork(uint64_t gen);
    void fork_failed(uint64_t gen);
    void after_fork_child();
    // This process's copy is closed.
    void leave();
    // Slots reserved for children not running yet (for tests).
    int reserved_count() const;

    static constexpr int kSlots = 64;

  private:
    enum State : uint32_t {
        kFree = 0,
        kBorn = 1,        // reserved for a child not yet running
        kMayAccept = 2,   // has not accepted yet, may
        kDistributor = 3, // forked while holding it, never accepted
        kAcceptor = 4,
    };
    struct Slot {
        std::atomic<int32_t> pid;
        std::atomic<uint32_t> state;
    };
    struct Page {
        std::atomic<uint32_t> unknown; // a holder without a slot exists
        Slot slots[kSlots];
    };
    uint32_t state_of(int i) const { return page_->slots[i].state.load(std::memory_order_acquire); }
    void set_acceptor();
    int reserve();
    bool clear_if_dead(Slot& s, int32_t pid); // true: it was dead

    Page* page_ = nullptr;
    int mine_ = -1;          // -1: no slot (then every look answers "others may")
    int child_ = -1;         // reserved by before_fork() for the child
    uint64_t child_gen_ = 0; // the fork it was reserved for
    bool demoted_ = false;   // that fork made us a distributor
};

} // namespace usmc
