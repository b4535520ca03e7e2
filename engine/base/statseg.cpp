// SPDX-License-Identifier: MIT
#include "engine/base/statseg.hpp"

#include "engine/base/sys.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace usmc::statseg {

namespace {
// The directory as the environment named it when the library loaded:
// programs replace their environment later (nginx workers keep only TZ), and
// a worker that then looked for listeners in /dev/shm found none of those
// in the directory its master published in.
char g_dir[PATH_MAX];
std::atomic<bool> g_dir_known{false};
} // namespace

void remember_stats_dir() {
    const char* env = std::getenv("USMC_STATS_DIR");
    size_t n = env ? std::strlen(env) : 0;
    if (n >= sizeof g_dir) n = 0; // (too long to be a path: the default)
    if (n) std::memcpy(g_dir, env, n);
    g_dir[n] = 0;
    g_dir_known.store(true, std::memory_order_release);
}

std::string stats_dir() {
    if (g_dir_known.load(std::memory_order_acquire)) return g_dir[0] ? g_dir : "/dev/shm";
    const char* env = std::getenv("USMC_STATS_DIR");
    return env && *env ? env : "/dev/shm";
}

uint64_t process_start_time(pid_t pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[1024];
    ssize_t n = sys::real().read(fd, buf, sizeof buf - 1);
    sys::real().close(fd);
    if (n <= 0) return 0;
    buf[n] = 0;
    // The command name may contain spaces and parentheses: fields start after
    // the last ')'. Field 3 is the first after it; start_time is field 22.
    char* p = std::strrchr(buf, ')');
    if (!p) return 0;
    int field = 2;
    for (; *p && field < 22; ++p)
        if (*p == ' ') ++field;
    return std::strtoull(p, nullptr, 10);
}

// The magic last: a reader (usmc stats) that finds the file before it is
// whole skips it, and never sees our pid without our start time (it would
// take us for a dead process of that pid and retire our segment under us).
static void fill_header(Header* h, const char* program, uint32_t capacity) {
    h->pid = getpid();
    h->uid = getuid();
    h->start_time = process_start_time(h->pid);
    std::strncpy(h->program, program, sizeof h->program - 1);
    h->program[sizeof h->program - 1] = 0;
    h->fd_capacity = capacity;
    h->conn_slots = kConnSlots;
    h->lgr_slots = kLgrSlots;
    h->revision = kRevision;
    h->version = kVersion;
    h->header_bytes = kHeaderBytes;
    // (The header starts a mapping: its magic is one aligned word.)
    uint64_t magic;
    std::memcpy(&magic, kMagic, sizeof magic);
    __atomic_store_n(reinterpret_cast<uint64_t*>(h->magic), magic, __ATOMIC_RELEASE);
}

// Opens a fresh file for this pid, replacing one left by an earlier image of
// the same process (exec) or a dead process of ours with the same pid.
static int open_fresh(char* path, size_t path_len) {
    std::string dir = stats_dir();
    std::snprintf(path, path_len, "%s/usmc-live.%u.%d", dir.c_str(), getuid(), getpid());
    for (int attempt = 0; attempt < 2; ++attempt) {
        int fd = ::open(path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd >= 0) {
            fchmod(fd, 0644); // umask must not hide the stats from `usmc stats`
            return fd;
        }
        if (errno != EEXIST || unlink(path) != 0) break;
    }
    path[0] = 0;
    return -1;
}

Header* create(const char* program, uint32_t capacity, char* path_out, size_t path_len) {
    int fd = open_fresh(path_out, path_len);
    if (fd < 0) return nullptr;
    size_t bytes = segment_bytes(capacity);
    void* p = MAP_FAILED;
    if (ftruncate(fd, static_cast<off_t>(bytes)) == 0)
        p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    sys::real().close(fd);
    if (p == MAP_FAILED) {
        unlink(path_out);
        path_out[0] = 0;
        return nullptr;
    }
    auto* h = static_cast<Header*>(p);
    fill_header(h, program, capacity);
    return h;
}

Header* create_anonymous(const char* program, uint32_t capacity) {
    size_t bytes = segment_bytes(capacity);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    auto* h = static_cast<Header*>(p);
    fill_header(h, program, capacity);
    return h;
}

static void zero_counters(Header* h) {
    for (auto& c : h->counters)
        c.store(0, std::memory_order_relaxed);
    for (auto& c : h->fallbacks)
        c.store(0, std::memory_order_relaxed);
    for (auto& dir : h->traffic)
        for (auto& c : dir)
            c.store(0, std::memory_order_relaxed);
}

bool privatise_in_child(Header* h) {
    size_t bytes = segment_bytes(h->fd_capacity);
    char header[kHeaderBytes];
    std::memcpy(header, static_cast<void*>(h), kHeaderBytes);
    if (mmap(h, bytes, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == MAP_FAILED)
        return false;
    std::memcpy(static_cast<void*>(h), header, kHeaderBytes);
    zero_counters(h);
    // The parent's device and link groups are not the child's (it makes a
    // device of its own on first need; the table after the records starts
    // empty in the fresh mapping).
    h->device.gid.store(0, std::memory_order_relaxed);
    h->device.segments.store(0, std::memory_order_relaxed);
    h->device.peer_maps.store(0, std::memory_order_relaxed);
    h->device.link_groups.store(0, std::memory_order_relaxed);
    h->retired.store(0, std::memory_order_relaxed);
    h->fd_high.store(0, std::memory_order_relaxed);
    h->pid = getpid();
    h->uid = getuid();
    h->start_time = 0; // read when published: /proc costs a child that never is
    return true;
}

bool publish_in_child(Header* h, char* path, size_t path_len) {
    size_t bytes = segment_bytes(h->fd_capacity);
    // Our start time goes in before the file can be seen: a reader that
    // found it without one would take us for a dead process of that pid, and
    // (our user's reader) fold our counters away and remove the file, under
    // us (a process counted into a file nobody could find any more).
    h->start_time = process_start_time(h->pid);
    // The header page goes to the file as it is now; what another thread
    // counts between this copy and the mapping below is lost (a child's first
    // moments, never a connection's outcome: those come after the call that
    // publishes).
    int fd = open_fresh(path, path_len);
    bool ok = fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0 &&
              pwrite(fd, h, kHeaderBytes, 0) == static_cast<ssize_t>(kHeaderBytes);
    void* p = MAP_FAILED;
    if (ok) p = mmap(h, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (fd >= 0) sys::real().close(fd);
    if (p == MAP_FAILED) {
        if (path[0]) unlink(path);
        path[0] = 0;
        return false;
    }
    return true;
}

bool counted_anything(const Header* h) {
    for (unsigned i = 0; i < counters::kCount; ++i)
        if (!counters::is_gauge(counters::Id(i)) && h->counters[i].load(std::memory_order_relaxed))
            return true;
    for (const auto& c : h->fallbacks)
        if (c.load(std::memory_order_relaxed)) return true;
    for (const auto& dir : h->traffic)
        for (const auto& c : dir)
            if (c.load(std::memory_order_relaxed)) return true;
    return false;
}

static bool header_valid(const Header* h, size_t bytes) {
    return bytes >= kHeaderBytes && std::memcmp(h->magic, kMagic, sizeof kMagic) == 0 &&
           h->version == kVersion && h->header_bytes == kHeaderBytes &&
           table_bytes(h->fd_capacity) <= bytes;
}

// Connection records the copy really holds: none in a file too short for
// those its header claims.
static uint32_t records_in(const Header* h, size_t bytes) {
    uint32_t n = h->conn_slots;
    if (n == 0 || n > kMaxConnSlots) return 0;
    size_t end = table_bytes(h->fd_capacity) + size_t{n} * sizeof(ConnRecord);
    return end <= bytes ? n : 0;
}

// Link-group records the copy really holds: none before revision 1, nor
// when the records before them, or they, do not fit in the file.
static uint32_t groups_in(const Header* h, size_t bytes) {
    uint32_t n = h->lgr_slots;
    if (h->revision < 1 || n == 0 || n > kMaxLgrSlots || records_in(h, bytes) == 0) return 0;
    size_t end = table_bytes(h->fd_capacity) + size_t{h->conn_slots} * sizeof(ConnRecord) +
                 size_t{n} * sizeof(LgrRecord);
    return end <= bytes ? n : 0;
}

static Header* map_retired_file(const std::string& path, bool create) {
    int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | (create ? O_CREAT : 0), 0644);
    if (fd < 0) return nullptr;
    struct stat st;
    void* p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() &&
        (st.st_size == off_t(kHeaderBytes) || ftruncate(fd, off_t(kHeaderBytes)) == 0))
        p = mmap(nullptr, kHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    sys::real().close(fd);
    if (p == MAP_FAILED) return nullptr;
    auto* h = static_cast<Header*>(p);
    if (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0) {
        // New file (all zero): give it a header. Concurrent creators write
        // the same bytes.
        h->version = kVersion;
        h->header_bytes = kHeaderBytes;
        h->uid = geteuid();
        std::memcpy(h->program, "(exited processes)", 19);
        std::memcpy(h->magic, kMagic, sizeof kMagic);
    }
    return h;
}

static void add_counters(Header* into, const Header* from) {
    for (unsigned i = 0; i < counters::kSlots; ++i) {
        if (i < counters::kCount && counters::is_gauge(counters::Id(i))) continue;
        if (uint64_t v = from->counters[i].load(std::memory_order_relaxed))
            into->counters[i].fetch_add(v, std::memory_order_relaxed);
    }
    for (unsigned i = 0; i < kReasonSlots; ++i)
        if (uint64_t v = from->fallbacks[i].load(std::memory_order_relaxed))
            into->fallbacks[i].fetch_add(v, std::memory_order_relaxed);
    for (unsigned d = 0; d < 2; ++d)
        for (unsigned i = 0; i < counters::kTrafficSlots; ++i)
            if (uint64_t v = from->traffic[d][i].load(std::memory_order_relaxed))
                into->traffic[d][i].fetch_add(v, std::memory_order_relaxed);
}

static std::string retired_path(const std::string& dir) {
    return dir + "/usmc-retired." + std::to_string(geteuid());
}

void retire(Header* h) {
    if (h->retired.load(std::memory_order_relaxed)) return;
    // If the totals file cannot be written (say, the process dropped
    // privileges), the segment stays unretired and `usmc stats` retires it
    // once the process is gone.
    Header* totals = map_retired_file(retired_path(stats_dir()), true);
    if (!totals) return;
    // Readers skip a segment marked retired, so a signal that ends the
    // process between the mark and the last addition would lose what it
    // counted: a test harness or a service manager often sends SIGTERM while
    // the program is already exiting, here. Signals wait for both.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    uint32_t expected = 0;
    if (h->retired.compare_exchange_strong(expected, 1)) add_counters(totals, h);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    munmap(totals, kHeaderBytes);
}

// A copy of the file, not a mapping of it: a segment is written by its
// process (and, as root, another user's is readable), and a file someone
// shrinks under a shared mapping kills its reader with SIGBUS. A snapshot
// of counters is all a reader needs. Only the header page is copied here:
// the fd table and records after it matter for live processes alone
// (read_tables), and a stats directory can hold thousands of dead
// processes' segments, each as large as its fd table.
static bool map_view(const std::string& path, View& v) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    void* p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= off_t(kHeaderBytes) &&
        st.st_size <= off_t(64) << 20) {
        // (Anonymous pages cost nothing until written: a view whose tables
        // are never read holds one page.)
        size_t n = static_cast<size_t>(st.st_size);
        p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p != MAP_FAILED &&
            pread(fd, p, kHeaderBytes, 0) != static_cast<ssize_t>(kHeaderBytes)) {
            munmap(p, n);
            p = MAP_FAILED; // shrunk meanwhile
        }
    }
    sys::real().close(fd);
    if (p == MAP_FAILED) return false;
    v.owner = st.st_uid;
    v.path = path;
    v.header = static_cast<const Header*>(p);
    v.bytes = static_cast<size_t>(st.st_size);
    if (!header_valid(v.header, v.bytes)) {
        munmap(p, v.bytes);
        return false;
    }
    return true;
}

// The rest of a live process's file (its fd table, records and link groups)
// into the view's copy. A file shrunk meanwhile leaves the view without
// records and with an empty table: what a process that just exited has.
static void read_tables(View& v) {
    size_t rest = v.bytes - kHeaderBytes;
    int fd = rest ? ::open(v.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (fd < 0) return;
    char* into = reinterpret_cast<char*>(const_cast<Header*>(v.header)) + kHeaderBytes;
    ssize_t n = pread(fd, into, rest, static_cast<off_t>(kHeaderBytes));
    sys::real().close(fd);
    if (n != static_cast<ssize_t>(rest)) {
        std::memset(into, 0, rest);
        return;
    }
    v.records = records_in(v.header, v.bytes);
    v.groups = groups_in(v.header, v.bytes);
}

std::vector<ConnRecord> live_records(const View& v) {
    std::vector<ConnRecord> out;
    if (v.records == 0 || !v.alive) return out;
    // The second copy: a record being written while the first was taken
    // differs between the two (its generation moved on).
    size_t len = size_t{v.records} * sizeof(ConnRecord);
    std::vector<ConnRecord> again(v.records);
    int fd = ::open(v.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return out;
    ssize_t n = pread(fd, static_cast<void*>(again.data()), len,
                      static_cast<off_t>(table_bytes(v.header->fd_capacity)));
    sys::real().close(fd);
    if (n != static_cast<ssize_t>(len)) return out;
    const ConnRecord* first = v.record_array();
    for (uint32_t i = 0; i < v.records; ++i) {
        if (!record_live(first[i].gen)) continue;
        if (std::memcmp(static_cast<const void*>(&first[i]), static_cast<const void*>(&again[i]),
                        sizeof(ConnRecord)) != 0)
            continue;
        out.push_back(again[i]);
    }
    return out;
}

std::vector<LgrRecord> live_groups(const View& v) {
    std::vector<LgrRecord> out;
    if (v.groups == 0 || !v.alive) return out;
    size_t len = size_t{v.groups} * sizeof(LgrRecord);
    size_t offset =
        table_bytes(v.header->fd_capacity) + size_t{v.header->conn_slots} * sizeof(ConnRecord);
    std::vector<LgrRecord> again(v.groups);
    int fd = ::open(v.path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return out;
    ssize_t n = pread(fd, static_cast<void*>(again.data()), len, static_cast<off_t>(offset));
    sys::real().close(fd);
    if (n != static_cast<ssize_t>(len)) return out;
    const auto* first =
        reinterpret_cast<const LgrRecord*>(reinterpret_cast<const char*>(v.header) + offset);
    for (uint32_t i = 0; i < v.groups; ++i) {
        if (!record_live(first[i].gen)) continue;
        if (std::memcmp(static_cast<const void*>(&first[i]), static_cast<const void*>(&again[i]),
                        sizeof(LgrRecord)) != 0)
            continue;
        out.push_back(again[i]);
    }
    return out;
}

const Header::Device* device_of(const View& v) {
    if (v.totals || v.header->revision < 1 ||
        v.header->device.gid.load(std::memory_order_relaxed) == 0)
        return nullptr;
    return &v.header->device;
}

// A dead process's segment: claim it by renaming (only one reader wins),
// add its counters to our retired file, remove it.
// `totals` is our retired file, mapped at the first dead process found
// (one mapping for a directory of thousands of them).
static void retire_dead(const std::string& dir, const std::string& path, const Header* h,
                        Header*& totals) {
    std::string claim =
        dir + "/usmc-claim." + std::to_string(getpid()) + "." + std::to_string(h->pid);
    if (rename(path.c_str(), claim.c_str()) != 0) return;
    if (!h->retired.load(std::memory_order_relaxed)) {
        if (!totals) totals = map_retired_file(retired_path(dir), true);
        if (totals) add_counters(totals, h);
    }
    unlink(claim.c_str());
}

namespace {

// The retired-counters files in `dir` and what each holds (its bytes).
std::vector<std::pair<std::string, std::string>> retired_contents(const std::string& dir) {
    std::vector<std::pair<std::string, std::string>> out;
    DIR* d = opendir(dir.c_str());
    if (!d) return out;
    while (dirent* e = readdir(d))
        if (!std::strncmp(e->d_name, "usmc-retired.", 13)) out.push_back({e->d_name, {}});
    closedir(d);
    for (auto& [name, bytes] : out) {
        bytes.resize(kHeaderBytes);
        int fd = ::open((dir + "/" + name).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ssize_t n = fd >= 0 ? pread(fd, bytes.data(), bytes.size(), 0) : -1;
        if (fd >= 0) sys::real().close(fd);
        bytes.resize(n > 0 ? size_t(n) : 0);
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<View> open_all_once(const std::string& dir, bool clean);

} // namespace

// A process that retires while we read would be counted twice (its live
// copy, then the totals it added to) or not at all: the snapshot is taken
// again while the retired files change under it (a few times at most).
std::vector<View> open_all(const std::string& dir, bool clean) {
    for (int tries = 0;; ++tries) {
        auto before = retired_contents(dir);
        auto views = open_all_once(dir, clean);
        if (tries == 4) return views;
        // (A dead process we retired ourselves changes our file too: the
        // next look finds nothing more to retire.)
        if (retired_contents(dir) == before) return views;
        for (auto& v : views)
            munmap(const_cast<Header*>(v.header), v.bytes);
    }
}

namespace {
std::vector<View> open_all_once(const std::string& dir, bool clean) {
    std::vector<View> views;
    DIR* d = opendir(dir.c_str());
    if (!d) return views;
    std::vector<std::string> live, retired;
    while (dirent* e = readdir(d)) {
        if (!std::strncmp(e->d_name, "usmc-live.", 10))
            live.push_back(dir + "/" + e->d_name);
        else if (!std::strncmp(e->d_name, "usmc-retired.", 13))
            retired.push_back(dir + "/" + e->d_name);
    }
    closedir(d);
    Header* totals = nullptr;
    for (const auto& path : live) {
        View v;
        if (!map_view(path, v)) continue;
        v.alive = (kill(v.header->pid, 0) == 0 || errno == EPERM) &&
                  process_start_time(v.header->pid) == v.header->start_time;
        if (v.header->retired.load(std::memory_order_relaxed)) {
            // Counted in a retired file already (the process is exiting or
            // exited but could not remove its file, e.g. after setuid).
            if (!v.alive && clean) unlink(path.c_str());
            munmap(const_cast<Header*>(v.header), v.bytes);
            continue;
        }
        // Only our own dead processes' counters move into our retired file
        // (root must not fold other users' into its own); others' are
        // counted as they are, until their owner's reader retires them.
        if (!v.alive && clean && v.owner == geteuid()) {
            retire_dead(dir, path, v.header,
                        totals); // its counters move to our retired file, read below
            munmap(const_cast<Header*>(v.header), v.bytes);
            continue;
        }
        if (v.alive) read_tables(v);
        views.push_back(v);
    }
    if (totals) munmap(totals, kHeaderBytes);
    if (clean && std::find(retired.begin(), retired.end(), retired_path(dir)) == retired.end() &&
        access(retired_path(dir).c_str(), F_OK) == 0)
        retired.push_back(retired_path(dir)); // created by retire_dead above
    for (const auto& path : retired) {
        View v;
        if (!map_view(path, v)) continue;
        v.totals = true;
        views.push_back(v);
    }
    return views;
}
} // namespace

int reset_retired(const std::string& dir) {
    int removed = 0;
    DIR* d = opendir(dir.c_str());
    if (!d) return 0;
    while (dirent* e = readdir(d))
        if (!std::strncmp(e->d_name, "usmc-retired.", 13) &&
            unlink((dir + "/" + e->d_name).c_str()) == 0)
            ++removed;
    closedir(d);
    return removed;
}

void zero_counters_of(Header* h) {
    for (unsigned i = 0; i < counters::kSlots; ++i)
        if (i >= counters::kCount || !counters::is_gauge(counters::Id(i)))
            h->counters[i].exchange(0, std::memory_order_relaxed);
    for (auto& c : h->fallbacks)
        c.exchange(0, std::memory_order_relaxed);
    for (auto& dir : h->traffic)
        for (auto& c : dir)
            c.exchange(0, std::memory_order_relaxed);
}

int zero_live(const std::string& dir, std::vector<pid_t>* skipped) {
    std::vector<std::string> live;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d))
            if (!std::strncmp(e->d_name, "usmc-live.", 10)) live.push_back(dir + "/" + e->d_name);
        closedir(d);
    }
    int zeroed = 0;
    for (const auto& path : live) {
        // Only page 0 is mapped (the counters are all there), and only from
        // a regular file of at least that size: the segment's owner (or
        // root) is the only one who could shrink it under us.
        int fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0) {
            if (skipped && (errno == EACCES || errno == EPERM)) {
                View v;
                if (map_view(path, v)) {
                    skipped->push_back(v.header->pid);
                    munmap(const_cast<Header*>(v.header), v.bytes);
                }
            }
            continue;
        }
        struct stat st;
        void* p = MAP_FAILED;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= off_t(kHeaderBytes))
            p = mmap(nullptr, kHeaderBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        sys::real().close(fd);
        if (p == MAP_FAILED) continue;
        auto* h = static_cast<Header*>(p);
        if (std::memcmp(h->magic, kMagic, sizeof kMagic) == 0 && h->version == kVersion &&
            h->header_bytes == kHeaderBytes) {
            zero_counters_of(h);
            ++zeroed;
        }
        munmap(p, kHeaderBytes);
    }
    return zeroed;
}

void claim_device(Header* h, uint64_t gid, uint64_t max_dmb_memory) {
    if (!h) return;
    h->device.max_dmb_memory.store(max_dmb_memory, std::memory_order_relaxed);
    h->device.segments.store(0, std::memory_order_relaxed);
    h->device.peer_maps.store(0, std::memory_order_relaxed);
    h->device.link_groups.store(0, std::memory_order_relaxed);
    h->device.gid.store(gid, std::memory_order_release);
}

void publish_device(Header* h, uint64_t gid, uint64_t segments, uint64_t peer_maps) {
    if (!h || h->device.gid.load(std::memory_order_relaxed) != gid) return;
    h->device.segments.store(segments, std::memory_order_relaxed);
    h->device.peer_maps.store(peer_maps, std::memory_order_relaxed);
}

void publish_link_groups(Header* h, uint64_t gid, uint64_t count) {
    if (!h || h->device.gid.load(std::memory_order_relaxed) != gid) return;
    h->device.link_groups.store(count, std::memory_order_relaxed);
}

namespace {
// The generation protocol of ConnRecord (engine/sock/diag.cpp), for LgrRecord.
void begin_write(LgrRecord& r, uint32_t gen) {
    std::atomic_ref<uint32_t>(r.gen).exchange(gen, std::memory_order_acq_rel);
}
void end_write(LgrRecord& r, uint32_t gen) {
    std::atomic_ref<uint32_t>(r.gen).store(gen, std::memory_order_release);
}
uint32_t gen_of(LgrRecord& r) {
    return std::atomic_ref<uint32_t>(r.gen).load(std::memory_order_relaxed);
}
} // namespace

int publish_group(Header* h, int slot, const LgrRecord& rec) {
    if (!h || h->revision < 1) return -1;
    uint32_t n = std::min(h->lgr_slots, kMaxLgrSlots);
    LgrRecord* recs = groups_of(h);
    if (slot < 0)
        for (uint32_t i = 0; i < n && slot < 0; ++i)
            if (gen_of(recs[i]) % 4 == 0) slot = int(i);
    if (slot < 0 || uint32_t(slot) >= n) return -1;
    LgrRecord& r = recs[slot];
    uint32_t gen = gen_of(r);
    gen += gen % 2 ? 1 : 0; // (an odd one: a writer died mid-way in a forked copy)
    begin_write(r, gen + 1);
    LgrRecord fresh = rec;
    fresh.gen = gen + 1;
    r = fresh;
    // Live is gen % 4 == 2: from free (0 mod 4) two steps; from live, four.
    end_write(r, gen % 4 == 0 ? gen + 2 : gen + 4);
    return slot;
}

void withdraw_group(Header* h, int slot) {
    if (!h || slot < 0 || uint32_t(slot) >= std::min(h->lgr_slots, kMaxLgrSlots)) return;
    LgrRecord& r = groups_of(h)[slot];
    uint32_t gen = gen_of(r);
    if (!record_live(gen)) return;
    begin_write(r, gen + 1);
    LgrRecord empty{};
    empty.gen = gen + 1;
    r = empty;
    end_write(r, gen + 2);
}

void close_all(std::vector<View>& views) {
    for (auto& v : views)
        munmap(const_cast<Header*>(v.header), v.bytes);
    views.clear();
}

} // namespace usmc::statseg
