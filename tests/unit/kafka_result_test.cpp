// An ok's result on Kafka (supervisor/broker/kafka_result.h): the
// original's key exact, the output as the value, the Redis fleet's result
// fields as headers (as RabbitMQ's result carries them), and where it came
// from, with the dedupe key a reader keeps one result by.
#include <doctest/doctest.h>

#include <string>

#include "kafka_fixture.h"
#include "shared/sha256.h"
#include "supervisor/broker/kafka_result.h"

using namespace pillbox;
using namespace pillbox::broker;
using namespace kafka_fixture;

namespace {

Outcome ok(std::string output) {
  Outcome o;
  o.kind = Kind::kOk;
  o.exit_code = 0;
  o.output = std::move(output);
  o.cpu_ms = 7;
  o.wall_ms = 9;
  o.max_rss_kb = 1234;
  return o;
}

}  // namespace

TEST_CASE("kafka result: key and output exact, the result fields and its source as headers") {
  const KafkaMessage m = original();
  const std::string output("out \x00\xff", 6);
  const auto out = kafka_result(worker_settings(), held(m, 2), m, ok(output));
  REQUIRE(out.has_value());
  CHECK(out->topic == "jobs.results");
  CHECK(out->partition == 3);
  CHECK(out->key == m.key);
  CHECK(out->value == output);
  const KafkaHeaders expected = {{"key", *m.key},
                                 {"verdict", "ok"},
                                 {"status", "ok"},
                                 {"kind", "ok"},
                                 {"entry", "3@41"},
                                 {"deliveries", "2"},
                                 {"attempts", "2"},
                                 {"worker", "host:1"},
                                 {"exit_code", "0"},
                                 {"cpu_ms", "7"},
                                 {"wall_ms", "9"},
                                 {"max_rss_kb", "1234"},
                                 {"pillbox.dedupe", "jobs/3@41"},
                                 {"pillbox.source.topic", "jobs"},
                                 {"pillbox.source.partition", "3"},
                                 {"pillbox.source.offset", "41"}};
  CHECK(out->headers == expected);  // the output is the value only, never a header too
}

TEST_CASE("kafka result: a null key stays null; an output over the bound is said, not kept, and never a tombstone") {
  KafkaMessage m = original();
  m.key.reset();
  WorkerSettings s = worker_settings();
  s.results_max_output = 4;
  const auto out = kafka_result(s, held(m), m, ok("12345"));
  REQUIRE(out.has_value());
  CHECK(!out->key.has_value());
  REQUIRE(out->value.has_value());  // null would delete the key's result on a compacted topic
  CHECK(out->value->empty());
  CHECK(header(out->headers, "key") == "message:0123456789abcdef");  // the key the task ran under
  CHECK(header(out->headers, "output_size") == "5");
  CHECK(header(out->headers, "output_sha256") == sha256_hex("12345"));
  CHECK(header(out->headers, "output_omitted").find("over --results-max-output 4") != std::string::npos);
  CHECK(header(out->headers, "pillbox.dedupe") == "jobs/3@41");
}

TEST_CASE("kafka result: none when the worker keeps none") {
  WorkerSettings s = worker_settings();
  s.results = false;
  const KafkaMessage m = original();
  CHECK(!kafka_result(s, held(m), m, ok("x")).has_value());
}
