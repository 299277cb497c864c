// Kafka's dead letters as the fleet's quarantine shows them
// (supervisor/broker/kafka_fleet_record.h): the same record the Redis
// fleet's dead letter reads back as, for the same task and crash; ids
// "P@O" of T.dlq; a letter pillbox did not write is still a record that
// says so; and the copies rule: one record per dedupe key, value and
// signature class, where a forged letter never hides a signed one.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kafka_fixture.h"
#include "shared/sha256.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/broker/kafka_fleet_record.h"
#include "supervisor/broker/kafka_record_fit.h"
#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/store/quarantine_json.h"

using namespace pillbox;
using namespace pillbox::broker;
using namespace kafka_fixture;
using json = nlohmann::json;

namespace {

// A letter of T.dlq read back at `offset`, and what the quarantine makes of it.
struct Read {
  KafkaDeadLetter letter;
  Signature signature;
  FleetRecord record;
};
Read read(const KafkaMessage& m, const FleetKey* key) {
  Read r{read_kafka_dead_letter(m), kafka_dead_letter_signature(m, key), {}};
  r.record = kafka_fleet_record(r.letter, r.signature);
  return r;
}

KafkaMessage letter(const KafkaMessage& original, std::int64_t offset, const FleetKey* key, std::int64_t delivery = 3) {
  return as_read(kafka_dead_letter(original, record_of(original, delivery), key), offset);
}

// Which of `letters` (in T.dlq order) are copies, as the reader with `key` finds.
std::vector<std::optional<std::size_t>> copies(const std::vector<KafkaMessage>& letters, const FleetKey* key) {
  std::vector<std::string> keys;
  for (const KafkaMessage& m : letters) {
    const Read r = read(m, key);
    keys.push_back(kafka_copy_key(r.letter, r.signature));
  }
  return kafka_copies(keys);
}

using Copies = std::vector<std::optional<std::size_t>>;

// A letter forged by someone who can produce to T.dlq: a real one's
// headers and value, with a record of their own, unsigned.
KafkaMessage forged(const KafkaMessage& real, const std::string& kind) {
  KafkaMessage m = real;
  std::erase_if(m.headers, [](const auto& h) { return h.first == "pillbox-sig"; });
  for (auto& [name, value] : m.headers) {
    if (name == "pillbox-record") {
      json j = json::parse(*value);
      j["kind"] = kind;
      value = j.dump();
    }
  }
  return m;
}

}  // namespace

TEST_CASE("kafka fleet record: the same task's dead letter shows as the Redis fleet's does") {
  KafkaMessage m = original();
  const WorkerSettings settings = worker_settings();
  HeldEntry e = held(m);
  e.history.recorded.push_back(recorded_outcome(1, "host:2", kNowMs - 50, segv(), true, false));
  e.history.lost.push_back(2);
  const std::string record = dead_letter_record(settings, e, segv(), "crashed 3 times alike", kNowMs, "topic",
                                                kafka_record_source(m, "pillbox"));

  // The Redis fleet's, for the same entry at the same time.
  WorkerSettings redis_settings = settings;
  redis_settings.keys.dlq = "jobs:dlq";
  const FleetRecord redis = parse_dead_letter(std::to_string(kNowMs) + "-0",
                                              dead_letter_fields(redis_settings, e, segv(), "crashed 3 times alike", kNowMs));
  const FleetRecord kafka = read(as_read(kafka_dead_letter(m, record, &fleet_key()), 12), &fleet_key()).record;

  CHECK(kafka.id == "3@12");
  CHECK(kafka.signature == Signature::kValid);
  // list --json and show --json's record part: the same but for the id.
  CHECK(record_list_json("ID", kafka.record, "where") == record_list_json("ID", redis.record, "where"));
  CHECK(full_record_json("ID", kafka.record, "where", json::array(), {}) ==
        full_record_json("ID", redis.record, "where", json::array(), {}));
  CHECK(kafka.record.created_at == kNowMs);
  CHECK(kafka.reason == redis.reason);
  CHECK(kafka.deliveries == redis.deliveries);
  CHECK(kafka.deliveries == 3);
  REQUIRE(kafka.attempts.size() == redis.attempts.size());
  for (std::size_t i = 0; i < kafka.attempts.size(); ++i) {
    CHECK(kafka.attempts[i].n == redis.attempts[i].n);
    CHECK(kafka.attempts[i].kind == redis.attempts[i].kind);
    CHECK(kafka.attempts[i].worker == redis.attempts[i].worker);
    CHECK(kafka.attempts[i].charged == redis.attempts[i].charged);
    CHECK(kafka.attempts[i].ended_at == redis.attempts[i].ended_at);
  }
  CHECK(kafka.payload == *m.value);
  REQUIRE(checked_payload(kafka).has_value());  // its record's sha256 is the value's
  // Where it came from, in the fields the quarantine's audit line reads.
  CHECK(kafka.stream == "jobs");
  CHECK(kafka.group == "pillbox");
  CHECK(kafka.source_entry == "3@41");
  // The key as the record says it (bytes that are not UTF-8 replaced, as on
  // Redis); the letter's own key is the exact one.
  CHECK(kafka.record.entry.key == redis.record.entry.key);
  CHECK(kafka.record.entry.stderr_tail == segv().stderr_tail);
  // show --json's "kafka": what only Kafka says of it.
  CHECK(kafka.broker.at("topic") == "jobs.dlq");
  CHECK(kafka.broker.at("partition") == 3);
  CHECK(kafka.broker.at("offset") == 12);
  CHECK(kafka.broker.at("source") == json{{"topic", "jobs"}, {"partition", 3}, {"offset", 41}});
  CHECK(kafka.broker.at("dedupe") == "jobs/3@41");
  CHECK(kafka.broker.at("key_null") == false);
  CHECK(kafka.broker.at("value_null") == false);
  CHECK(kafka.broker.at("headers").size() == 8);
  CHECK(kafka.broker.at("headers").at(1) == json{{"name", "trace"}, {"value", nullptr}});
  CHECK(kafka.broker.at("headers").at(7) == json{{"name", "bin"}, {"value_b64", "AP8="}});
  CHECK(kafka.broker.at("headers_note").at("renamed") == 3);
  CHECK(!kafka.broker.contains("unreadable"));
  // Operators may run it: signed and checked.
  CHECK(check_signed(kafka, false));
}

TEST_CASE("kafka fleet record: a letter without its value says its size and SHA-256, and where the original is") {
  KafkaMessage m = original();
  m.value = std::string(kKafkaBrokerMessageMaxBytes - 1000, 'v');
  const FleetRecord r = read(letter(m, 12, &fleet_key()), &fleet_key()).record;
  CHECK(r.signature == Signature::kValid);
  CHECK(r.payload_omitted);
  CHECK(r.payload.empty());
  CHECK(r.record.entry.payload_size == static_cast<std::int64_t>(m.value->size()));
  CHECK(r.record.entry.payload_sha256 == sha256_hex(*m.value));
  CHECK(r.broker.at("payload_omitted") == true);
  const auto payload = checked_payload(r);
  REQUIRE(!payload.has_value());
  CHECK(payload.error().find("the original is in jobs partition 3 at offset 41") != std::string::npos);
}

TEST_CASE("kafka fleet record: a letter pillbox did not write is a record that says so") {
  KafkaMessage m;
  m.topic = "jobs.dlq";
  m.partition = 1;
  m.offset = 9;
  m.value = "P";
  m.timestamp_ms = kNowMs;
  const FleetRecord foreign = read(m, &fleet_key()).record;
  CHECK(foreign.id == "1@9");
  CHECK(foreign.record.entry.kind == "protocol-error");
  CHECK(!foreign.record.entry.fingerprint.empty());
  CHECK(foreign.record.entry.message.find("not a dead letter pillbox wrote") == 0);
  CHECK(foreign.record.entry.payload_sha256 == sha256_hex("P"));
  CHECK(foreign.record.created_at == kNowMs);  // the letter's own timestamp
  CHECK(foreign.signature == Signature::kMissing);
  CHECK(!check_signed(foreign, false));

  // Context headers without a record: their claims, said to be only that.
  m.headers = {{"pillbox.kind", std::string("timeout")}, {"pillbox.fingerprint", std::string("pb1-t")},
               {"pillbox.message", std::string("took too long")}, {"pillbox.attempts", std::string("4")},
               {"pillbox-record", std::string("{broken")}};
  const FleetRecord claims = read(m, nullptr).record;
  CHECK(claims.record.entry.kind == "timeout");
  CHECK(claims.record.entry.fingerprint == "pb1-t");
  CHECK(claims.deliveries == 4);
  CHECK(claims.record.entry.message.find("took too long") != std::string::npos);
  CHECK(claims.record.entry.message.find("pillbox-record") != std::string::npos);
  CHECK(claims.broker.at("unreadable").get<std::string>().find("pillbox-record") == 0);

  // Bytes that are not UTF-8 anywhere a forger can put them: show --json
  // prints them replaced, never throws.
  m.key = std::string("k\xff", 2);
  m.headers = {{"pillbox.kind", std::string("crash\xfe")}, {"pillbox.stderr", std::string("tail \x00\xfe")},
               {"pillbox.message", std::string("m\xfe")}, {"\xfe", std::string("\xfe")}};
  auto shown = [&] {
    const FleetRecord hostile = read(m, nullptr).record;
    json full = full_record_json("ID", hostile.record, "where", json::array(), {});
    full["kafka"] = hostile.broker;
    return full.dump(-1, ' ', false, json::error_handler_t::replace) +
           record_list_json("ID", hostile.record, "where").dump(-1, ' ', false, json::error_handler_t::replace);
  };
  CHECK_NOTHROW((void)shown());  // the headers' claims
  m.headers.emplace_back("pillbox-record", std::string(R"({"kind":"crash","message":"\u0000"})"));
  CHECK_NOTHROW((void)shown());  // a record's, with the raw key
}

TEST_CASE("kafka fleet record: ids are P@O of T.dlq, one text per record") {
  CHECK(parse_kafka_record_id("0@42").value() == "0@42");
  CHECK(parse_kafka_record_id("007@0042").value() == "7@42");
  for (const char* bad : {"42", "a@1", "-1@2", "1@", "@1", "1@2@3", "1@-2", "1@ 2", "9999999999@1",
                          "1@9999999999999999999"}) {
    const auto id = parse_kafka_record_id(bad);
    CHECK_MESSAGE(!id.has_value(), bad);
    if (!id) CHECK(id.error_code() == ErrorCode::kUsage);
  }
}

TEST_CASE("kafka copies: a dead letter produced again is a copy of the first, whatever its record says") {
  const KafkaMessage m = original();
  // A worker killed between the dead letter and its settle entry: the
  // record runs again, and is dead-lettered again at delivery 4.
  const std::vector<KafkaMessage> twice = {letter(m, 5, &fleet_key(), 3), letter(m, 8, &fleet_key(), 4)};
  CHECK(copies(twice, &fleet_key()) == Copies{std::nullopt, 0});
  CHECK(copies(twice, nullptr) == Copies{std::nullopt, 0});
  // Unsigned fleet (no key anywhere): the same.
  CHECK(copies({letter(m, 5, nullptr), letter(m, 8, nullptr)}, nullptr) == Copies{std::nullopt, 0});
  // Another record of T (another offset), or the same offset of another
  // partition: not a copy.
  KafkaMessage next = m;
  next.offset = 42;
  KafkaMessage beside = m;
  beside.partition = 2;
  CHECK(copies({letter(m, 5, &fleet_key()), letter(next, 6, &fleet_key()), letter(beside, 7, &fleet_key())},
               &fleet_key()) == Copies{std::nullopt, std::nullopt, std::nullopt});
  // A null value is not an empty one.
  KafkaMessage null_value = m;
  null_value.value.reset();
  KafkaMessage empty_value = m;
  empty_value.value = "";
  CHECK(copies({letter(null_value, 5, nullptr), letter(empty_value, 6, nullptr)}, nullptr) ==
        Copies{std::nullopt, std::nullopt});
}

TEST_CASE("kafka copies: a forged letter never hides a signed one, whichever comes first") {
  const KafkaMessage m = original();
  const KafkaMessage real = letter(m, 5, &fleet_key());
  const KafkaMessage fake = forged(real, "ok");  // its dedupe key and value, unsigned
  REQUIRE(read_kafka_dead_letter(fake).dedupe_key == "jobs/3@41");

  SUBCASE("with the fleet key: the real one is the record, the forgery one of its own, marked") {
    CHECK(copies({fake, real}, &fleet_key()) == Copies{std::nullopt, std::nullopt});
    CHECK(copies({real, fake}, &fleet_key()) == Copies{std::nullopt, std::nullopt});
    CHECK(read(fake, &fleet_key()).record.signature == Signature::kMissing);
    CHECK(read(real, &fleet_key()).record.signature == Signature::kValid);
    // A real copy after the forgery is still a copy of the real one.
    CHECK(copies({fake, real, letter(m, 9, &fleet_key(), 4)}, &fleet_key()) == Copies{std::nullopt, std::nullopt, 1});
    // A letter with a `sig` that does not verify (a real one tampered
    // with) neither.
    KafkaMessage tampered = real;
    for (auto& [name, value] : tampered.headers) {
      if (name == "pillbox.kind") value = "ok";
    }
    CHECK(copies({tampered, real}, &fleet_key()) == Copies{std::nullopt, std::nullopt});
    CHECK(read(tampered, &fleet_key()).record.signature == Signature::kBad);
  }
  SUBCASE("without the key: an unsigned forgery hides nothing; a forged sig may, until the key is given") {
    CHECK(copies({fake, real}, nullptr) == Copies{std::nullopt, std::nullopt});
    KafkaMessage fake_sig = fake;
    fake_sig.headers.emplace_back("pillbox-sig", std::string(64, '0'));
    CHECK(copies({fake_sig, real}, nullptr) == Copies{std::nullopt, 0});
    CHECK(copies({fake_sig, real}, &fleet_key()) == Copies{std::nullopt, std::nullopt});
    // And nothing that was not checked runs on its word.
    CHECK(!check_signed(read(fake_sig, nullptr).record, false));
  }
  SUBCASE("another value under the same dedupe key is not a copy") {
    KafkaMessage other = real;
    other.value = "another payload";
    CHECK(copies({other, real}, nullptr) == Copies{std::nullopt, std::nullopt});
  }
  SUBCASE("a letter whose dedupe key is not its source's is never a copy, and nothing is a copy of it") {
    KafkaMessage wrong = fake;
    for (auto& [name, value] : wrong.headers) {
      if (name == "pillbox.source.offset") value = "40";
    }
    CHECK(copies({wrong, fake}, nullptr) == Copies{std::nullopt, std::nullopt});
    CHECK(copies({fake, wrong}, nullptr) == Copies{std::nullopt, std::nullopt});
  }
}
