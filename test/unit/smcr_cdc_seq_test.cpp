// SPDX-License-Identifier: MIT
// One SMC-R connection's CDC messages in sequence (engine/smcr/cdc_seq):
// late ones dropped across the 16-bit wrap, urgent marks counted once,
// failover replays set aside.
#include "engine/smcr/cdc_seq.hpp"

#include <catch2/catch.hpp>

using namespace usmc;
using namespace usmc::smcr;

namespace {
CdcMsg msg(uint16_t seq, uint32_t prod, uint8_t flags = 0) {
    CdcMsg m;
    m.seqno = seq;
    m.prod = {0, prod};
    m.prod_flags = flags;
    return m;
}
} // namespace

TEST_CASE("smcr CDC sequence: the newest message stands, a late one is dropped") {
    CdcRx rx;
    CHECK_FALSE(rx.any());
    CHECK(rx.take(msg(1, 100)) == CdcRx::Took::Taken);
    CHECK(rx.take(msg(3, 300)) == CdcRx::Took::Taken);
    CHECK(rx.take(msg(2, 200)) == CdcRx::Took::Old); // overtaken
    CHECK(rx.peer().prod.count == 300);
    CHECK(rx.last_seqno() == 3);
    CHECK(rx.take(msg(3, 300)) == CdcRx::Took::Taken); // a duplicate: harmless
    CHECK(rx.peer().prod.count == 300);
}

TEST_CASE("smcr CDC sequence: numbers wrap at 16 bits") {
    CdcRx rx;
    CHECK(rx.take(msg(0xFFFE, 1)) == CdcRx::Took::Taken);
    CHECK(rx.take(msg(0xFFFF, 2)) == CdcRx::Took::Taken);
    CHECK(rx.take(msg(0, 3)) == CdcRx::Took::Taken);
    CHECK(rx.take(msg(1, 4)) == CdcRx::Took::Taken);
    CHECK(rx.take(msg(0xFFFF, 2)) == CdcRx::Took::Old);
    CHECK(rx.peer().prod.count == 4);
    CdcTx tx;
    uint16_t last = 0;
    for (int i = 0; i < 70000; ++i)
        last = tx.next();
    CHECK(last == uint16_t(70000));
}

TEST_CASE("smcr CDC sequence: each flagged urgent byte counts once") {
    CdcRx rx;
    rx.take(msg(1, 10));
    CHECK(rx.urg_count() == 0);
    rx.take(msg(2, 11, kUrgPresent));
    CHECK(rx.urg_count() == 1);
    CHECK(rx.urg_mark().count == 11); // just after the urgent byte
    CHECK(rx.peer().urg_count == 1);
    rx.take(msg(2, 11, kUrgPresent)); // the same message again
    CHECK(rx.urg_count() == 1);
    rx.take(msg(1, 10, kUrgPresent)); // an old one: dropped, not counted
    CHECK(rx.urg_count() == 1);
    rx.take(msg(3, 20)); // a window update after it: no new mark
    CHECK(rx.urg_count() == 1);
    CHECK(rx.urg_mark().count == 11);
    rx.take(msg(4, 25, kUrgPresent | kUrgPending));
    CHECK(rx.urg_count() == 2);
    CHECK(rx.urg_mark().count == 25);
    rx.take(msg(5, 25, kUrgPresent)); // the flag, but nothing produced: no byte to mark
    CHECK(rx.urg_count() == 2);
    CdcRx first;
    first.take(msg(1, 0, kUrgPresent)); // nothing produced yet
    CHECK(first.urg_count() == 0);
}

TEST_CASE("smcr CDC sequence: a failover replay is set aside, whatever its number") {
    CdcRx rx;
    rx.take(msg(5, 50));
    CHECK(rx.take(msg(9, 90, kFailoverValidation)) == CdcRx::Took::Replay);
    CHECK(rx.take(msg(1, 10, kFailoverValidation)) == CdcRx::Took::Replay);
    CHECK(rx.peer().prod.count == 50);
    CHECK(rx.last_seqno() == 5);
}
