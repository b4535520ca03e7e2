// SPDX-License-Identifier: MIT
// Listener holders shared with forked children (listen_share.hpp): who else
// may accept. Children are real fork()s; each answers its parent through a
// pipe and waits for the parent's word before it goes on.
#include "engine/discovery/listen_share.hpp"

#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

using namespace usmc;

namespace {
// A forked child: runs `body` (its answer: one byte to the parent), then
// waits for one byte from the parent before it exits (0) or leaves first.
struct Child {
    pid_t pid = -1;
    int answer = -1; // read end, the child's answers
    int go = -1;     // write end, the parent's word

    template <class F>
    static Child fork_with(ListenShare& share, F body) {
        int a[2], g[2];
        REQUIRE(pipe(a) == 0);
        REQUIRE(pipe(g) == 0);
        static uint64_t gen = 100;
        share.before_fork(++gen);
        Child c;
        c.pid = fork();
        REQUIRE(c.pid >= 0);
        if (c.pid == 0) {
            share.after_fork_child();
            close(a[0]);
            close(g[1]);
            char out = body(share) ? 'y' : 'n';
            if (write(a[1], &out, 1) != 1) _exit(2);
            char word = 0;
            while (read(g[0], &word, 1) == 1 && word == 'q') { // asked again
                out = share.others_may_accept() ? 'y' : 'n';
                if (write(a[1], &out, 1) != 1) _exit(2);
            }
            if (word == 'l') share.leave();
            out = 'x';
            if (write(a[1], &out, 1) != 1) _exit(4);
            _exit(0);
        }
        close(a[1]);
        close(g[0]);
        c.answer = a[0];
        c.go = g[1];
        return c;
    }
    char ask_again() const {
        char q = 'q';
        REQUIRE(write(go, &q, 1) == 1);
        return read_answer();
    }
    char read_answer() const {
        char v = 0;
        return read(answer, &v, 1) == 1 ? v : '?';
    }
    // 'l': leave, then exit; 'e': exit holding it. Waits until done, reaps.
    void finish(char word) {
        REQUIRE(write(go, &word, 1) == 1);
        CHECK(read_answer() == 'x');
        int status = 0;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
        close(answer);
        close(go);
    }
};
} // namespace

TEST_CASE("listen_share: a listener nobody else holds is ours alone") {
    ListenShare share;
    CHECK_FALSE(share.others_may_accept());
    share.accepting();
    CHECK_FALSE(share.others_may_accept());
}

TEST_CASE("listen_share: a forking parent that never accepted leaves its child alone") {
    ListenShare share;
    Child c = Child::fork_with(share, [](ListenShare& s) { return s.others_may_accept(); });
    CHECK(c.read_answer() == 'n');    // nginx's master and its one worker
    CHECK(share.others_may_accept()); // the child may accept
    SECTION("the child closes its copy") {
        c.finish('l');
        CHECK_FALSE(share.others_may_accept());
    }
    SECTION("the child exits holding it") {
        c.finish('e'); // reaped: its slot is cleared at the next look
        CHECK_FALSE(share.others_may_accept());
    }
}

TEST_CASE("listen_share: a parent that accepts counts for its child") {
    ListenShare share;
    share.accepting(); // an accept-then-fork server (PostgreSQL's postmaster)
    Child c = Child::fork_with(share, [](ListenShare& s) { return s.others_may_accept(); });
    CHECK(c.read_answer() == 'y');
    c.finish('l'); // (every backend closes the listener)
    CHECK_FALSE(share.others_may_accept());
}

TEST_CASE("listen_share: siblings see each other from the start") {
    ListenShare share;
    // The second child is reserved before it runs: the first sees it at once.
    Child a = Child::fork_with(share, [](ListenShare& s) {
        s.accepting();
        return true;
    });
    CHECK(a.read_answer() == 'y');
    Child b = Child::fork_with(share, [](ListenShare& s) { return s.others_may_accept(); });
    CHECK(b.read_answer() == 'y'); // A accepts
    share.leave();                 // the parent closes its copy (Python's pre-fork server)
    a.finish('e');                 // A exits, its quota served
    b.finish('e');
}

TEST_CASE("listen_share: a parent that accepts after forking counts again") {
    ListenShare share;
    Child c = Child::fork_with(share, [](ListenShare& s) { return s.others_may_accept(); });
    CHECK(c.read_answer() == 'n'); // the parent forked and has not accepted
    share.accepting();
    CHECK(c.ask_again() == 'y');
    c.finish('l');
    CHECK_FALSE(share.others_may_accept());
}

TEST_CASE("listen_share: a child that is gone without closing is cleared") {
    ListenShare share;
    share.accepting();
    Child c = Child::fork_with(share, [](ListenShare& s) { return s.others_may_accept(); });
    CHECK(c.read_answer() == 'y');
    c.finish('e');
    CHECK_FALSE(share.others_may_accept());
    // Its slot is free again: a second child is seen as the first was.
    Child d = Child::fork_with(share, [](ListenShare& s) { return s.others_may_accept(); });
    CHECK(d.read_answer() == 'y');
    CHECK(share.others_may_accept());
    d.finish('l');
}

TEST_CASE("listen_share: a fork that failed leaves no holder behind") {
    ListenShare share;
    share.before_fork(7); // fork() then returned -1: no child
    CHECK(share.reserved_count() == 1);
    CHECK(share.others_may_accept()); // (the reservation, while it lasts)
    share.fork_failed(7);
    CHECK(share.reserved_count() == 0);
    CHECK_FALSE(share.others_may_accept());
    // The next child, of a parent that has not accepted, sees no other
    // holder (the failed fork's reservation would be one).
    Child c = Child::fork_with(share, [](ListenShare& s) { return s.others_may_accept(); });
    CHECK(c.read_answer() == 'n');
    c.finish('l');
    CHECK_FALSE(share.others_may_accept());
}

TEST_CASE("listen_share: a failed fork's undo never touches a later fork's reservation") {
    ListenShare share;
    share.before_fork(7);
    share.before_fork(8); // another thread's fork began before the first one's undo
    CHECK(share.reserved_count() == 2);
    share.fork_failed(7);
    CHECK(share.reserved_count() == 2); // 8's child may be on its way: kept
    share.fork_failed(8);
    // 8's goes; 7's stays, a phantom holder (which costs only the
    // watcher's help).
    CHECK(share.reserved_count() == 1);
    CHECK(share.others_may_accept());
}
