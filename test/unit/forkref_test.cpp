// Fork reference counts: shared with forked children, never with a peer.
#include "engine/forkref.hpp"

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
        CHECK(c->load() == 1);
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
    c->fetch_add(1); // before fork, as af_smc counts the child in
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        c->fetch_sub(1); // the child closes its copy
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    CHECK(c->load() == 1);
    forkref::free(c);
}

TEST_CASE("forkref: freeing a count that is not in the shared mapping does nothing") {
    forkref::Count own{1};
    forkref::free(&own); // a connection's private fallback count
    CHECK(own.load() == 1);
}
