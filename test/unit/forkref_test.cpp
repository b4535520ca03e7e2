// SPDX-License-Identifier: MIT
// Fork reference counts: shared with forked children, never with a peer.
#include "engine/base/forkref.hpp"

#include <catch2/catch.hpp>
#include <set>
#include <sys/wait.h>
#include <unistd.h>

using namespace usmc;

TEST_CASE("forkref: counts start at 1, are distinct, and come back when freed") {
    std::set<forkref::Count*> seen;
    std::vector<forkref::Count*> all;
    for (int i = 0; i < 200; ++i) {
        forkref::Count* c = forkref::alloc();
        REQUIRE(c);
        CHECK(forkref::holders(*c) == 1);
        CHECK(seen.insert(c).second);
        all.push_back(c);
    }
    for (auto* c : all)
        forkref::free(c);
    forkref::Count* again = forkref::alloc();
    CHECK(seen.count(again) == 1); // a freed slot is used again
    forkref::free(again);
}

TEST_CASE("forkref: a forked child's change is seen by its parent") {
    forkref::Count* c = forkref::alloc();
    REQUIRE(c);
    forkref::hold(*c); // before fork, as af_smc counts the child in
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        forkref::unhold(*c); // the child closes its copy
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(forkref::holders(*c) == 1);
    forkref::free(c);
}

TEST_CASE("forkref: freeing a count that is not in the shared mapping does nothing") {
    forkref::Count own{1};
    forkref::free(&own); // a connection's private fallback count
    CHECK(own.load() == 1);
}

TEST_CASE("forkref: holders counted out and back in around an exec") {
    forkref::Count* c = forkref::alloc();
    REQUIRE(c);
    CHECK_FALSE(forkref::leave_unless_last(*c)); // the only holder stays
    CHECK(forkref::holders(*c) == 1);
    forkref::hold(*c); // a forked child
    uint32_t gen = forkref::generation(*c);
    REQUIRE(forkref::leave_unless_last(*c)); // the child's exec
    CHECK(forkref::holders(*c) == 1);
    SECTION("the exec failed, the connection still open: back in") {
        CHECK(forkref::rehold(*c, gen));
        CHECK(forkref::holders(*c) == 2);
        CHECK_FALSE(forkref::unhold(*c));
        CHECK(forkref::unhold(*c));
        forkref::free(c);
    }
    SECTION("closed meanwhile by the other holder: not back in") {
        CHECK(forkref::unhold(*c));
        forkref::free(c);
        CHECK_FALSE(forkref::rehold(*c, gen));
    }
    SECTION("closed, and the slot given to another connection: not back in") {
        CHECK(forkref::unhold(*c));
        forkref::free(c);
        forkref::Count* again = nullptr;
        std::vector<forkref::Count*> others;
        for (int i = 0; i < 1000 && again != c; ++i) {
            again = forkref::alloc();
            REQUIRE(again);
            others.push_back(again);
        }
        REQUIRE(again == c);
        CHECK(forkref::generation(*c) != gen);
        CHECK_FALSE(forkref::rehold(*c, gen));
        CHECK(forkref::holders(*c) == 1);
        for (auto* o : others)
            forkref::free(o);
    }
}
