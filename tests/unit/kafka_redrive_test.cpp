// What a Kafka replay republishes (supervisor/broker/kafka_redrive.h): the
// dead letter's key, value and the original's headers, never pillbox's
// (its record, signature, context, nor what it carried renamed), plus
// pillbox.replay naming the record; a lease that ran out, or that ends
// later than any replay writes one, holds nothing;
// a letter is an attempt only of a record whose state names its dedupe key.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "supervisor/broker/kafka_redrive.h"

using namespace pillbox::broker;

TEST_CASE("kafka replay: the republished record keeps the original's key, value and headers, not pillbox's") {
  KafkaMessage letter;
  letter.topic = "tasks.dlq";
  letter.key = std::nullopt;
  letter.value = std::string("\0payload", 8);
  letter.headers = {{"trace-id", std::string("abc")},
                    {"pillbox-record", std::string("{}")},
                    {"pillbox-sig", std::string("AAAA")},
                    {"pillbox.dedupe", std::string("tasks/0@1")},
                    {"pillbox.original.pillbox.replay", std::string("0@0")},
                    {"empty", std::nullopt}};
  const KafkaOutgoing out = kafka_redrive_record(letter, "tasks", "1@7");
  CHECK(out.topic == "tasks");
  CHECK(out.partition == -1);  // by its key, as other producers'
  CHECK_FALSE(out.key.has_value());
  CHECK(out.value == letter.value);
  const KafkaHeaders expected = {
      {"trace-id", std::string("abc")}, {"empty", std::nullopt}, {"pillbox.replay", std::string("1@7")}};
  CHECK(out.headers == expected);
}

TEST_CASE("kafka replay: a lease holds until it runs out; an attempt needs the state to name it") {
  FleetState s;
  s.lease_by = "ops (replay 1)";
  s.lease_until = 1000;
  CHECK(kafka_lease_holder(s, 999) == "ops (replay 1)");
  CHECK(kafka_lease_holder(s, 1000).empty());
  // One that ends later than a replay writes one (a lease on, and as much
  // again for clocks) is forged: it holds nothing, whatever it says.
  s.lease_until = 1000 + 2 * kKafkaReplayLease.count();
  CHECK(kafka_lease_holder(s, 1000) == "ops (replay 1)");
  s.lease_until = 1001 + 2 * kKafkaReplayLease.count();
  CHECK(kafka_lease_holder(s, 1000).empty());
  s.lease_until = INT64_MAX;
  CHECK(kafka_lease_holder(s, 1000).empty());
  s.lease_until = 1000;
  const auto round = parse_state(state_json(s));
  REQUIRE(round.has_value());
  CHECK(round->lease_by == s.lease_by);
  CHECK(round->lease_until == 1000);

  CHECK_FALSE(kafka_names_redrive(s, "tasks/0@5"));
  CHECK_FALSE(kafka_names_redrive(s, ""));
  s.waiting_entry = "tasks/0@5";
  CHECK(kafka_names_redrive(s, "tasks/0@5"));
  s.waiting_entry.clear();
  FleetAttempt redrive;
  redrive.entry = "tasks/1@9";
  s.redrives.push_back(redrive);
  CHECK(kafka_names_redrive(s, "tasks/1@9"));
  CHECK_FALSE(kafka_names_redrive(s, "tasks/1@10"));
}
