// KafkaCommitTracker: the commit never passes a record that is not settled,
// and names where the next owner's attempt-log window starts (the first
// entry of any record from the committed offset on).
#include <doctest/doctest.h>

#include "supervisor/broker/kafka_commit_tracker.h"

namespace pillbox::broker {
namespace {

// The partition's attempt log as a worker knows it: `entries` of
// (record offset, log offset), each a start.
PartitionAttempts log_of(std::int64_t committed, std::int64_t log_end,
                         const std::vector<std::pair<std::int64_t, std::int64_t>>& entries) {
  PartitionAttempts a;
  a.partition = 0;
  a.committed = committed;
  a.log_end = log_end;
  for (const auto& [offset, log_offset] : entries) a.add(attempt_start(0, offset, 1, "w", 0), log_offset);
  return a;
}

TEST_CASE("kafka commit: nothing read, nothing to commit; all settled, past the last read") {
  KafkaCommitTracker t(10);
  const PartitionAttempts none = log_of(10, 100, {});
  CHECK_FALSE(t.commit(none).has_value());
  CHECK(t.committable() == 10);
  t.read(10);
  t.read(11);
  t.settled(11);
  auto c = t.commit(none);
  REQUIRE(c.has_value());
  CHECK(c->offset == 10);  // 10 is not settled
  CHECK(c->log_from == 100);
  CHECK_FALSE(t.commit(none).has_value());  // nothing moved
  t.settled(10);
  c = t.commit(none);
  REQUIRE(c.has_value());
  CHECK(c->offset == 12);
  CHECK(t.settled_beyond() == 0);
}

TEST_CASE("kafka commit: a held record keeps the commit; records behind it settle; its entries bound the window") {
  KafkaCommitTracker t(-1001);
  std::vector<std::pair<std::int64_t, std::int64_t>> entries = {{5, 40}};
  t.read(5);  // no commit yet: reading starts where the first record is
  for (std::int64_t o = 6; o < 10; ++o) {
    t.read(o);
    entries.emplace_back(o, 41 + o);
    t.settled(o);
  }
  auto c = t.commit(log_of(0, 51, entries));
  REQUIRE(c.has_value());
  CHECK(c->offset == 5);
  CHECK(c->log_from == 40);
  CHECK(t.settled_beyond() == 4);
  entries.emplace_back(5, 60);  // its later entries do not move the window
  CHECK_FALSE(t.commit(log_of(0, 61, entries)).has_value());
  t.settled(5);
  c = t.commit(log_of(0, 61, entries));
  REQUIRE(c.has_value());
  CHECK(c->offset == 10);
  CHECK(c->log_from == 61);  // the log's end as known: no record from 10 on has entries
}

TEST_CASE("kafka commit: entries read at assign of records not read yet keep the window open") {
  // The previous owner settled 3 and 4 (a held 2 before them) and died.
  const PartitionAttempts read = log_of(2, 90, {{2, 70}, {3, 72}, {4, 75}});
  KafkaCommitTracker t(2);
  t.read(2);
  auto c = t.commit(read);
  REQUIRE(c.has_value());
  CHECK(c->offset == 2);
  CHECK(c->log_from == 70);
  t.settled(2);
  c = t.commit(read);
  REQUIRE(c.has_value());
  CHECK(c->offset == 3);
  CHECK(c->log_from == 72);  // 3's and 4's settled entries: the next owner must see them
  t.read(3);
  t.settled(3);
  t.read(4);
  t.settled(4);
  c = t.commit(read);
  REQUIRE(c.has_value());
  CHECK(c->offset == 5);
  CHECK(c->log_from == 90);
}

TEST_CASE("kafka commit: offsets with gaps (compaction, transaction markers) and repeated reads") {
  KafkaCommitTracker t(0);
  const PartitionAttempts none = log_of(0, 0, {});
  t.read(0);
  t.read(3);
  t.read(3);  // the fetcher handed it twice: one record
  t.read(1);  // older than what was read: ignored
  t.settled(0);
  auto c = t.commit(none);
  REQUIRE(c.has_value());
  CHECK(c->offset == 3);
  t.settled(3);
  c = t.commit(none);
  REQUIRE(c.has_value());
  CHECK(c->offset == 4);
}

}  // namespace
}  // namespace pillbox::broker
