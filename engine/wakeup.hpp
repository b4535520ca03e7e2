#pragma once
// Wake-ups between the two processes of an SMC-D connection.
//
// Each side makes one Unix stream socket pair and keeps both ends; the peer
// gets a copy of the far end. The near end is what poll() and the
// application's epoll sets watch for the connection:
//   readable  a wake-up byte is queued: data or a close may be waiting. The
//             peer (or we ourselves) sends one into the far end; we drain
//             the near end when we find the ring empty.
//   writable  unless we filled the near end's small send buffer (the peer's
//             ring was full): the peer drains the far end when it frees
//             space, and the kernel then reports the near end writable.
//
// Why sockets and not eventfds: the peer holds a copy of every object it
// signals us through, and an eventfd's blocking mode belongs to its open
// file, which the peer can change (F_SETFL). An eventfd write has no per-call
// nonblocking flag, so a peer that saturated the count and cleared
// O_NONBLOCK could block one of our writes for good. Every call here passes
// MSG_DONTWAIT (nonblocking per call, whatever the file's flags) and
// MSG_NOSIGNAL (a pair someone shut down gives EPIPE, never SIGPIPE). The
// peer can still fill, drain or shut down the ends it holds: that fakes or
// withholds readiness of its own connection only.
namespace usmc::wakeup {

// A new pair (nonblocking, close-on-exec, in usmc's descriptor range).
// False (errno EMFILE, ...) if it cannot be made; nothing is left open then.
bool make_pair(int* near_end, int* far_end);
// One wake-up byte into `fd`. A full queue already means "readable".
void send(int fd);
// Takes every byte queued on `fd` (a bounded number of reads). False if the
// other end was shut down (end of stream): someone broke the pair.
bool drain(int fd);
// Fills `fd`'s send buffer, so that it no longer polls writable until the
// other end is drained. `shrink` first, once per descriptor: the buffer at
// the kernel's minimum, so one send fills it. (Only then: most connections
// never fill, and a system call per connection set-up is worth saving.)
void fill(int fd, bool shrink);
// Whether `fd`, received from a peer, is a Unix stream socket (what the
// calls above assume).
bool plausible(int fd);

} // namespace usmc::wakeup
