#include "engine/statseg.hpp"

#include "engine/sys.hpp"

#include <cerrno>
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

std::string stats_dir() {
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

static void fill_header(Header* h, const char* program, uint32_t capacity) {
    std::memcpy(h->magic, kMagic, sizeof kMagic);
    h->version = kVersion;
    h->header_bytes = kHeaderBytes;
    h->pid = getpid();
    h->uid = getuid();
    h->start_time = process_start_time(h->pid);
    std::strncpy(h->program, program, sizeof h->program - 1);
    h->program[sizeof h->program - 1] = 0;
    h->fd_capacity = capacity;
}

// Opens a fresh file for this pid, replacing one left by an earlier image of
// the same process (exec) or a dead process of ours with the same pid.
static int open_fresh(char* path, size_t path_len) {
    std::string dir = stats_dir();
    std::snprintf(path, path_len, "%s/usmc.%u.%d", dir.c_str(), getuid(), getpid());
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
}

bool recreate_in_child(Header* h, char* path, size_t path_len) {
    uint32_t capacity = h->fd_capacity;
    size_t bytes = segment_bytes(capacity);
    if (path[0] == 0) { // anonymous (MAP_PRIVATE): already private to the child
        zero_counters(h);
        h->pid = getpid();
        return true;
    }
    int fd = open_fresh(path, path_len);
    bool ok = fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0;
    if (ok) {
        // Copy the header page and the used part of the fd table; the rest
        // stays a hole.
        size_t used = segment_bytes(h->fd_high.load(std::memory_order_relaxed));
        const char* src = reinterpret_cast<const char*>(h);
        for (size_t off = 0; ok && off < used;) {
            ssize_t n = pwrite(fd, src + off, used - off, static_cast<off_t>(off));
            if (n <= 0)
                ok = false;
            else
                off += static_cast<size_t>(n);
        }
    }
    void* p = MAP_FAILED;
    if (ok) p = mmap(h, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (fd >= 0) sys::real().close(fd);
    if (p == MAP_FAILED) {
        // Keep the table but stop sharing it with the parent: a private copy.
        if (path[0]) unlink(path);
        void* copy = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (copy == MAP_FAILED) return false;
        std::memcpy(copy, h, segment_bytes(h->fd_high.load(std::memory_order_relaxed)));
        if (mremap(copy, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, h) == MAP_FAILED)
            return false;
        path[0] = 0;
    }
    zero_counters(h);
    h->pid = getpid();
    h->uid = getuid();
    h->start_time = process_start_time(h->pid);
    return true;
}

static bool header_valid(const Header* h, size_t bytes) {
    return bytes >= kHeaderBytes && std::memcmp(h->magic, kMagic, sizeof kMagic) == 0 &&
           h->version == kVersion && h->header_bytes == kHeaderBytes &&
           segment_bytes(h->fd_capacity) <= bytes;
}

std::vector<View> open_all(const std::string& dir, bool remove_stale) {
    std::vector<View> views;
    DIR* d = opendir(dir.c_str());
    if (!d) return views;
    while (dirent* e = readdir(d)) {
        if (std::strncmp(e->d_name, "usmc.", 5) != 0) continue;
        std::string path = dir + "/" + e->d_name;
        int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        struct stat st;
        void* p = MAP_FAILED;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= off_t(kHeaderBytes))
            p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
        sys::real().close(fd);
        if (p == MAP_FAILED) continue;
        View v{path, static_cast<const Header*>(p), static_cast<size_t>(st.st_size), false};
        if (!header_valid(v.header, v.bytes)) {
            munmap(p, v.bytes);
            continue;
        }
        v.alive = (kill(v.header->pid, 0) == 0 || errno == EPERM) &&
                  process_start_time(v.header->pid) == v.header->start_time;
        if (!v.alive) {
            if (remove_stale) unlink(path.c_str());
            munmap(p, v.bytes);
            continue;
        }
        views.push_back(v);
    }
    closedir(d);
    return views;
}

void close_all(std::vector<View>& views) {
    for (auto& v : views)
        munmap(const_cast<Header*>(v.header), v.bytes);
    views.clear();
}

} // namespace usmc::statseg
