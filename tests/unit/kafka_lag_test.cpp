// KafkaLagWatch: a partition is said to be behind once its commit has been
// held for --behind-after, or its lag has grown that long, once (a reminder
// every 10 x D), and caught up once the lag is 0; a worker that keeps up,
// its lag falling back and its commit moving, is never said to be behind.
#include <doctest/doctest.h>

#include "supervisor/broker/kafka_lag.h"

namespace pillbox::broker {
namespace {

using Clock = KafkaLagWatch::Clock;
using std::chrono::milliseconds;

KafkaPartitionLag sample(std::int32_t partition, std::int64_t end, std::int64_t committed) {
  KafkaPartitionLag p;
  p.partition = partition;
  p.end = end;
  p.committed = committed;
  p.lag = kafka_lag(end, committed, 0);
  return p;
}

// The notices of one sample of one partition.
std::vector<std::string> observe(KafkaLagWatch& w, KafkaPartitionLag p, Clock::time_point at, bool* behind = nullptr) {
  std::vector<KafkaPartitionLag> all{std::move(p)};
  auto said = w.observe(all, at);
  if (behind != nullptr) *behind = all[0].behind;
  return said;
}

TEST_CASE("kafka lag: end minus the committed offset, from the start when nothing is committed, 0 when unknown") {
  CHECK(kafka_lag(100, 40, 0) == 60);
  CHECK(kafka_lag(100, -1, 10) == 90);
  CHECK(kafka_lag(-1, 40, 0) == 0);
  CHECK(kafka_lag(40, 50, 0) == 0);  // a stale end: never negative
}

TEST_CASE("kafka lag: a commit held by a retrying record is behind after D, said once, caught up at lag 0") {
  KafkaLagWatch w(milliseconds(1000));
  const auto t0 = Clock::now();
  KafkaPartitionLag p = sample(2, 50, 10);
  p.held_by = "record 2@10 waits for its retry";
  bool behind = true;
  CHECK(observe(w, p, t0, &behind).empty());
  CHECK_FALSE(behind);
  CHECK(observe(w, p, t0 + milliseconds(900)).empty());
  const auto said = observe(w, p, t0 + milliseconds(1000), &behind);
  REQUIRE(said.size() == 1);
  CHECK(behind);
  CHECK(said[0].find("partition 2 is behind") == 0);
  CHECK(said[0].find("offset 10") != std::string::npos);
  CHECK(said[0].find("record 2@10 waits for its retry") != std::string::npos);
  CHECK(said[0].find("lag 40 records") != std::string::npos);
  // Not a line per sample: the next one in 10 x D.
  for (int i = 11; i < 100; ++i) CHECK(observe(w, p, t0 + milliseconds(100 * i)).empty());
  CHECK(observe(w, p, t0 + milliseconds(11000)).size() == 1);
  const auto done = observe(w, sample(2, 50, 50), t0 + milliseconds(12000), &behind);
  REQUIRE(done.size() == 1);
  CHECK(done[0].find("partition 2 caught up") == 0);
  CHECK_FALSE(behind);
}

TEST_CASE("kafka lag: a worker that keeps up is never behind; one whose lag grows is") {
  KafkaLagWatch w(milliseconds(1000));
  const auto t0 = Clock::now();
  // Records keep coming, the commit follows, the lag goes up and down.
  for (int i = 0; i < 100; ++i) {
    const std::int64_t end = 10 * i + 5;
    const std::int64_t committed = 10 * i - (i % 3);
    CHECK(observe(w, sample(0, end, committed), t0 + milliseconds(100 * i)).empty());
  }
  // The lag grows while the commit moves: behind once it has not fallen
  // back for D; the commit moving alone does not end it.
  KafkaLagWatch g(milliseconds(1000));
  std::size_t notices = 0;
  bool behind = false;
  for (int i = 0; i <= 20; ++i) notices += observe(g, sample(1, 100 + 20 * i, 10 * i), t0 + milliseconds(100 * i), &behind).size();
  CHECK(notices == 1);
  CHECK(behind);
  // It falls back to where it stood: caught up D later, not at once.
  CHECK(observe(g, sample(1, 600, 590), t0 + milliseconds(2200), &behind).empty());
  CHECK(behind);
  const auto done = observe(g, sample(1, 600, 590), t0 + milliseconds(3100), &behind);
  REQUIRE(done.size() == 1);
  CHECK_FALSE(behind);
}

TEST_CASE("kafka lag: a backlog found when the end becomes known is not growth; its draining is not behind") {
  KafkaLagWatch w(milliseconds(1000));
  const auto t0 = Clock::now();
  bool behind = true;
  KafkaPartitionLag unknown = sample(4, -1, -1);
  CHECK(unknown.lag == 0);
  CHECK(observe(w, unknown, t0, &behind).empty());
  CHECK_FALSE(behind);
  for (int i = 1; i <= 50; ++i) {
    CHECK(observe(w, sample(4, 1000, 10 * i), t0 + milliseconds(100 * i), &behind).empty());
    CHECK_FALSE(behind);
  }
}

TEST_CASE("kafka lag: a partition taken away is forgotten: given again, it starts afresh") {
  KafkaLagWatch w(milliseconds(1000));
  const auto t0 = Clock::now();
  observe(w, sample(3, 50, 10), t0);
  CHECK(observe(w, sample(3, 50, 10), t0 + milliseconds(1000)).size() == 1);
  std::vector<KafkaPartitionLag> none;
  CHECK(w.observe(none, t0 + milliseconds(1100)).empty());
  bool behind = true;
  CHECK(observe(w, sample(3, 50, 10), t0 + milliseconds(1200), &behind).empty());
  CHECK_FALSE(behind);
}

}  // namespace
}  // namespace pillbox::broker
