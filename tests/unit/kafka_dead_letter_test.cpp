// A dead letter on Kafka as pillbox writes and reads it
// (supervisor/broker/kafka_dead_letter.h): the original's key, value and
// headers go on exact (bytes, nulls, repeats), to its partition of T.dlq;
// what a producer to T named like pillbox's is carried renamed, never read
// as pillbox's; pillbox's part is bounded; the signature covers all of it;
// and a letter someone else wrote reads as unreadable, never thrown.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kafka_fixture.h"
#include "shared/base64.h"
#include "shared/child_streams.h"
#include "shared/sha256.h"
#include "supervisor/broker/kafka_dead_letter.h"
#include "supervisor/broker/kafka_record_fit.h"

using namespace pillbox;
using namespace pillbox::broker;
using namespace kafka_fixture;
using json = nlohmann::json;

namespace {

std::size_t headers_bytes(const KafkaHeaders& headers) {
  std::size_t n = 0;
  for (const auto& [name, value] : headers) n += name.size() + (value ? value->size() : 0);
  return n;
}

KafkaMessage signed_letter(const KafkaMessage& m = original()) {
  return as_read(kafka_dead_letter(m, record_of(m), &fleet_key()), 7);
}

}  // namespace

TEST_CASE("kafka dead letter: the original goes on exact, to its partition of T.dlq, and reads back whole") {
  const KafkaMessage m = original();
  const KafkaOutgoing out = kafka_dead_letter(m, record_of(m), nullptr);
  CHECK(out.topic == "jobs.dlq");
  CHECK(out.partition == 3);  // co-partitioned: its copies land beside it
  CHECK(out.key == m.key);
  CHECK(out.value == m.value);
  // The original's headers first, in order, repeats and nulls kept; those
  // named like pillbox's renamed.
  const KafkaHeaders carried(out.headers.begin(), out.headers.begin() + 8);
  const KafkaHeaders expected = {{"tenant", std::string("acme")},
                                 {"trace", std::nullopt},
                                 {"tag", std::string("a")},
                                 {"pillbox.original.pillbox-record", std::string(R"({"kind":"ok"})")},
                                 {"tag", std::string("b")},
                                 {"pillbox.original.pillbox.dedupe", std::string("jobs/0@0")},
                                 {"pillbox.original.pillbox-sig", std::string(64, 'f')},
                                 {"bin", std::string("\x00\xff", 2)}};
  CHECK(carried == expected);
  // Unsigned without a key: no pillbox-sig of its own.
  CHECK(header(KafkaHeaders(out.headers.begin() + 8, out.headers.end()), "pillbox-sig") == "<absent>");
  // Kafka Connect's context, under pillbox's names.
  CHECK(header(out.headers, "pillbox.dedupe") == "jobs/3@41");
  CHECK(header(out.headers, "pillbox.source.topic") == "jobs");
  CHECK(header(out.headers, "pillbox.source.partition") == "3");
  CHECK(header(out.headers, "pillbox.source.offset") == "41");
  CHECK(header(out.headers, "pillbox.kind") == "crash");
  CHECK(header(out.headers, "pillbox.fingerprint") == "pb1-crash");
  CHECK(header(out.headers, "pillbox.attempts") == "3");
  CHECK(header(out.headers, "pillbox.message") == "SIGSEGV in parse");
  CHECK(header(out.headers, "pillbox.reason") == "crashed 3 times alike");
  CHECK(header(out.headers, "pillbox.stderr") == std::string("boom\x00\xfe", 6));
  CHECK(header(out.headers, "pillbox.handler") == "echo");
  CHECK(header(out.headers, "pillbox.policy") == "exec@56fef913ecdf");
  CHECK(json::parse(header(out.headers, "pillbox.headers")) ==
        json{{"carried", 8}, {"renamed", 3}, {"dropped", 0},
             {"renamed_as", "named like pillbox's own: carried as pillbox.original.NAME"}});

  const KafkaDeadLetter d = read_kafka_dead_letter(as_read(out, 7));
  CHECK(d.unreadable.empty());
  CHECK(d.from_pillbox());
  CHECK(d.record == json::parse(record_of(m)));  // pillbox's record, not the one the original claimed
  CHECK(d.record.at("topic") == kafka_record_source(m, "pillbox"));
  CHECK(d.key == m.key);
  CHECK(d.value == m.value);
  CHECK(d.topic == "jobs.dlq");
  CHECK(d.partition == 3);
  CHECK(d.offset == 7);
  CHECK(d.source_topic == "jobs");
  CHECK(d.source_partition == 3);
  CHECK(d.source_offset == 41);
  CHECK(d.dedupe_key == "jobs/3@41");
  CHECK(d.kind == "crash");
  CHECK(d.attempts == 3);
  CHECK(d.stderr_tail == std::string("boom\x00\xfe", 6));
  CHECK(d.carried == expected);
  CHECK(!d.has_signature);
  CHECK(d.headers_note.at("renamed") == 3);
}

TEST_CASE("kafka dead letter: a null key and a null value stay null, apart from empty ones, and sign apart") {
  KafkaMessage null_both = original();
  null_both.key.reset();
  null_both.value.reset();
  null_both.headers = {{"h", std::nullopt}};
  const KafkaOutgoing out = kafka_dead_letter(null_both, record_of(null_both), &fleet_key());
  CHECK(!out.key.has_value());
  CHECK(!out.value.has_value());
  const KafkaMessage read = as_read(out, 0);
  const KafkaDeadLetter d = read_kafka_dead_letter(read);
  CHECK(d.unreadable.empty());
  CHECK(!d.key.has_value());
  CHECK(!d.value.has_value());
  CHECK(d.carried == KafkaHeaders{{"h", std::nullopt}});
  CHECK(kafka_dead_letter_signature(read, &fleet_key()) == Signature::kValid);
  // The same letter with an empty key, or an empty value, or the header's
  // value empty, is another letter: its signature does not pass.
  KafkaMessage empty_key = read;
  empty_key.key = "";
  KafkaMessage empty_value = read;
  empty_value.value = "";
  KafkaMessage empty_header = read;
  empty_header.headers.front().second = "";
  CHECK(kafka_dead_letter_signature(empty_key, &fleet_key()) == Signature::kBad);
  CHECK(kafka_dead_letter_signature(empty_value, &fleet_key()) == Signature::kBad);
  CHECK(kafka_dead_letter_signature(empty_header, &fleet_key()) == Signature::kBad);
}

TEST_CASE("kafka dead letter: its signature covers key, value and every header, in T.dlq; a change shows") {
  const KafkaMessage good = signed_letter();
  REQUIRE(kafka_dead_letter_signature(good, &fleet_key()) == Signature::kValid);
  CHECK(kafka_dead_letter_signature(good, nullptr) == Signature::kUnchecked);
  CHECK(read_kafka_dead_letter(good).has_signature);
  const FleetKey another(std::string(32, 'x'));
  CHECK(kafka_dead_letter_signature(good, &another) == Signature::kBad);

  auto set = [](KafkaMessage& m, const std::string& name, std::optional<std::string> value) {
    for (auto& [n, v] : m.headers) {
      if (n == name) {
        v = std::move(value);
        return;
      }
    }
    FAIL("no header " << name);
  };
  const std::vector<std::pair<const char*, std::function<void(KafkaMessage&)>>> changes = {
      {"value", [](KafkaMessage& m) { m.value->back() ^= 1; }},
      {"key", [](KafkaMessage& m) { m.key = "other"; }},
      {"key made null", [](KafkaMessage& m) { m.key.reset(); }},
      {"record", [&](KafkaMessage& m) { set(m, "pillbox-record", R"({"kind":"ok"})"); }},
      {"kind header", [&](KafkaMessage& m) { set(m, "pillbox.kind", "timeout"); }},
      {"dedupe", [&](KafkaMessage& m) { set(m, "pillbox.dedupe", "jobs/3@40"); }},
      {"a carried header", [&](KafkaMessage& m) { set(m, "tenant", "evil"); }},
      {"a carried header made null", [&](KafkaMessage& m) { set(m, "tenant", std::nullopt); }},
      {"a header added", [](KafkaMessage& m) { m.headers.insert(m.headers.begin(), {"x", std::string("1")}); }},
      {"a header removed", [](KafkaMessage& m) { m.headers.erase(m.headers.begin()); }},
      {"two headers swapped", [](KafkaMessage& m) { std::swap(m.headers[0], m.headers[2]); }},
      {"a second signature", [](KafkaMessage& m) { m.headers.push_back(m.headers.back()); }},
      {"copied to another topic", [](KafkaMessage& m) { m.topic = "other.dlq"; }},
  };
  for (const auto& change : changes) {
    KafkaMessage m = good;
    change.second(m);
    CHECK_MESSAGE(kafka_dead_letter_signature(m, &fleet_key()) == Signature::kBad, change.first);
  }
  KafkaMessage unsigned_letter = good;
  std::erase_if(unsigned_letter.headers, [](const auto& h) { return h.first == "pillbox-sig"; });
  CHECK(kafka_dead_letter_signature(unsigned_letter, &fleet_key()) == Signature::kMissing);
  // The partition is where the cluster put it, not the letter's claim.
  KafkaMessage moved = good;
  moved.partition = 0;
  moved.offset = 99;
  CHECK(kafka_dead_letter_signature(moved, &fleet_key()) == Signature::kValid);
}

TEST_CASE("kafka dead letter: pillbox's part is bounded, the original's headers too, and says what it left") {
  KafkaMessage m = original();
  m.headers.clear();
  for (int i = 100; i < 200; ++i) m.headers.emplace_back("h" + std::to_string(i), std::string(999, 'v'));
  Outcome long_one = segv();
  long_one.message = std::string(200'000, 'm');
  long_one.stderr_tail = std::string(kStderrTailBytes, 'e');
  const KafkaOutgoing out = kafka_dead_letter(m, record_of(m, 3, long_one), nullptr);
  // 65 headers of 1003 bytes fit in 64 KiB (65,536): the 66th does not,
  // nor any after it (what is carried is the original's first ones).
  const KafkaHeaders own(out.headers.begin() + 65, out.headers.end());
  CHECK(out.headers[64].first == "h164");
  CHECK(own.front().first == "pillbox-record");
  const json note = json::parse(header(out.headers, "pillbox.headers"));
  CHECK(note.at("carried") == 65);
  CHECK(note.at("dropped") == 35);
  CHECK(note.at("dropped_bytes") == 35 * 1003);
  CHECK(headers_bytes(KafkaHeaders(out.headers.begin(), out.headers.begin() + 65)) <= kMaxKafkaCarriedHeaders);
  CHECK(header(out.headers, "pillbox-record").size() <= kMaxKafkaRecordJson);
  const json record = json::parse(header(out.headers, "pillbox-record"));
  CHECK(record.at("kind") == "crash");  // cut in its details, not left out
  CHECK(record.at("cut").get<std::string>().find("to fit a Kafka record") == 0);
  CHECK(record.at("cut").get<std::string>().find("the stderr tail") != std::string::npos);
  // What the record lost, its context headers still say, bounded alike.
  CHECK(header(out.headers, "pillbox.stderr") == long_one.stderr_tail);
  CHECK(header(out.headers, "pillbox.message").size() == 4096);
  // pillbox's own part, whatever the task did: about 64 KiB at most.
  CHECK(headers_bytes(own) <= (64u << 10));
  CHECK(read_kafka_dead_letter(as_read(out, 0)).unreadable.empty());
}

TEST_CASE("kafka dead letter: one someone else wrote reads as what it is, never thrown") {
  auto read_with = [](KafkaHeaders headers) {
    KafkaMessage m;
    m.topic = "jobs.dlq";
    m.partition = 0;
    m.offset = 5;
    m.value = "P";
    m.headers = std::move(headers);
    return read_kafka_dead_letter(m);
  };
  SUBCASE("none of pillbox's headers: no record, no claims, nothing unreadable") {
    const KafkaDeadLetter d = read_with({{"tenant", std::string("acme")}});
    CHECK(!d.from_pillbox());
    CHECK(d.unreadable.empty());
    CHECK(d.dedupe_key.empty());
    CHECK(d.carried.size() == 1);
  }
  SUBCASE("a record that is not JSON, or too deep") {
    CHECK(read_with({{"pillbox-record", std::string("{not json")}}).unreadable.find("pillbox-record") == 0);
    CHECK(!read_with({{"pillbox-record", std::string("[1, 2]")}}).from_pillbox());
    const KafkaDeadLetter deep = read_with({{"pillbox-record", std::string(100, '[') + std::string(100, ']')}});
    CHECK(!deep.from_pillbox());
    CHECK(deep.unreadable.find("pillbox-record") == 0);
  }
  SUBCASE("an oversized record header is not parsed") {
    const std::string big = R"({"kind":"crash","pad":")" + std::string(kMaxKafkaRecordJson, 'x') + "\"}";
    const KafkaDeadLetter d = read_with({{"pillbox-record", big}});
    CHECK(!d.from_pillbox());
    CHECK(d.unreadable.find("over the " + std::to_string(kMaxKafkaRecordJson)) != std::string::npos);
  }
  SUBCASE("a null, a repeated, an unknown pillbox header, numbers pillbox does not write") {
    const KafkaDeadLetter d = read_with({{"pillbox.kind", std::nullopt},
                                         {"pillbox.fingerprint", std::string("pb1-a")},
                                         {"pillbox.fingerprint", std::string("pb1-b")},
                                         {"pillbox.secret", std::string("x")},
                                         {"pillbox.source.partition", std::string("03")},
                                         {"pillbox.source.offset", std::string("-1")},
                                         {"pillbox.attempts", std::string("99999999999999999999")}});
    CHECK(d.kind.empty());
    CHECK(d.fingerprint == "pb1-a");  // the first
    CHECK(d.source_partition == -1);
    CHECK(d.source_offset == -1);
    CHECK(d.attempts == -1);
    for (const char* said : {"pillbox.kind: null", "pillbox.fingerprint: given twice",
                             "pillbox.secret: named like pillbox's", "pillbox.source.partition: not a number",
                             "pillbox.source.offset: not a number", "pillbox.attempts: not a number"}) {
      CHECK_MESSAGE(d.unreadable.find(said) != std::string::npos, said);
    }
  }
  SUBCASE("a renamed header is the original's, whatever it says") {
    const KafkaDeadLetter d = read_with({{"pillbox.original.pillbox.kind", std::string("ok")}});
    CHECK(d.kind.empty());
    CHECK(d.unreadable.empty());
    CHECK(d.carried.size() == 1);
  }
}

TEST_CASE("kafka dead letter: a dedupe key that is not its source's is none") {
  const KafkaMessage m = original();
  const KafkaMessage good = as_read(kafka_dead_letter(m, record_of(m), nullptr), 7);
  REQUIRE(read_kafka_dead_letter(good).dedupe_key == "jobs/3@41");
  auto with = [&](const std::string& name, const std::string& value) {
    KafkaMessage changed = good;
    for (auto& [n, v] : changed.headers) {
      if (n == name) v = value;
    }
    return read_kafka_dead_letter(changed);
  };
  const KafkaDeadLetter wrong = with("pillbox.dedupe", "jobs/3@40");
  CHECK(wrong.dedupe_key.empty());
  CHECK(wrong.dedupe == "jobs/3@40");
  CHECK(wrong.unreadable.find("pillbox.dedupe is not the key of the source") != std::string::npos);
  // Headers and dedupe that agree, and a record that names another source.
  KafkaMessage other = original();
  other.offset = 40;
  const KafkaDeadLetter moved =
      with("pillbox-record", record_of(other));  // the record of offset 40, the headers of 41
  CHECK(moved.from_pillbox());
  CHECK(moved.dedupe_key.empty());
  CHECK(moved.unreadable.find("its record's `topic` names another source") != std::string::npos);
  // Context headers that name another source than the dedupe key.
  CHECK(with("pillbox.source.offset", "40").dedupe_key.empty());
  CHECK(with("pillbox.source.topic", "jobz").dedupe_key.empty());
}

TEST_CASE("kafka dead letter: one too large for a record goes without the value, and says what it was") {
  KafkaMessage m = original();
  // Within pillbox's part of the broker's limit: whole, it would be refused.
  m.value = std::string(kKafkaBrokerMessageMaxBytes - 1000, 'v');
  const std::string sha = sha256_hex(*m.value);
  const KafkaOutgoing out = kafka_dead_letter(m, record_of(m), &fleet_key());
  CHECK(kafka_record_bytes(out) <= kKafkaBrokerMessageMaxBytes);
  CHECK(out.value == std::optional<std::string>(""));
  CHECK(out.key == m.key);
  CHECK(header(out.headers, "pillbox.payload_omitted") == "true");
  CHECK(header(out.headers, "pillbox.payload_size") == std::to_string(m.value->size()));
  CHECK(header(out.headers, "pillbox.payload_sha256") == sha);
  const KafkaMessage read = as_read(out, 7);
  CHECK(kafka_dead_letter_signature(read, &fleet_key()) == Signature::kValid);  // signed as it went
  const KafkaDeadLetter d = read_kafka_dead_letter(read);
  CHECK(d.unreadable.empty());
  CHECK(d.payload_omitted);
  CHECK(d.payload_size == static_cast<std::int64_t>(m.value->size()));
  CHECK(d.payload_sha256 == sha);
  CHECK(d.record.value("payload_omitted", false));
  CHECK(d.record.value("payload_sha256", "") == sha);
  CHECK(d.record.value("payload_omitted_why", "").find("the original is in jobs partition 3 at offset 41") !=
        std::string::npos);

  // One that fits keeps its value, and says nothing of it.
  KafkaMessage fits = original();
  fits.value = std::string(kKafkaBrokerMessageMaxBytes - 200000, 'v');
  const KafkaOutgoing whole = kafka_dead_letter(fits, record_of(fits), &fleet_key());
  CHECK(whole.value == fits.value);
  CHECK(header(whole.headers, "pillbox.payload_omitted") == "<absent>");
  CHECK(!read_kafka_dead_letter(as_read(whole, 8)).payload_omitted);

  // A key near the limit (refused as too long, dead-lettered unrun): the
  // letter goes without its value and, still too large, without its key.
  KafkaMessage huge_key = original();
  huge_key.key = std::string(kKafkaBrokerMessageMaxBytes - 100, 'k');
  const std::string key_sha = sha256_hex(*huge_key.key);
  const KafkaOutgoing keyless = kafka_dead_letter(huge_key, record_of(huge_key), &fleet_key());
  CHECK(kafka_record_bytes(keyless) <= kKafkaBrokerMessageMaxBytes);
  CHECK_FALSE(keyless.key.has_value());
  CHECK(header(keyless.headers, "pillbox.key_omitted") == "true");
  CHECK(header(keyless.headers, "pillbox.key_size") == std::to_string(huge_key.key->size()));
  CHECK(header(keyless.headers, "pillbox.key_sha256") == key_sha);
  const KafkaMessage keyless_read = as_read(keyless, 10);
  CHECK(kafka_dead_letter_signature(keyless_read, &fleet_key()) == Signature::kValid);
  const KafkaDeadLetter k = read_kafka_dead_letter(keyless_read);
  CHECK(k.unreadable.empty());
  CHECK(k.record.value("key_omitted", false));
  CHECK(k.record.value("key_sha256", "") == key_sha);
  CHECK(k.record.value("key_omitted_why", "").find("the original is in jobs partition 3 at offset 41") !=
        std::string::npos);

  // A forged mark is noted, not believed.
  KafkaMessage forged = as_read(whole, 9);
  forged.headers.emplace_back("pillbox.payload_omitted", "yes");
  const KafkaDeadLetter f = read_kafka_dead_letter(forged);
  CHECK(!f.payload_omitted);
  CHECK(f.unreadable.find("pillbox.payload_omitted") != std::string::npos);
}
