// KafkaCommitTracker: the commit never passes a record that is not settled,
// and names where the next owner's attempt-log window starts.
#include <doctest/doctest.h>

#include "supervisor/broker/kafka_commit_tracker.h"

namespace pillbox::broker {
namespace {

TEST_CASE("kafka commit: nothing read, nothing to commit; all settled, past the last read") {
  KafkaCommitTracker t(10, 100);
  CHECK_FALSE(t.commit().has_value());
  CHECK(t.committable() == 10);
  t.read(10);
  t.read(11);
  t.settled(11);
  auto c = t.commit();
  REQUIRE(c.has_value());
  CHECK(c->offset == 10);  // 10 is not settled
  CHECK(c->log_from == 100);
  CHECK_FALSE(t.commit().has_value());  // nothing moved
  t.settled(10);
  c = t.commit();
  REQUIRE(c.has_value());
  CHECK(c->offset == 12);
  CHECK(t.settled_beyond() == 0);
}

TEST_CASE("kafka commit: a held record keeps the commit; records behind it settle; its log entries bound the window") {
  KafkaCommitTracker t(-1001, 0);
  t.read(5);  // no commit yet: reading starts where the first record is
  t.logged(5, 40);
  for (std::int64_t o = 6; o < 10; ++o) {
    t.read(o);
    t.logged(o, 41 + o);
    t.settled(o);
  }
  auto c = t.commit();
  REQUIRE(c.has_value());
  CHECK(c->offset == 5);
  CHECK(c->log_from == 40);
  CHECK(t.settled_beyond() == 4);
  t.logged(5, 60);  // its later entries do not move the window
  CHECK_FALSE(t.commit().has_value());
  t.settled(5);
  c = t.commit();
  REQUIRE(c.has_value());
  CHECK(c->offset == 10);
  CHECK(c->log_from == 61);  // the log's end as known: no record past 10 has entries
}

TEST_CASE("kafka commit: entries read at assign of records not read yet keep the window open") {
  // The previous owner settled 3 and 4 (a held 2 before them) and died.
  KafkaCommitTracker t(2, 90);
  t.logged(2, 70);
  t.logged(3, 72);
  t.logged(4, 75);
  t.read(2);
  auto c = t.commit();
  REQUIRE(c.has_value());
  CHECK(c->offset == 2);
  CHECK(c->log_from == 70);
  t.settled(2);
  c = t.commit();
  REQUIRE(c.has_value());
  CHECK(c->offset == 3);
  CHECK(c->log_from == 72);  // 3's and 4's settled entries: the next owner must see them
  t.read(3);
  t.settled(3);
  t.read(4);
  t.settled(4);
  c = t.commit();
  REQUIRE(c.has_value());
  CHECK(c->offset == 5);
  CHECK(c->log_from == 90);
}

TEST_CASE("kafka commit: offsets with gaps (compaction, transaction markers) and repeated reads") {
  KafkaCommitTracker t(0, 0);
  t.read(0);
  t.read(3);
  t.read(3);  // the fetcher handed it twice: one record
  t.read(1);  // older than what was read: ignored
  t.settled(0);
  auto c = t.commit();
  REQUIRE(c.has_value());
  CHECK(c->offset == 3);
  t.settled(3);
  c = t.commit();
  REQUIRE(c.has_value());
  CHECK(c->offset == 4);
}

}  // namespace
}  // namespace pillbox::broker
