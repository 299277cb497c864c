// pillbox worker --kafka --metrics against librdkafka's mock cluster: the
// lag of each assigned partition in /metrics (promtool accepts the text)
// while a record waits for its retries and the records behind it settle,
// 0 once everything is settled; the worker says that the partition held
// back by the retrying record is behind, and when it caught up, and says
// nothing of the kind for the partition beside it nor in a healthy run.
#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/live_run.h"
#include "tests/e2e/metrics_scrape.h"
#include "tests/e2e/support.h"

using e2e::sample;
using namespace std::chrono_literals;

namespace {

// Scrapes until `done` holds of the text (every 100 ms, at most `limit`);
// the last text read.
std::string scrape_until(int port, const std::function<bool(const std::string&)>& done,
                         std::chrono::milliseconds limit) {
  std::string body;
  const bool held = e2e::eventually(
      [&] {
        body = e2e::scrape(port).body;
        return done(body);
      },
      limit, 100ms);
  INFO(body);
  REQUIRE(held);
  return body;
}

std::string series(const std::string& name, const std::string& topic, int partition) {
  return name + "{topic=\"" + topic + "\",partition=\"" + std::to_string(partition) + "\"}";
}

std::vector<e2e::KafkaOutgoing> records(int partition, const std::string& prefix, int n) {
  std::vector<e2e::KafkaOutgoing> out;
  for (int i = 0; i < n; ++i) {
    e2e::KafkaOutgoing r;
    r.key = prefix + std::to_string(i);
    r.value = "good payload " + std::to_string(i);
    r.partition = partition;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

TEST_CASE("kafka worker --metrics: lag while a record waits for its retries, 0 at the end; behind, then caught up") {
  const std::string topic = "lagged";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 2));
  REQUIRE_KAFKA_MOCK(mock);
  e2e::TempDir markers(01777);
  // Partition 0: a record refused three times (three failures, three
  // fingerprints: retried, never poison), then 10 good ones behind it;
  // partition 1: 10 good ones, produced between them (the worker takes the
  // oldest record first: partition 1 is not left waiting for partition 0).
  e2e::KafkaOutgoing waits;
  waits.key = "waits";
  waits.value = "W refused three times";
  waits.partition = 0;
  e2e::produce(mock.bootstrap(), topic, {waits});
  e2e::produce(mock.bootstrap(), topic, records(1, "one-", 10));
  e2e::produce(mock.bootstrap(), topic, records(0, "zero-", 10));

  // Its three retries wait up to 10 s, 20 s, 40 s (full jitter): held far
  // longer than --behind-after 3s but for odds of about 1 in 1 000. (A
  // worker's first record takes a second or more to settle: the first
  // child, the first writes to each topic.)
  e2e::LiveRun run({"worker", "--kafka", mock.bootstrap(), "--topic", topic, "--jobs", "2", "--max-attempts", "4",
                    "--backoff-base", "10s", "--behind-after", "3s", "--metrics", "127.0.0.1:0", "--exit-when-idle",
                    "5s", "--session-timeout", "6s", "--quiet", "--writable", markers.path(), "--",
                    e2e::fixture("poison_corpus"), markers.path()});
  const int port = e2e::metrics_port(run);
  INFO(run.err_seen());
  REQUIRE(port > 0);

  // While it waits: its partition's commit stays before it, the 10 behind
  // it settled and not committable, the lag all 11; partition 1 done.
  std::string body = scrape_until(
      port,
      [&](const std::string& text) {
        return sample(text, series("pillbox_kafka_partition_settled_uncommitted_records", topic, 0)) == 10 &&
               sample(text, series("pillbox_kafka_partition_behind", topic, 0)) == 1 &&
               sample(text, series("pillbox_kafka_partition_lag_records", topic, 1)) == 0;
      },
      60s);
  {
    INFO(body);
    CHECK(sample(body, series("pillbox_kafka_partition_lag_records", topic, 0)) == 11);
    CHECK(sample(body, series("pillbox_kafka_partition_held_records", topic, 0)) == 1);
    CHECK(sample(body, series("pillbox_kafka_partition_behind", topic, 1)) == 0);
    e2e::check_with_promtool(body);
  }

  // It runs a fourth time and succeeds: nothing left behind.
  body = scrape_until(
      port,
      [&](const std::string& text) {
        return sample(text, series("pillbox_kafka_partition_lag_records", topic, 0)) == 0 &&
               sample(text, series("pillbox_kafka_partition_lag_records", topic, 1)) == 0 &&
               sample(text, series("pillbox_kafka_partition_behind", topic, 0)) == 0;
      },
      120s);
  {
    INFO(body);
    CHECK(sample(body, series("pillbox_kafka_partition_settled_uncommitted_records", topic, 0)) == 0);
    CHECK(sample(body, series("pillbox_kafka_partition_held_records", topic, 0)) == 0);
    e2e::check_with_promtool(body);
  }

  REQUIRE(run.wait() == 0);
  const std::string& err = run.err_seen();
  // Said when it began (a reminder only every 30 s), and when it ended.
  const std::size_t behind = err.find("pillbox worker: partition 0 is behind: its commit has waited at offset 0");
  REQUIRE(behind != std::string::npos);
  CHECK(err.find("record 0@0 waits for its retry", behind) != std::string::npos);
  CHECK(err.find("pillbox worker: partition 0 caught up", behind) != std::string::npos);
  CHECK(err.find("partition 1 is behind") == std::string::npos);
  const auto progress = e2e::group_progress(mock.bootstrap(), topic, "pillbox");
  CHECK(progress.committed.at(0) == 11);
  CHECK(progress.committed.at(1) == 10);
}

TEST_CASE("kafka worker: a healthy run is never said to be behind, its lag falls to 0") {
  const std::string topic = "healthy";
  e2e::KafkaMock mock(e2e::kafka_worker_topics(topic, 2));
  REQUIRE_KAFKA_MOCK(mock);
  // Interleaved: the worker takes the oldest record first, so both
  // partitions move (one waiting for all of the other would be behind).
  std::vector<e2e::KafkaOutgoing> both;
  const auto zero = records(0, "zero-", 100);
  const auto one = records(1, "one-", 100);
  for (std::size_t i = 0; i < zero.size(); ++i) {
    both.push_back(zero[i]);
    both.push_back(one[i]);
  }
  e2e::produce(mock.bootstrap(), topic, both);
  e2e::TempDir markers(01777);
  // 200 records at 2 at a time: seconds of lag > 0, all of them with the
  // commit moving and the lag falling.
  e2e::LiveRun run({"worker", "--kafka", mock.bootstrap(), "--topic", topic, "--jobs", "2", "--behind-after", "2s",
                    "--metrics", "127.0.0.1:0", "--exit-when-idle", "3s", "--session-timeout", "6s", "--quiet",
                    "--writable", markers.path(), "--", e2e::fixture("poison_corpus"), markers.path()});
  const int port = e2e::metrics_port(run);
  INFO(run.err_seen());
  REQUIRE(port > 0);
  bool saw_lag = false;
  scrape_until(
      port,
      [&](const std::string& text) {
        const double lag0 = sample(text, series("pillbox_kafka_partition_lag_records", topic, 0));
        const double lag1 = sample(text, series("pillbox_kafka_partition_lag_records", topic, 1));
        if (lag0 > 0 || lag1 > 0) saw_lag = true;
        return lag0 == 0 && lag1 == 0;
      },
      120s);
  CHECK(saw_lag);
  REQUIRE(run.wait() == 0);
  CHECK(run.err_seen().find("is behind") == std::string::npos);
  CHECK(run.err_seen().find("caught up") == std::string::npos);
}
