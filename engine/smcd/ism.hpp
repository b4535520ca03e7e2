// SPDX-License-Identifier: MIT
#pragma once
// The user-space ISM device (as the kernel's loopback-ism): a random GID per
// engine and DMBs in shared memory. A DMB is a memfd (never reachable by
// name) mapped shared; it travels to the peer of a completed handshake as a
// descriptor (SCM_RIGHTS), together with the owner's wake-up socket.
//
// Reuse: a freed DMB is kept for a later connection only to a peer of the
// same uid as its last peer (same-uid processes can read each other's memory
// anyway; another user's process might still have the old mapping). Reused
// DMBs are zeroed (memset, as the kernel's smc_buf_get_slot reuse does: its
// pages stay resident, where punching them out cost a fault per page).
//
// A DMB's size is sealed (F_SEAL_SHRINK | F_SEAL_GROW): the mapping side
// checks the seals, so a peer cannot truncate the file under our mapping
// and turn our next access into SIGBUS.
//
// Peer mappings are cached by the file's identity: a peer that reuses its
// DMB for our next connection sends the same memfd again, and we use the
// mapping we have instead of mmap/munmap and a page fault per page touched.
// The mapping holds the file, so its inode number cannot be recycled while
// it is cached.
//
// Segments (the kernel's link-group buffers, smc_buf_get_slot): DMBs of one
// size for peers of one user are slots of one memfd, made once and mapped
// once by each peer; a connection claims a slot. One descriptor per segment
// instead of one per connection, and no memfd_create/ftruncate/mmap for a
// new connection. A peer holding the segment can reach every slot in it,
// which is why a segment serves peers of one user only: the same line as a
// reused DMB's (an old peer may keep its mapping). A slot is reused under
// the same rules as a spare DMB (zeroed, after the old peer's close flags).
// The slots' states live in a page shared with our forked children (never
// with a peer), so the process that closes a connection last gives its slot
// back, whichever it is.
#include "engine/smcd/cdc_line.hpp"

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <sys/stat.h>
#include <sys/types.h>
#include <unordered_map>
#include <vector>

namespace usmc::ism {

struct Segment;
class LinkGroups;

// A segment's file ends in this many bytes of gate lines (smcd/gate.hpp).
constexpr uint32_t kGatePage = 4096;

struct Dmb {
    int fd = -1;
    uint8_t* base = nullptr;
    uint32_t size = 0; // control line + ring
    uint64_t token = 0;
    uint64_t ino = 0; // the file's inode: a peer's DMB's mapping-cache key; ours, for observers
    // The GID of the device that counts it against its memory cap (0: none,
    // as a peer's). After fork two processes hold the same DMB, and only the
    // one whose device made it may give its bytes back.
    uint64_t owner = 0;
    // Where it lies in its file: a DMB of its own is the whole file; a slot
    // is `size` bytes at `offset` of a segment of `file_size` bytes.
    uint32_t offset = 0;
    uint32_t file_size = 0;
    // Ours, a slot: its segment (which owns `fd` and the mapping) and index.
    std::shared_ptr<Segment> seg;
    uint32_t slot = 0;
    // A slot's segment number in its owner's device (0: not a slot), ours
    // or a peer's (link_group.hpp).
    uint32_t serial = 0;

    bool valid() const { return base != nullptr; }
    smcd::Control* control() const { return reinterpret_cast<smcd::Control*>(base); }
    uint8_t* ring() const { return base + smcd::kControlBytes; }
    uint32_t ring_size() const { return size - smcd::kControlBytes; }
};

uint64_t random64(); // getrandom(): GIDs and tokens

// A segment's slot states, in memory shared with forked children only.
enum SlotState : uint32_t {
    kSlotFree = 0,
    kSlotUsed = 1,
    kSlotReleased = 2, // closed here; reusable once the old peer's close flags are in
    kSlotLost = 3,     // given up during a failed handshake: a peer may still write it
};

struct Segment {
    int fd = -1;
    uint8_t* base = nullptr;
    uint32_t slot_size = 0;
    uint32_t nslots = 0;
    uint64_t ino = 0;
    uint64_t owner = 0;  // the device that made it
    uint32_t serial = 0; // its number in that device: never 0, never used twice
    uid_t peer_uid = 0;  // whose peers it serves
    std::atomic<uint32_t>* state = nullptr;
    // How the owner counts each slot (under its lock): kSpare, kLive (a
    // connection of ours), kAway (a forked child's: the owner let go of its
    // copy, and learns the child gave it back from `state`).
    enum : uint8_t { kSpare = 0, kLive = 1, kAway = 2 };
    std::vector<uint8_t> live;
    std::vector<uint64_t> tokens; // the token of each slot's latest claim (owner, its lock)
    // A slot of it was lost (a failed handshake's peer may still write it):
    // no more claims; dropped once no connection holds a slot of it.
    bool retired = false;
    // The slots, then one page of gate lines (gate.hpp): the file's size.
    uint32_t slot_bytes() const { return slot_size * nslots; }
    uint32_t file_size() const { return slot_bytes() + kGatePage; }
    uint8_t* slot_base(uint32_t i) const { return base + size_t{i} * slot_size; }
    ~Segment();
};
constexpr uint32_t kMaxSegmentBytes = 16u << 20;
constexpr uint32_t kMaxSegmentSlots = 64;

// Memory another process maps must not be truncatable under it (a short
// file faults: SIGBUS): a memfd of `size` bytes sealed against shrinking
// and growing (close-on-exec, in usmc's descriptor range), or -1.
int make_sealed_memfd(const char* name, size_t size);
// Whether `fd` (from another process) is such a file: regular, exactly
// `size` bytes, and sealed so (F_GET_SEALS). `st` is its fstat().
bool sealed_memfd_ok(int fd, size_t size, struct stat& st);

// The size for a new connection's DMB when the live connections' DMBs hold
// `live` bytes of a cap of `cap`: `base` up to half the cap; beyond it,
// `base` scaled by the room left over half the cap, a power of two, at
// least 16 KiB (SMC_BUF_MIN_SIZE); and never more than fits. The kernel
// tries smaller buffers when one fails to allocate (smc_buf_create's
// downgrade); shrinking before the cap is full is what lets a crowd in:
// N short-lived connections settle where N sizes fill the cap to where
// the size asked is theirs (10 000 of 128 KiB asked, under 256 MiB: 16 to
// 32 KiB each), where a cap full of base-sized DMBs would turn every
// connection past the 2 000th to TCP.
uint32_t crowd_size(uint32_t base, uint64_t live, uint64_t cap);

// A new DMB of `size` bytes (16 KiB .. 1 MiB), its size sealed.
std::optional<Dmb> create_dmb(uint32_t size);
// Maps a DMB descriptor received from a peer, after checking with fstat()
// that it really is `size` bytes and with F_GET_SEALS that it stays so (a
// short file would fault on access). On success `fd` is closed (the
// mapping keeps the memory); on failure it is left to the caller.
std::optional<Dmb> map_peer_dmb(int fd, uint32_t size);
// Whether a peer's claim "a DMB of `size` at `offset` of a file of
// `file_size`" is one a peer may make (before looking at the file).
bool slot_claim_ok(uint32_t size, uint32_t offset, uint32_t file_size);
// At process exit, for a connection this process holds last and has told
// the peer it closed: its slot goes back to the process that made the
// segment (a forked child that exits with the connection open), reusable
// once the peer's close flags are in.
void release_slot_at_exit(const Dmb& dmb);
// Unmaps and closes (a slot of ours: lets go of its segment; a view of a
// peer's segment: left mapped, as other connections may use the mapping).
void unmap(Dmb& dmb);

// A peer whose user is not known (a handshake that failed before or
// during the attach): its DMB is never reused.
constexpr uid_t kUnknownPeer = static_cast<uid_t>(-1);

class Device {
  public:
    // `segments`: DMBs for peers of a known user are slots of segments
    // (false: each a file of its own, as for a peer of unknown user).
    // `base`: the configured DMB size (a DMB below it is counted as a
    // downgrade, counters::dmb_downgraded; 0: none counted).
    explicit Device(uint64_t max_memory, bool segments = true, uint32_t base = 0);

    uint64_t gid() const { return gid_; }
    // A DMB for a connection to a peer of `peer_uid`; nullopt past the memory
    // cap (the connection then declines with MAX_DMB / MEM and runs as TCP).
    // A freed DMB is reused only for a peer of the same user: an old peer
    // may keep its mapping, and must never see another user's bytes. With
    // kUnknownPeer it is always a new one.
    //
    // `up_to` (not 0): the caller tells the peer the size after the claim,
    // so another size may serve: a free slot of a larger one up to `up_to`
    // (whole) instead of a new segment of `size` (a crowd whose DMBs shrink
    // leaves the larger sizes' segments with free slots, memory held
    // already), and a smaller one when nothing of `size` fits. The DMB's
    // `size` says which.
    std::optional<Dmb> allocate(uint32_t size, uid_t peer_uid, uint32_t up_to = 0);
    // `reusable`: the peer is known to be done writing into it (its close or
    // abort flag is in the control line, or it never had it). Otherwise a
    // late write of the old peer could land in the next connection's DMB, so
    // it waits until the peer's flag shows up (a server that closes first —
    // every `Connection: close` — would else make a new DMB per connection);
    // past the cap it is dropped (the peer's mapping keeps the memory until
    // it unmaps).
    //
    // A DMB another device made (a forked child's inherited one, released
    // by the last owner) is unmapped without touching the count: this
    // device never counted it, and a child of an accept-then-fork server
    // rarely makes connections of its own to reuse it for.
    void release(Dmb dmb, uid_t peer_uid, bool reusable = true);
    // This process gives up its copy while another process (fork) still
    // holds the connection: unmapped, and if this device counts it, its
    // bytes are no longer counted here. Never filed as a spare: the other
    // process keeps using it.
    void disown(Dmb& dmb);
    // DMBs held for reuse: ready, and waiting for their old peer's close.
    size_t spare_count() const;
    uint64_t memory_in_use() const; // connections' DMBs and spares
    uint64_t spare_bytes() const;
    // spare bytes <= memory in use <= the cap (for tests: the counts never
    // went below zero nor past the cap).
    bool accounting_consistent() const;
    // Whether a DMB of `size` fits under the cap now (spares count as room).
    bool has_room(uint32_t size) const;
    // The size for a new connection's DMB: `roomy` while the DMBs of live
    // connections, with it, stay within a sixteenth of the cap (streams are
    // few: the kernel's TCP grows a stream's buffers as it goes, a DMB's size
    // is fixed at the handshake, so a stream gets room at the start, while
    // there is room; unused pages of a DMB are never touched); otherwise
    // crowd_size(base, ...): a crowd of connections shares the cap.
    // (Connections get below `base` only here: allocate() never shrinks a
    // size asked, as the Accept has told the peer the size by then.)
    uint32_t size_for(uint32_t base, uint32_t roomy) const;

    // A peer's DMB (the descriptor as map_peer_dmb), from the mapping
    // cache when this file is mapped already; give it back with unmap_peer.
    // A slot of a peer's segment: the file is `file_size` bytes, the DMB
    // the `size` bytes at `offset`; the whole file is mapped once. Takes
    // `fd` (closed, or kept by the mapping) only when it succeeds.
    std::optional<Dmb> map_peer(int fd, uint32_t size, uint32_t offset = 0, uint32_t file_size = 0);
    // The `size` bytes at `offset` of a peer's file of `file_size` bytes
    // that this device maps already (by its inode `ino`), as map_peer gives
    // it (give it back with unmap_peer); nullopt if it is not mapped here.
    std::optional<Dmb> view_peer(uint64_t ino, uint32_t size, uint32_t offset, uint32_t file_size);
    // Done with a peer's DMB: it stays mapped for reuse (at most
    // kMaxIdlePeerMaps idle mappings and a quarter of our own memory cap in
    // bytes: they keep the peer's memory; least recently used go first). A
    // mapping this device does not know (a forked child's inherited one)
    // is unmapped.
    void unmap_peer(Dmb& dmb);
    // The peer that made the file `ino` is gone: nobody will name it again,
    // so its mapping (and with it the file's memory) goes now if idle, or
    // with its last view rather than into the idle list.
    void forget_peer(uint64_t ino);
    size_t idle_peer_maps() const;
    static constexpr size_t kMaxIdlePeerMaps = 1024;
    // Segments this device made, and slots of them held by connections.
    size_t segment_count() const;
    size_t slots_in_use() const;
    // The link groups of this device's process (link_group.hpp).
    LinkGroups& groups() { return *groups_; }
    ~Device();

  private:
    struct Free {
        Dmb dmb;
        uid_t last_peer;
    };
    uint64_t gid_;
    uint64_t max_memory_;
    uint32_t base_size_;
    bool segments_on_;
    uint64_t in_use_ = 0;
    std::vector<Free> free_;
    std::vector<Free> waiting_; // released before the old peer closed
    uint64_t spare_bytes_ = 0;  // in free_ and waiting_, and free slots
    uint64_t away_bytes_ = 0;   // slots our forked children hold (Segment::kAway)
    size_t sweep_pos_ = 0;      // where sweep_waiting goes on
    struct PeerMap {
        Dmb dmb;
        dev_t dev;
        uint32_t refs = 0;
        bool gone = false;                  // forget_peer: unmapped with its last view
        std::list<uint64_t>::iterator idle; // valid while refs == 0
    };
    std::unordered_map<uint64_t, PeerMap> peer_maps_; // by inode
    std::list<uint64_t> idle_peer_maps_;              // least recently used first
    uint64_t idle_peer_bytes_ = 0;
    std::vector<std::shared_ptr<Segment>> segments_;
    size_t claim_pos_ = 0; // where claim_slot starts looking (rotating)
    uint32_t next_serial_;
    mutable std::mutex mu_;
    // After mu_: destroyed first, its pins unmapped through us (unmap_peer).
    std::unique_ptr<LinkGroups> groups_;
    // Under mu_: a slot of a segment for peers of `peer_uid` (a new segment
    // if all are taken and one fits under the cap), or nullopt.
    // `make`: a new segment if none has a free slot (false: free slots only).
    std::optional<Dmb> claim_slot(uint32_t size, uid_t peer_uid, uint32_t up_to, bool make = true);
    std::shared_ptr<Segment> make_segment(uint32_t size, uid_t peer_uid);
    std::optional<Dmb> allocate_sized(uint32_t size, uid_t peer_uid, uint32_t up_to); // uncounted
    void release_slot(Dmb& dmb, uid_t peer_uid, bool reusable);
    // Under mu_: drops segments no connection holds a slot of, until
    // `need` more bytes fit under the cap.
    void drop_idle_segments(uint64_t need);
    void sweep_waiting(); // under mu_: those whose peer has closed become free
    // Under mu_: bytes leave the count; never more than it holds (no wrap).
    void uncount_spare(uint32_t size);
    void uncount_live(uint32_t size);
    void publish() const; // under mu_: the gauges dmb_bytes, dmb_spare_bytes
};

} // namespace usmc::ism
