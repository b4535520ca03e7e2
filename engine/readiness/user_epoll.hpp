// SPDX-License-Identifier: MIT
#pragma once
// An epoll set kept in user memory (issue 44, docs/DESIGN-NOTES.md "Issue
// 44: readiness in user memory"): the registrations of an application's
// epoll set for descriptors whose readiness usmc knows itself, and the
// events it reports for them, with the kernel's semantics (fs/eventpoll.c)
// as far as one set can observe them. Pure: no I/O, no SMC type. What a
// registration watches is a Source, seen through two calls only.
//
// The kernel's model, which this one follows step for step:
//   - a registration (epitem) is keyed by (file, descriptor number): a dup
//     is a registration of its own; closing one descriptor of a file that
//     lives on through another changes nothing (the registration stays,
//     reporting under its own data), and only the file's end removes it;
//   - a wake-up of a file (a wait-queue callback, with a key: the events it
//     is about, or none) puts each of its registrations whose events meet
//     the key, or all of them for no key, at the tail of the set's ready
//     list unless it is there already, in the file's wait-queue order (the
//     newest non-exclusive registration first, then the EPOLLEXCLUSIVE ones
//     oldest first); a one-shot registration that has reported is disabled
//     (its events cleared) and ignores wake-ups;
//   - EPOLL_CTL_ADD and EPOLL_CTL_MOD poll the file and queue the
//     registration if it is ready now (so MOD re-reports an edge-triggered
//     or one-shot registration that is ready);
//   - epoll_wait takes items from the head of the ready list, polls each
//     (bits & its events; EPOLLERR and EPOLLHUP are always among them) and
//     reports the ready ones until `maxevents`; a reported level-triggered
//     item goes back to the tail (behind the items not reached: round
//     robin), an edge-triggered one leaves the list, a one-shot one is
//     disabled; an item found not ready leaves the list.
//
// Here the wake-ups are not callbacks: a source counts them (Wakes), and
// the set finds them by comparing a registration's counts with the
// source's when it looks at the source: at mark() (the owner learnt that
// the source changed: the peer's bell named it), at every ctl() on it, and
// at every collect() for each *hot* source (below). A registration whose
// counts moved, under a key its events meet, is queued as the kernel's
// callback would have queued it, in the order the looks find them: the
// kernel's order when the owner marks each wake-up before the next one
// (as the test does). Wake-ups that one look finds together are queued as
// if they had come at once (in the hot list's order), as concurrent
// wake-ups can be in the kernel; a one-threaded program that makes wake-
// ups in a known order and reads them with a small maxevents could tell.
//
// Hot and cold. A source with an enabled registration is in one of three
// states: Hot (every collect() looks at it: nothing is armed, the peer
// goes on without a system call), Cold (idle for `cold_after` looks in a
// row: still looked at, and waiting for its owner to take it with
// take_cold()), or Armed (taken: the owner armed it, so its next wake-up
// under a key of interest() rings a bell that makes the owner call mark();
// after arming, the owner calls mark() once itself: the lost-wake-up
// look). A look that finds a wake-up, and every ctl() that enables a
// registration, makes the source Hot again. A source whose registrations
// are all disabled (one-shot, reported) is Off: nothing to look at or arm.
//
// Invariants (user_epoll_test.cpp checks the outcome against the kernel):
//   I1. A registration leaves the ready list only when it is reported edge-
//       triggered or one-shot, when a collect() finds it not ready, or when
//       it goes (DEL, remove_source); its `seen` is then the source's count
//       read *before* its bits (as at ADD and MOD). A reported level-
//       triggered registration stays on the list (at the tail) until a
//       collect() finds it not ready.
//   I2. Every source with an enabled registration is Hot or Cold (looked at
//       by every collect()) or Armed (its next wake-up makes the owner call
//       mark()). So a wake-up after a registration's `seen` is found by the
//       next collect() or by the mark() its bell causes, and the
//       registration is queued then.
//   I3. (The source's part, see Source.) A bit turns on only with a wake-up
//       counted under a key that covers it, published after the bit.
//   Together: a registration the kernel would hold on its ready list is on
//   ours by the time a collect() runs, or its source's wake-up is still on
//   its way to a mark() (as a kernel callback can still be on its way to
//   the list). No ready registration is missed; collect() does work only
//   for the ready list, the hot and cold sources, and what mark() queued:
//   O(ready + hot), not O(registrations).
//
// What the kernel does that a set alone cannot see is the owner's: waking
// threads (EPOLLEXCLUSIVE's one-waiter rule, epoll_wait's timeout and
// signal mask), EBADF for a closed descriptor number (the caller's table),
// a set nested in another or polled, EPOLLWAKEUP's suspend blocking.
//
// Threads: every member function may be called from any thread at any time
// (epoll sets are shared by threads); one mutex per set serialises them.
// The set calls its sources' bits() and wakes() with that mutex held: a
// source must not call back into the set.
#include <sys/epoll.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace usmc::readiness {

// The wake-ups a source has had so far, by the kernel's wake-up key (the
// key decides which registrations a wake-up queues: those whose events
// meet it). Each count only ever grows. For TCP, what SMC emulates:
//   in   data arrived (sk_data_ready: IN|PRI|RDNORM|RDBAND), once per
//        arrival, whether or not earlier data was read
//   out  room came back for a writer that had found none (sk_write_space:
//        OUT|WRNORM|WRBAND): only after a send found the buffer full or a
//        poll found the side unwritable, once, when it is writable again
//   all  no key or one every registration meets: the peer's end (FIN), a
//        reset, an error (sk_state_change, sk_error_report), our own
//        shutdown (even a repeated one) and the end of our own FIN's trip
struct Wakes {
    uint64_t in = 0;
    uint64_t out = 0;
    uint64_t all = 0;
};

// The events of a key, as a registration's events meet them.
inline constexpr uint32_t kInKey = EPOLLIN | EPOLLPRI | EPOLLRDNORM | EPOLLRDBAND;
inline constexpr uint32_t kOutKey = EPOLLOUT | EPOLLWRNORM | EPOLLWRBAND;

// What a registration watches (later: a side of an SMC connection). An
// abstract class, not a template parameter: one set holds registrations of
// different kinds of source (SMC-D, SMC-R), and the set stays one compiled
// type; not function pointers, which would be a hand-written vtable. A look
// costs one indirect call per method, and nothing is allocated per look or
// per report: the set keeps the registrations and lists itself, intrusively.
//
// The contract (I3):
//   - bits() is the kernel's poll: the epoll bits true now (EPOLLIN|
//     EPOLLRDNORM, EPOLLOUT|EPOLLWRNORM, EPOLLRDHUP, EPOLLHUP, EPOLLERR,
//     EPOLLPRI, as TCP's poll sets them). Where it finds a side unwritable
//     it must arrange the `out` wake-up for when room comes back (TCP's
//     SOCK_NOSPACE).
//   - wakes() counts the wake-ups (Wakes). A bit that turns on is published
//     before the wake-up counted for it (release), and wakes() reads the
//     counts with acquire: the set reads wakes() before bits(), so a count
//     it has seen covers the bits it then reads.
// The owner keeps a source alive while any set holds a registration of it:
// remove_source() before it goes.
class Source {
  public:
    virtual uint32_t bits() const = 0;
    virtual Wakes wakes() const = 0;

  protected:
    Source() = default;
    Source(const Source&) = default;
    Source& operator=(const Source&) = default;
    ~Source() = default; // never deleted through a Source*
};

// The flags of epoll_event::events that say how to report, never reported
// themselves: the kernel's EP_PRIVATE_BITS.
inline constexpr uint32_t kPrivateBits = EPOLLWAKEUP | EPOLLONESHOT | EPOLLET | EPOLLEXCLUSIVE;
// What EPOLLEXCLUSIVE may be combined with (EPOLLEXCLUSIVE_OK_BITS).
inline constexpr uint32_t kExclusiveOk =
    EPOLLIN | EPOLLOUT | EPOLLERR | EPOLLHUP | EPOLLWAKEUP | EPOLLET | EPOLLEXCLUSIVE;
// epoll_wait's bound on maxevents (EP_MAX_EVENTS).
inline constexpr int kMaxEvents = int(0x7fffffff / sizeof(epoll_event));

// A source's place in the looks ("Hot and cold" above).
enum class Heat : uint8_t { Off, Hot, Cold, Armed };

class UserEpoll {
  public:
    // Collects in a row that find a hot source idle before it goes cold.
    static constexpr unsigned kColdAfter = 3;

    explicit UserEpoll(unsigned cold_after = kColdAfter);
    ~UserEpoll();
    UserEpoll(const UserEpoll&) = delete;
    UserEpoll& operator=(const UserEpoll&) = delete;

    // epoll_ctl(op, fd, ev) for descriptor `fd` of `src`: 0, or -errno as
    // the kernel answers it: EFAULT (no event for ADD or MOD), EINVAL
    // (unknown op; EPOLLEXCLUSIVE with MOD, or with a flag it does not
    // allow on ADD, both before the lookup; MOD of an EPOLLEXCLUSIVE
    // registration), EEXIST (ADD of a registered (fd, src)), ENOENT (MOD
    // or DEL of an unregistered one). The caller answers EBADF and EPERM
    // itself (descriptor closed, or no source).
    int ctl(int op, int fd, const Source* src, const epoll_event* ev);

    // One epoll_wait with a zero timeout: up to `maxevents` events into
    // `out`, in the kernel's order; the number reported, or -EINVAL for
    // maxevents out of (0, kMaxEvents]. Looks at the hot and cold sources
    // first.
    int collect(epoll_event* out, int maxevents);

    // The owner learnt that `src` may have changed (a bell named it, or it
    // armed it): look at it now. Nothing if `src` has no registration here.
    void mark(const Source* src);

    // `src` is gone (its file's last reference): every registration of it
    // goes, as eventpoll_release does. Also the way to say that the last
    // descriptor of a source was closed. (A descriptor closed while another
    // keeps the source needs no call: its registration stays, as the
    // kernel's does.)
    void remove_source(const Source* src);

    // Up to `max` cold sources into `out`, now Armed: the owner arms each
    // for the wake-ups interest() names, then calls mark() on it.
    size_t take_cold(const Source** out, size_t max);

    // Up to `max` sources that are Hot or Cold into `out`, now Armed: before
    // the owner sleeps, every source is armed (then marked: the look after
    // arming), so nothing changes unseen while nobody looks.
    size_t take_unarmed(const Source** out, size_t max);

    // The owner learnt that `src`'s arming was used up (the peer took the
    // request it armed): looked at, as mark(), and Hot even if the look
    // finds nothing new. A wake-up that a collect found first (a level-
    // triggered registration still on the ready list looks at the source
    // again) leaves nothing for this look, yet nothing is armed any more:
    // an Armed source would miss every later wake-up.
    void disarmed(const Source* src);

    // Every Armed source looked at and made Hot (the bell's queue
    // overflowed: a wake-up may have been lost, and with it the news that
    // its arming was used up).
    void look_at_armed();

    // A registration as the application made it (for a set that falls back
    // to the kernel, or a source that moves out of the set).
    struct Registration {
        int fd;
        const Source* src;
        epoll_event ev; // its events as given (disabled one-shot: the private bits only)
    };
    // Those of `src`, or of every source (nullptr), in the order made.
    std::vector<Registration> registrations(const Source* src = nullptr) const;

    // The events of `src`'s enabled registrations here (without the
    // private bits): what its arming must cover; 0 if none.
    uint32_t interest(const Source* src) const;

    Heat heat(const Source* src) const; // Off for an unknown source
    bool pending() const;               // the ready list is not empty
    size_t size() const;                // registrations

  private:
    struct Entry;
    struct Reg {
        int fd;
        Entry* entry;
        uint32_t events; // as given | EPOLLERR | EPOLLHUP; once disabled, its private bits only
        uint64_t data;
        uint64_t seen;       // the source's keyed wake count (keyed()) at the last look
        Reg* prev = nullptr; // on the ready list
        Reg* next = nullptr;
        bool queued = false;
    };
    // One per source with registrations here.
    struct Entry {
        const Source* src = nullptr;
        std::vector<Reg*> regs; // in the order a wake-up reaches them (ctl: the wait queue's)
        Entry* prev = nullptr;  // on the hot or the cold list
        Entry* next = nullptr;
        Heat heat = Heat::Off;
        unsigned idle = 0;
    };
    template <class T>
    struct List {
        T* head = nullptr;
        T* tail = nullptr;
        void push_back(T* x);
        void erase(T* x);
        bool empty() const { return head == nullptr; }
    };

    static uint64_t keyed(uint32_t events, const Wakes& w);
    static bool enabled(const Reg& r) { return (r.events & ~kPrivateBits) != 0; }
    static bool any_enabled(const Entry& e);
    bool look(Entry& e);
    void enqueue(Reg& r);
    void dequeue(Reg& r);
    void set_heat(Entry& e, Heat h);
    void make_hot(Entry& e);
    void drop(Reg& r);

    mutable std::mutex mu_;
    unsigned cold_after_;
    std::map<std::pair<const Source*, int>, Reg> regs_;
    std::unordered_map<const Source*, Entry> entries_;
    List<Reg> ready_;
    List<Entry> hot_;
    List<Entry> cold_;
};

} // namespace usmc::readiness
