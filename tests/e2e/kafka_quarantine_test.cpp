// The fleet's quarantine on Kafka (quarantine list/show/stats/export --kafka
// BROKERS --topic T) against librdkafka's mock cluster (kafka_mock.h): the
// letters a signing worker wrote to T.dlq are the records, newest first,
// with the same JSON as the other fleets' and their Kafka part; a letter
// written again for the same record is a copy, left out and said; a forged
// letter (no valid signature) shows as such and never hides the signed one
// behind it; a listing reads T.dlq without a consumer group, so nothing is
// committed; wrong ids and missing topics are said.
// What operators do (discard, allow, reproduce's verdict) is kept in
// T.dlq.state, a compare and set that loses no change to writers that race.
// serve --kafka answers what the CLI prints, and its discard is kept.
#include <doctest/doctest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <thread>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "supervisor/broker/fleet_state_log.h"
#include "supervisor/broker/kafka_partition_reader.h"
#include "supervisor/broker/kafka_state_log.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/console_client.h"
#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/support.h"
#include "tests/e2e/task_program.h"

using json = nlohmann::json;

namespace {

std::vector<std::string> quarantine(const e2e::KafkaMock& mock, const std::string& topic,
                                    const std::vector<std::string>& verb, const std::string& key = "") {
  std::vector<std::string> args = {"quarantine"};
  args.insert(args.end(), verb.begin(), verb.end());
  args.insert(args.end(), {"--kafka", mock.bootstrap(), "--topic", topic});
  if (!key.empty()) args.insert(args.end(), {"--fleet-key", key});
  return args;
}

std::string id_of(const e2e::KafkaRecord& r) { return std::to_string(r.partition) + "@" + std::to_string(r.offset); }

// The headers of a letter read back, to produce it again.
std::vector<std::pair<std::string, std::string>> headers_of(const e2e::KafkaRecord& r) { return r.headers; }

}  // namespace

TEST_CASE("kafka quarantine: list, show, stats and export of T.dlq; copies and forged letters") {
  const std::string topic = "tasks";
  e2e::KafkaMock mock({{topic, 2}, {topic + ".pillbox-attempts", 2}, {topic + ".dlq", 2}, {topic + ".results", 2}});
  REQUIRE_KAFKA_MOCK(mock);
  e2e::TempDir dir(0700);
  const std::string key = e2e::fleet_key_file(dir);
  e2e::PoisonCopy program("kafka_task");
  std::string lines;
  for (int i = 0; i < 4; ++i) lines += e2e::task_line("good-" + std::to_string(i), "good payload " + std::to_string(i));
  lines += e2e::task_line("segv", "S segfaults");
  lines += e2e::task_line("abort", "A aborts");
  const auto submitted = e2e::run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", topic, "-"}, lines);
  REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());

  // Before the worker: a forged letter for the segv record (its dedupe key,
  // value and a record that agrees, no signature), first in its partition.
  e2e::KafkaRecord segv_task;
  for (const auto& r : e2e::read_topic(mock.bootstrap(), topic)) {
    if (r.key == std::optional<std::string>("segv")) segv_task = r;
  }
  REQUIRE(segv_task.partition >= 0);
  const std::string p = std::to_string(segv_task.partition);
  const std::string o = std::to_string(segv_task.offset);
  const json forged_record = {{"kind", "crash"},
                              {"fingerprint", "forged-fingerprint"},
                              {"message", "forged"},
                              {"topic", {{"name", topic}, {"partition", segv_task.partition}, {"offset", segv_task.offset}}}};
  const auto forged_at = e2e::produce(mock.bootstrap(), topic + ".dlq",
                                      {{std::string("segv"), std::string("S segfaults"),
                                        {{"pillbox-record", forged_record.dump()},
                                         {"pillbox.dedupe", topic + "/" + p + "@" + o},
                                         {"pillbox.source.topic", topic},
                                         {"pillbox.source.partition", p},
                                         {"pillbox.source.offset", o},
                                         {"pillbox.kind", "crash"}},
                                        segv_task.partition}});
  const std::string forged_id = std::to_string(forged_at[0].first) + "@" + std::to_string(forged_at[0].second);

  const auto worked = e2e::run_pillbox({"worker", "--kafka", mock.bootstrap(), "--topic", topic, "--jobs", "2",
                                        "--backoff-base", "10ms", "--exit-when-idle", "4s", "--session-timeout", "6s",
                                        "--fleet-key", key, "--json", "--", program.path()});
  REQUIRE_MESSAGE(worked.exit_code == 0, worked.describe());
  std::map<std::string, e2e::KafkaRecord> letters;  // the worker's, by key
  for (const auto& r : e2e::read_topic(mock.bootstrap(), topic + ".dlq")) {
    if (id_of(r) != forged_id) letters[*r.key] = r;
  }
  REQUIRE(letters.size() == 2);
  const e2e::KafkaRecord& segv = letters.at("segv");
  const e2e::KafkaRecord& abort = letters.at("abort");
  CHECK(segv.partition == segv_task.partition);
  CHECK(segv.offset > forged_at[0].second);  // behind the forged one
  // A copy of the worker's abort letter (as a worker killed before its
  // settle entry writes), then a foreign letter with a bad signature.
  const auto copy_at = e2e::produce(mock.bootstrap(), topic + ".dlq",
                                    {{abort.key, abort.value, headers_of(abort), abort.partition}});
  const std::string copy_id = std::to_string(copy_at[0].first) + "@" + std::to_string(copy_at[0].second);
  const auto foreign_at = e2e::produce(mock.bootstrap(), topic + ".dlq",
                                       {{std::string("foreign"), std::string("who knows"), {{"pillbox-sig", "AAAA"}}, 0}});
  const std::string foreign_id = std::to_string(foreign_at[0].first) + "@" + std::to_string(foreign_at[0].second);

  // list --json: every record once, newest first, the copy left out and said.
  const auto list = e2e::run_pillbox(quarantine(mock, topic, {"list", "--json"}, key));
  INFO(list.describe());
  REQUIRE(list.exit_code == 0);
  REQUIRE(list.records.size() == 4);
  CHECK(list.records[0].at("id") == foreign_id);
  CHECK(list.records[3].at("id") == forged_id);
  std::set<std::string> middle = {list.records[1].at("id"), list.records[2].at("id")};
  CHECK(middle == std::set<std::string>{id_of(segv), id_of(abort)});
  CHECK(list.err.find("1 letter of tasks.dlq left out: dead-lettered again, each a copy of an earlier record") !=
        std::string::npos);
  std::map<std::string, json> by_id;
  for (const json& r : list.records) by_id[r.at("id")] = r;
  const json& listed_segv = by_id.at(id_of(segv));
  CHECK(listed_segv.at("key") == "segv");
  CHECK(listed_segv.at("kind") == "crash");
  CHECK(listed_segv.at("signature") == "valid");
  CHECK(listed_segv.at("status") == "quarantined");
  CHECK(listed_segv.at("payload_size") == 11);
  CHECK(listed_segv.at("store").get<std::string>().find("tasks.dlq") != std::string::npos);
  CHECK(listed_segv.at("signal") == "SIGSEGV");
  CHECK(listed_segv.at("source") == "worker");
  CHECK(by_id.at(id_of(abort)).at("signature") == "valid");
  CHECK(by_id.at(id_of(abort)).at("kind") == "crash");
  const json& listed_forged = by_id.at(forged_id);
  CHECK(listed_forged.at("signature") == "missing");
  CHECK(listed_forged.at("fingerprint") == "forged-fingerprint");  // its claim, shown as one
  const json& listed_foreign = by_id.at(foreign_id);
  CHECK(listed_foreign.at("signature") == "bad");
  CHECK(listed_foreign.at("kind") == "protocol-error");
  CHECK(listed_foreign.at("message").get<std::string>().find("not a dead letter pillbox wrote") != std::string::npos);

  // Without the key: unchecked, and the unsigned forged letter still does
  // not hide the signed one.
  const auto unkeyed = e2e::run_pillbox(quarantine(mock, topic, {"list", "--json"}));
  REQUIRE_MESSAGE(unkeyed.exit_code == 0, unkeyed.describe());
  REQUIRE(unkeyed.records.size() == 4);
  for (const json& r : unkeyed.records) CHECK(r.at("signature") == "unchecked");

  // show --json: the record and its Kafka part.
  const auto shown = e2e::run_pillbox(quarantine(mock, topic, {"show", id_of(segv), "--json"}, key));
  REQUIRE_MESSAGE(shown.exit_code == 0, shown.describe());
  REQUIRE(shown.records.size() == 1);
  const json& s = shown.records[0];
  CHECK(s.at("id") == id_of(segv));
  CHECK(s.at("signature") == "valid");
  CHECK(s.at("kafka").at("topic") == "tasks.dlq");
  CHECK(s.at("kafka").at("partition") == segv.partition);
  CHECK(s.at("kafka").at("offset") == segv.offset);
  CHECK(s.at("kafka").at("dedupe") == topic + "/" + p + "@" + o);
  CHECK(s.at("kafka").at("source").at("topic") == topic);
  CHECK(s.at("kafka").at("source").at("offset") == segv_task.offset);
  CHECK(s.at("kafka").at("key_null") == false);
  CHECK(s.at("audit").at(0).at("action") == "quarantined");
  CHECK(s.at("audit").at(0).at("actor").get<std::string>().rfind("worker ", 0) == 0);
  CHECK(s.at("attempt_history").size() >= 2);  // the worker's deliveries, as its record says
  const auto text = e2e::run_pillbox(quarantine(mock, topic, {"show", id_of(segv)}, key));
  CHECK_MESSAGE(text.exit_code == 0, text.describe());
  CHECK(text.out.find("kafka: tasks.dlq partition " + std::to_string(segv.partition)) != std::string::npos);
  CHECK(text.out.find("S segfaults") != std::string::npos);  // the payload's preview

  // stats: the worker's crashes, the forged claim and the foreign letter.
  const auto stats = e2e::run_pillbox(quarantine(mock, topic, {"stats", "--json"}, key));
  REQUIRE_MESSAGE(stats.exit_code == 0, stats.describe());
  std::int64_t total = 0;
  for (const json& g : stats.records) total += g.at("records").get<std::int64_t>();
  CHECK(total == 4);

  // export: the exact bytes.
  const std::string out = dir.path() + "/payload";
  const auto exported = e2e::run_pillbox(quarantine(mock, topic, {"export", id_of(abort), "-o", out}, key));
  CHECK_MESSAGE(exported.exit_code == 0, exported.describe());
  CHECK(e2e::read_file(out) == "A aborts");

  // What is not a record, or not there.
  const auto copy = e2e::run_pillbox(quarantine(mock, topic, {"show", copy_id}, key));
  CHECK(copy.exit_code == 2);
  CHECK(copy.err.find(copy_id + " is a copy of record " + id_of(abort)) != std::string::npos);
  const auto missing = e2e::run_pillbox(quarantine(mock, topic, {"show", "0@999"}));
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("no record 0@999") != std::string::npos);
  const auto partition = e2e::run_pillbox(quarantine(mock, topic, {"show", "7@0"}));
  CHECK(partition.exit_code == 2);
  CHECK(partition.err.find("has 2 partitions") != std::string::npos);
  const auto bad_id = e2e::run_pillbox(quarantine(mock, topic, {"show", "42"}));
  CHECK(bad_id.exit_code == 2);
  CHECK(bad_id.err.find("PARTITION@OFFSET") != std::string::npos);
  const auto nosuch = e2e::run_pillbox(quarantine(mock, "nosuch", {"list"}));
  CHECK(nosuch.exit_code == 3);
  CHECK(nosuch.err.find("has no topic nosuch.dlq") != std::string::npos);
  CHECK(e2e::topic_partitions(mock.bootstrap(), "nosuch.dlq") == 0);  // looked for, not made
  const auto unreachable =
      e2e::run_pillbox({"quarantine", "list", "--kafka", e2e::closed_kafka_bootstrap(), "--topic", topic});
  CHECK(unreachable.exit_code == 3);
  CHECK(unreachable.err.find("cannot reach Kafka") != std::string::npos);

  // A listing commits nothing: no group has an offset of T.dlq.
  const auto progress = e2e::group_progress(mock.bootstrap(), topic + ".dlq", "pillbox-reader");
  for (const auto& [part, committed] : progress.committed) CHECK(committed == -1001);

  // Operators' state: T.dlq.state must exist, and says how it is made.
  const auto no_log = e2e::run_pillbox(quarantine(mock, topic, {"discard", id_of(segv), "--reason", "known"}, key));
  CHECK(no_log.exit_code == 3);
  CHECK_MESSAGE(no_log.err.find("has no topic tasks.dlq.state") != std::string::npos, no_log.describe());
  CHECK(no_log.err.find("retention.ms=-1") != std::string::npos);
  CHECK(e2e::topic_partitions(mock.bootstrap(), "tasks.dlq.state") == 0);  // not made by naming it
  mock.create_topic("tasks.dlq.state", 1);

  const auto discarded =
      e2e::run_pillbox(quarantine(mock, topic, {"discard", id_of(abort), "--reason", "known: the abort"}, key));
  CHECK_MESSAGE(discarded.exit_code == 0, discarded.describe());
  const auto again = e2e::run_pillbox(quarantine(mock, topic, {"discard", id_of(abort), "--reason", "again"}, key));
  CHECK(again.out.find("already discarded") != std::string::npos);
  const auto only = e2e::run_pillbox(quarantine(mock, topic, {"list", "--json", "--status", "discarded"}, key));
  REQUIRE_MESSAGE(only.records.size() == 1, only.describe());
  CHECK(only.records[0].at("id") == id_of(abort));
  const auto shown_discarded = e2e::run_pillbox(quarantine(mock, topic, {"show", id_of(abort), "--json"}, key));
  REQUIRE(shown_discarded.records.size() == 1);
  const json& audit = shown_discarded.records[0].at("audit");
  REQUIRE(audit.size() == 2);
  CHECK(audit[1].at("action") == "discarded");
  CHECK(audit[1].at("detail").get<std::string>().find("known: the abort") != std::string::npos);
  const auto copy_discard = e2e::run_pillbox(quarantine(mock, topic, {"discard", copy_id, "--reason", "x"}, key));
  CHECK(copy_discard.exit_code == 2);
  CHECK(copy_discard.err.find("is a copy of record") != std::string::npos);

  // allow: signed with the fleet key.
  const auto allowed = e2e::run_pillbox(quarantine(mock, topic, {"allow", forged_id, "--note", "looked at it"}, key));
  CHECK_MESSAGE(allowed.exit_code == 0, allowed.describe());
  const auto shown_allowed = e2e::run_pillbox(quarantine(mock, topic, {"show", forged_id, "--json"}, key));
  REQUIRE(shown_allowed.records.size() == 1);
  CHECK(shown_allowed.records[0].at("status") == "allowed");

  // reproduce runs the worker's signed record here and keeps its verdict;
  // the forged one is not run.
  const auto reproduced = e2e::run_pillbox({"reproduce", id_of(segv), "--runs", "2", "--kafka", mock.bootstrap(),
                                            "--topic", topic, "--fleet-key", key, "--json"});
  CHECK_MESSAGE(reproduced.exit_code == 0, reproduced.describe());
  const auto after = e2e::run_pillbox(quarantine(mock, topic, {"show", id_of(segv), "--json"}, key));
  REQUIRE(after.records.size() == 1);
  CHECK(after.records[0].at("reproduce").at("verdict") == "reliable");
  CHECK(after.records[0].at("status") == "quarantined");
  const auto unsigned_run = e2e::run_pillbox({"reproduce", forged_id, "--kafka", mock.bootstrap(), "--topic", topic,
                                              "--fleet-key", key});
  CHECK(unsigned_run.exit_code == 2);
  CHECK_MESSAGE(unsigned_run.err.find("record " + forged_id + " is unsigned") != std::string::npos,
                unsigned_run.describe());

  // A record of T.dlq.state that is not pillbox's is left out and said.
  e2e::produce(mock.bootstrap(), "tasks.dlq.state", {{std::nullopt, std::string("{\"record\": 1}"), {}, 0}});
  const auto with_junk = e2e::run_pillbox(quarantine(mock, topic, {"list", "--json"}, key));
  CHECK(with_junk.exit_code == 0);
  CHECK(with_junk.err.find("1 record of tasks.dlq.state left out: not a state pillbox writes") != std::string::npos);

  // Three writers, four changes each, on one record: every change kept.
  constexpr int kWriters = 3;
  constexpr int kChanges = 4;
  std::atomic<int> failed{0};
  std::vector<std::thread> writers;
  const auto bootstrap = pillbox::broker::parse_kafka_bootstrap(mock.bootstrap());
  REQUIRE(bootstrap.has_value());
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      auto reader = pillbox::broker::KafkaPartitionReader::open(*bootstrap, "pillbox-test");
      if (!reader) return void(++failed);
      pillbox::broker::KafkaStateLog access(**reader, topic);
      pillbox::broker::FleetStateLog log(access);
      for (int i = 0; i < kChanges; ++i) {
        auto changed = log.change(id_of(segv), [&](pillbox::broker::FleetState& s) {
          s.audit.push_back({1, "writer " + std::to_string(w), "noted", std::to_string(i)});
          return pillbox::Status::ok();
        });
        if (!changed) {
          MESSAGE(changed.error());
          ++failed;
        }
      }
    });
  }
  for (auto& t : writers) t.join();
  CHECK(failed == 0);
  const auto raced = e2e::run_pillbox(quarantine(mock, topic, {"show", id_of(segv), "--json"}, key));
  REQUIRE(raced.records.size() == 1);
  std::size_t noted = 0;
  for (const json& a : raced.records[0].at("audit")) noted += a.at("action") == "noted" ? 1 : 0;
  CHECK(noted == kWriters * kChanges);

  // The console: the API answers what the CLI prints; a discard needs the
  // token and is kept in T.dlq.state.
  {
    e2e::Serve serve({"--kafka", mock.bootstrap(), "--topic", topic, "--fleet-key", key, "--listen", "127.0.0.1:0",
                      "--token-file", dir.path() + "/serve.token"});
    REQUIRE_MESSAGE(serve.url().rfind("http://127.0.0.1:", 0) == 0, serve.err());
    httplib::Client http("127.0.0.1", serve.port());
    http.set_read_timeout(60, 0);
    const auto cli_list = e2e::run_pillbox(quarantine(mock, topic, {"list", "--json"}, key));
    const json listed = e2e::body_of(http.Get("/api/records"));
    CHECK(listed["records"] == json(cli_list.records));
    const auto cli_show = e2e::run_pillbox(quarantine(mock, topic, {"show", id_of(segv), "--json"}, key));
    const json shown = e2e::body_of(http.Get("/api/records/" + id_of(segv)));
    CHECK(json::array({shown}) == json(cli_show.records));
    CHECK(shown["kafka"]["dedupe"] == topic + "/" + p + "@" + o);
    const auto bad = http.Get("/api/records/42");
    REQUIRE(bad);
    CHECK(bad->status == 400);
    const auto none = http.Get("/api/records/0@999");
    REQUIRE(none);
    CHECK(none->status == 404);
    const std::string path = "/api/records/" + id_of(segv) + "/discard";
    const auto refused = http.Post(path, R"({"reason": "no token"})", "application/json");
    REQUIRE(refused);
    CHECK(refused->status == 401);
    httplib::Headers auth = {{"Authorization", "Bearer " + e2e::token_of(serve)}};
    const auto done = http.Post(path, auth, R"({"reason": "from the console"})", "application/json");
    REQUIRE(done);
    CHECK_MESSAGE(done->status == 200, done->body);
    const auto after_web = e2e::run_pillbox(quarantine(mock, topic, {"show", id_of(segv), "--json"}, key));
    REQUIRE(after_web.records.size() == 1);
    CHECK(after_web.records[0].at("status") == "discarded");
    CHECK(serve.stop(SIGTERM) == 0);
  }
}
