// pillbox worker --amqp against a real rabbitmq-server the test starts
// itself (rabbit_server.h; one broker for every case here, since a node
// takes seconds to start: one test case, a function per case): ok results
// go to a message's reply_to with its correlation id, else to NAME.results;
// a payload that crashes the same way twice is retried through a delay
// queue (holding no message meanwhile) and then dead-lettered into the
// stream NAME.dlq with the record an operator acts on, signed; a worker
// SIGKILLed mid-task leaves the message to the broker, whose count the next
// worker reads; nothing stays unacknowledged. And the quarantine verbs
// read those dead letters back (list, show, stats, export --amqp).
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_entry.h"
#include "supervisor/broker/amqp_state_log.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/broker/fleet_key.h"
#include "tests/e2e/background.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using pillbox::broker::AmqpConnection;
using pillbox::broker::AmqpMessage;
using pillbox::broker::AmqpOutgoing;
using pillbox::broker::AmqpValue;
using pillbox::broker::find_field;
using e2e::run_pillbox;

using e2e::drain;
using e2e::header_text;
namespace {

// Every dead letter in the stream NAME.dlq, read by offset from the first
// (a stream is read by a consume; `expected` says when all are in).
std::vector<AmqpMessage> dead_letters(const e2e::RabbitServer& server, const std::string& dlq, std::size_t expected) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(c.consume(dlq, 100, {{"x-stream-offset", std::string("first")}}).is_ok());
  std::vector<AmqpMessage> out;
  while (out.size() < expected) {
    auto m = c.next(std::chrono::seconds(30));
    REQUIRE_MESSAGE(m.has_value(), m.error());
    REQUIRE_MESSAGE(m->has_value(), "only " << out.size() << " of " << expected << " dead letters in " << dlq);
    REQUIRE(c.ack((**m).delivery_tag).is_ok());
    out.push_back(std::move(**m));
  }
  return out;
}

// The broker's word on queues: name -> {messages, messages_unacknowledged, type}.
json queues(const e2e::RabbitServer& server) {
  const auto r = server.ctl({"list_queues", "name", "type", "messages", "messages_unacknowledged", "--formatter",
                             "json", "--quiet"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json by_name = json::object();
  for (const json& q : json::parse(r.out)) by_name[q.at("name").get<std::string>()] = q;
  return by_name;
}

std::vector<std::string> worker_args(const e2e::RabbitServer& server, const std::string& queue,
                                     const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"worker", "--amqp", server.url(), "--queue", queue};
  if (std::find(extra.begin(), extra.end(), "--backoff-base") == extra.end()) {
    args.insert(args.end(), {"--backoff-base", "10ms"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--", e2e::fixture("mixed_poison")});
  return args;
}

// Good payloads: ok, their results where RabbitMQ users look; an RPC
// request gets its reply with its correlation id, even with --no-results.
void results_where_users_look(e2e::RabbitServer& server) {
  const auto submitted = run_pillbox({"submit", "--amqp", server.url(), "--queue", "jobs", "-"},
                                     e2e::task_line("good-1", "payload one") + e2e::task_line("good-2", "payload two"));
  REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());
  auto c = e2e::amqp_connect(server);
  REQUIRE(c.declare_queue("replies", {}).has_value());
  AmqpOutgoing rpc;
  rpc.body = "rpc payload";
  rpc.message_id = "rpc-1";
  rpc.correlation_id = "req-42";
  rpc.reply_to = "replies";
  rpc.headers = {{"key", std::string("rpc")}};
  REQUIRE(c.publish("jobs", rpc).is_ok());

  const auto r = run_pillbox(worker_args(server, "jobs", {"--jobs", "2", "--exit-when-idle", "1s", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 3);
  for (const json& v : r.records) CHECK(v.value("verdict", "") == "ok");
  CHECK(r.err.find("3 messages received, 3 ok") != std::string::npos);
  CHECK(r.err.find("pillbox-test") == std::string::npos);  // never the password

  const auto results = drain(c, "jobs.results");
  REQUIRE(results.size() == 2);
  std::map<std::string, std::string> output_of;
  for (const AmqpMessage& m : results) output_of[header_text(m, "key")] = m.body;
  CHECK(output_of["good-1"] == "payload one");
  CHECK(output_of["good-2"] == "payload two");
  CHECK(header_text(results[0], "status") == "ok");
  const auto replies = drain(c, "replies");
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].correlation_id == "req-42");
  CHECK(replies[0].body == "rpc payload");
  CHECK(header_text(replies[0], "message_id") == "rpc-1");
  const json q = queues(server);
  CHECK(q["jobs"].value("messages", -1) == 0);
  CHECK(e2e::eventually([&] { return queues(server)["jobs"].value("messages_unacknowledged", -1) == 0; },
                        std::chrono::seconds(20), std::chrono::milliseconds(200)));
  CHECK(q["jobs.results"].value("type", "") == "quorum");
}

// A payload that crashes: its first failure waits in a delay queue (the
// worker holds nothing meanwhile), its second, alike, dead-letters it with
// the record and both deliveries, signed with the fleet key.
void poison_dead_lettered(e2e::RabbitServer& server) {
  e2e::TempDir keys(0700);
  const std::string key = e2e::fleet_key_file(keys);
  const auto submitted = run_pillbox({"submit", "--amqp", server.url(), "--queue", "crashes", "-"},
                                     e2e::task_line("segv", "S crashes") + e2e::task_line("fine", "fine"));
  REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());

  const auto r = run_pillbox(worker_args(server, "crashes", {"--jobs", "2", "--exit-when-idle", "1500ms", "--json",
                                                             "--backoff-base", "300ms", "--fleet-key", key}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  std::map<std::string, std::vector<std::string>> verdicts;
  for (const json& v : r.records) verdicts[v.value("key", "")].push_back(v.value("verdict", ""));
  CHECK(verdicts["fine"] == std::vector<std::string>{"ok"});
  // Its retry left this worker (released to the delay queue), and came back.
  CHECK(verdicts["segv"] == std::vector<std::string>{"released", "dead-lettered"});
  CHECK(r.err.find("1 retries (through delay queues)") != std::string::npos);

  const auto dl = dead_letters(server, "crashes.dlq", 1);
  const auto read = pillbox::broker::read_dead_letter(dl[0]);
  CHECK(read.unreadable.empty());
  CHECK(read.key == "segv");
  CHECK(read.payload == "S crashes");
  CHECK(read.record.value("kind", "") == "crash");
  CHECK(read.record.value("deliveries", 0) == 2);
  CHECK(read.record.at("queue").value("name", "") == "crashes");
  const json& attempts = read.record.at("attempts_history");
  REQUIRE(attempts.size() == 2);
  CHECK(attempts[0].value("fingerprint", "") == attempts[1].value("fingerprint", ""));
  CHECK(attempts[0].value("delivery", 0) == 1);
  CHECK(attempts[1].value("delivery", 0) == 2);
  const pillbox::broker::FleetKey fleet(std::string(64, 'k'));
  // What was signed and the headers, shown if it does not verify.
  std::string signed_text;
  for (const auto& field : pillbox::broker::dead_letter_signed_fields(dl[0])) {
    signed_text += field.first + " (" + std::to_string(field.second.size()) + " bytes): " +
                   field.second.substr(0, 3000) + "\n";
  }
  for (const auto& f : dl[0].headers) signed_text += "header " + f.name + " kind " + f.value.kind + "\n";
  INFO(signed_text);
  CHECK(fleet.verify("crashes.dlq", pillbox::broker::dead_letter_signed_fields(dl[0])) ==
        pillbox::broker::Signature::kValid);

  // The retry waited in a delay queue the broker keeps (its backoff, up to
  // 300 ms with jitter, rounded up to a power of two: `show` below names
  // the one it expired from), now empty; nothing is left unacknowledged.
  // The worker declared every delay queue a retry can need at its start
  // (--backoff-max's default 60 s: 1 ms to 65536 ms), not when one first
  // needed it: RabbitMQ 3.10.8 does not bring back a queue made just
  // before it was killed.
  const json q = queues(server);
  std::vector<int> delay_queues;
  for (const auto& [name, info] : q.items()) {
    if (name.rfind("crashes.delay.", 0) != 0) continue;
    delay_queues.push_back(std::stoi(name.substr(std::string("crashes.delay.").size())));
    CHECK(info.value("messages", -1) == 0);
  }
  std::sort(delay_queues.begin(), delay_queues.end());
  std::vector<int> every_bucket;
  for (int ms = 1; ms <= 65536; ms *= 2) every_bucket.push_back(ms);
  CHECK(delay_queues == every_bucket);
  CHECK(q["crashes"].value("messages", -1) == 0);
  CHECK(e2e::eventually([&] { return queues(server)["crashes"].value("messages_unacknowledged", -1) == 0; },
                        std::chrono::seconds(20), std::chrono::milliseconds(200)));
}

// A worker SIGKILLed mid-task: the broker takes the message back and counts
// it; the next worker runs it as delivery 2, delivery 1 never reported back.
void killed_worker_counts(e2e::RabbitServer& server) {
  const auto submitted =
      run_pillbox({"submit", "--amqp", server.url(), "--queue", "spins", "-"}, e2e::task_line("spin", "L spins"));
  REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());
  {
    e2e::Background a(e2e::pillbox_binary(),
                      worker_args(server, "spins", {"--jobs", "1", "--timeout", "60s", "--cpu", "60s"}));
    REQUIRE_MESSAGE(e2e::eventually([&] { return queues(server)["spins"].value("messages_unacknowledged", 0) == 1; }),
                    a.err());
    a.signal(SIGKILL);
    a.wait();
  }
  const auto b = run_pillbox(worker_args(server, "spins", {"--timeout", "300ms", "--max-attempts", "2",
                                                           "--exit-when-idle", "1500ms", "--json"}));
  INFO(b.describe());
  CHECK(b.exit_code == 0);
  const auto dl = dead_letters(server, "spins.dlq", 1);
  const auto read = pillbox::broker::read_dead_letter(dl[0]);
  CHECK(read.record.value("kind", "") == "wall-timeout");
  // Delivery 1 (killed) never reported back; 2 and 3 timed out alike.
  CHECK(read.record.value("deliveries", 0) == 3);
  const json& attempts = read.record.at("attempts_history");
  REQUIRE(attempts.size() == 3);
  CHECK(attempts[0].value("kind", "") == "supervisor-lost");
  CHECK(attempts[1].value("kind", "") == "wall-timeout");
  CHECK(attempts[2].value("kind", "") == "wall-timeout");
  // (The broker counts the last ack a moment after the worker sent it.)
  CHECK(e2e::eventually([&] { return queues(server)["spins"].value("messages_unacknowledged", -1) == 0; },
                        std::chrono::seconds(20), std::chrono::milliseconds(200)));
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The quarantine verbs read NAME.dlq by offset, as the store's records:
// the worker's signed dead letter; one the broker wrote itself past the
// delivery limit (its first death shown, no record); doctor's canary left
// out and counted; a forged letter shown as such; every read leaves the
// stream as it was; an unchecked record is not replayed, reproduced or
// minimized.
void quarantine_reads_the_dead_letters(e2e::RabbitServer& server) {
  e2e::TempDir dir(0700);
  const std::string key = e2e::fleet_key_file(dir);
  auto c = e2e::amqp_connect(server);
  // Offset 1: past x-delivery-limit, dead-lettered by the broker itself
  // (each reject with requeue is a delivery the quorum queue counts).
  {
    AmqpOutgoing m;
    m.body = "kills every supervisor";
    m.message_id = "limit-1";
    m.headers = {{"key", std::string("limit")}};
    REQUIRE(c.confirm_publishes().is_ok());
    REQUIRE(c.publish("crashes", m).is_ok());
    REQUIRE(c.wait_confirmed().is_ok());
    // A consume, not basic.get: a message rejected with requeue comes back
    // a moment later, and a get in between would find the queue empty.
    auto consumer = e2e::amqp_connect(server);
    REQUIRE(consumer.consume("crashes", 1).is_ok());
    int deliveries = 0;
    for (; deliveries < 50; ++deliveries) {
      auto got = consumer.next(std::chrono::seconds(2));
      REQUIRE_MESSAGE(got.has_value(), got.error());
      if (!*got) break;  // dead-lettered: nothing more comes
      REQUIRE(consumer.reject((*got)->delivery_tag, /*requeue=*/true).is_ok());
    }
    MESSAGE("the broker dead-lettered it after " << deliveries << " deliveries");
    REQUIRE(dead_letters(server, "crashes.dlq", 2).size() == 2);
  }
  // Offset 2: doctor's canary.
  const auto doctor = run_pillbox({"doctor", "--amqp", server.url(), "--queue", "crashes", "--json"});
  CHECK_MESSAGE(doctor.out.find("reached crashes.dlq") != std::string::npos, doctor.describe());
  // Offset 3: a letter anyone allowed to publish to crashes.dlx can write:
  // a record that says what it likes, a first death it never had.
  {
    AmqpOutgoing m;
    m.body = "forged";
    m.message_id = "forged-1";
    m.headers = {{"key", std::string("forged")},
                 {"pillbox-record", std::string(R"({"kind":"crash\u001b[31m","fingerprint":"f\u0007x","deliveries":-3})")},
                 {"x-first-death-reason", std::string("delivery_limit")},
                 {"x-first-death-queue", std::string("crashes")}};
    REQUIRE(c.confirm_publishes().is_ok());
    REQUIRE(c.publish_to_exchange("crashes.dlx", m).is_ok());
    REQUIRE(c.wait_confirmed().is_ok());
  }
  REQUIRE(dead_letters(server, "crashes.dlq", 4).size() == 4);
  auto state = c.check_queue("crashes.dlq");
  REQUIRE(state.has_value());
  MESSAGE("crashes.dlq holds 4 messages; queue.declare says " << state->messages);

  auto listed = [&] {
    auto args = e2e::quarantine_args(server, "crashes", {"list", "--json"});
    args.insert(args.end(), {"--fleet-key", key});
    return run_pillbox(args);
  };
  const auto start = std::chrono::steady_clock::now();
  const auto list = listed();
  const double list_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  INFO(list.describe());
  REQUIRE(list.exit_code == 0);
  REQUIRE(list.records.size() == 3);
  std::vector<std::int64_t> ids;
  for (const json& r : list.records) ids.push_back(r.at("id").get<std::int64_t>());
  CHECK(ids == std::vector<std::int64_t>{3, 1, 0});  // newest first, the canary left out
  CHECK(list.err.find("1 message of crashes.dlq left out: the canary of `pillbox doctor`") != std::string::npos);
  CHECK(list.records[2].value("key", "") == "segv");
  CHECK(list.records[2].value("kind", "") == "crash");
  CHECK(list.records[2].value("signature", "") == "valid");
  CHECK(list.records[2].value("status", "") == "quarantined");
  CHECK(list.records[1].value("key", "") == "limit");
  CHECK(list.records[1].value("kind", "") == "supervisor-lost");
  CHECK(list.records[1].value("signature", "") == "missing");
  CHECK(list.records[0].value("signature", "") == "missing");
  CHECK(list.records[0].value("store", "").find("crashes.dlq") != std::string::npos);
  MESSAGE("quarantine list --amqp of 4 messages: " << list_ms << " ms");
  // Read again: the same, nothing consumed or re-counted.
  const auto again = listed();
  CHECK(again.out == list.out);
  CHECK(queues(server)["crashes.dlq"].value("messages_unacknowledged", -1) == 0);

  // The table on a terminal: a forged kind's escape is not printed.
  const auto table = run_pillbox(e2e::quarantine_args(server, "crashes", {"list"}));
  CHECK(table.exit_code == 0);
  CHECK(table.out.find('\x1b') == std::string::npos);
  CHECK(table.out.find('\x07') == std::string::npos);

  // The broker's own dead letter: its first death, said by RabbitMQ.
  const auto limit = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "1", "--json"}));
  REQUIRE_MESSAGE(limit.exit_code == 0, limit.describe());
  REQUIRE(limit.records.size() == 1);
  const json& shown = limit.records[0];
  CHECK(shown.at("amqp").value("first_death_reason", "") == "delivery_limit");
  CHECK(shown.at("amqp").value("first_death_queue", "") == "crashes");
  CHECK(shown.at("amqp").value("message_id", "") == "limit-1");
  CHECK(shown.at("audit").at(0).value("actor", "") == "RabbitMQ");
  const auto limit_text = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "1"}));
  CHECK(limit_text.out.find("dead-lettered by RabbitMQ itself: reason delivery_limit, from queue crashes") !=
        std::string::npos);
  CHECK(limit_text.out.find("kills every supervisor") != std::string::npos);  // the payload's preview

  // The worker's: RabbitMQ's x-death as such (its retry expired out of a
  // delay queue), and a forged first death is not shown for a letter
  // pillbox wrote.
  const auto worker_text = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "0"}));
  INFO(worker_text.describe());
  CHECK(worker_text.exit_code == 0);
  CHECK(worker_text.out.find("x-death (RabbitMQ's history") != std::string::npos);
  CHECK(worker_text.out.find("expired from crashes.delay.") != std::string::npos);
  const auto forged = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "3", "--json"}));
  REQUIRE(forged.records.size() == 1);
  CHECK_FALSE(forged.records[0].at("amqp").contains("first_death_reason"));
  CHECK(forged.records[0].at("amqp").value("deliveries", -1) == 0);
  const auto forged_text = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "3"}));
  CHECK(forged_text.out.find('\x1b') == std::string::npos);

  const auto stats = run_pillbox(e2e::quarantine_args(server, "crashes", {"stats", "--json"}));
  CHECK(stats.exit_code == 0);
  CHECK(stats.err.find("left out") != std::string::npos);

  const std::string out = dir.path() + "/payload";
  const auto exported = run_pillbox(e2e::quarantine_args(server, "crashes", {"export", "0", "-o", out}));
  CHECK_MESSAGE(exported.exit_code == 0, exported.describe());
  CHECK(slurp(out) == "S crashes");

  // What is not there, or not one.
  const auto canary = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "2"}));
  CHECK(canary.exit_code == 2);
  CHECK(canary.err.find("is a canary of `pillbox doctor`") != std::string::npos);
  const auto missing = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "99"}));
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("no record 99") != std::string::npos);
  const auto bad_id = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "1712345678901-0"}));
  CHECK(bad_id.exit_code == 2);
  CHECK(bad_id.err.find("offsets in the stream NAME.dlq") != std::string::npos);
  // Replayed only on its signature's word (amqp_replay_test.cpp replays).
  const auto replay = run_pillbox(e2e::quarantine_args(server, "crashes", {"replay", "0"}));
  CHECK(replay.err.find("record 0's signature was not checked") != std::string::npos);
  CHECK(replay.err.find("0 selected") != std::string::npos);
  const auto minimize = run_pillbox({"minimize", "0", "--amqp", server.url(), "--queue", "crashes"});
  CHECK(minimize.exit_code == 2);  // amqp_minimize_test.cpp minimizes
  CHECK(minimize.err.find("record 0's signature was not checked") != std::string::npos);
  const auto unchecked = run_pillbox({"reproduce", "0", "--amqp", server.url(), "--queue", "crashes"});
  CHECK(unchecked.exit_code == 2);
  CHECK(unchecked.err.find("signature was not checked") != std::string::npos);
  const auto nosuch = run_pillbox(e2e::quarantine_args(server, "nosuch", {"list"}));
  CHECK(nosuch.exit_code == 3);
  CHECK(nosuch.err.find("has no queue 'nosuch.dlq'") != std::string::npos);
  REQUIRE(c.declare_queue("classic.dlq", {}).has_value());
  const auto classic = run_pillbox(e2e::quarantine_args(server, "classic", {"list"}));
  CHECK(classic.exit_code == 3);
  CHECK_MESSAGE(classic.err.find("x-queue-type") != std::string::npos, classic.describe());
  // Nothing here consumed a message: the stream holds what it held.
  CHECK(dead_letters(server, "crashes.dlq", 4).size() == 4);
}

// What operators do with a record on RabbitMQ is kept in NAME.dlq.state:
// discard (audited, said again as "already"), reproduce's verdict; the
// compare and set holds against writers that race (no change lost); a
// message there that is not pillbox's is left out and counted.
void quarantine_keeps_operators_state(e2e::RabbitServer& server) {
  e2e::TempDir dir(0700);
  const std::string key = e2e::fleet_key_file(dir);
  const auto discarded = run_pillbox(e2e::quarantine_args(server, "crashes", {"discard", "1", "--reason", "known: the broker's own"}));
  INFO(discarded.describe());
  CHECK(discarded.exit_code == 0);
  const auto again = run_pillbox(e2e::quarantine_args(server, "crashes", {"discard", "1", "--reason", "again"}));
  CHECK(again.out.find("already discarded") != std::string::npos);
  const auto only = run_pillbox(e2e::quarantine_args(server, "crashes", {"list", "--json", "--status", "discarded"}));
  REQUIRE(only.records.size() == 1);
  CHECK(only.records[0].at("id") == 1);
  const auto shown = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "1", "--json"}));
  REQUIRE(shown.records.size() == 1);
  const json& audit = shown.records[0].at("audit");
  REQUIRE(audit.size() == 2);
  CHECK(audit[0].value("actor", "") == "RabbitMQ");
  CHECK(audit[1].value("action", "") == "discarded");
  CHECK(audit[1].value("detail", "").find("known: the broker's own") != std::string::npos);

  // reproduce runs the worker's signed record here and keeps its verdict.
  const auto reproduced = run_pillbox({"reproduce", "0", "--runs", "2", "--amqp", server.url(), "--queue", "crashes",
                                       "--fleet-key", key, "--json"});
  INFO(reproduced.describe());
  CHECK(reproduced.exit_code == 0);
  const auto after = run_pillbox(e2e::quarantine_args(server, "crashes", {"show", "0", "--json"}));
  REQUIRE(after.records.size() == 1);
  CHECK(after.records[0].at("reproduce").value("verdict", "") == "reliable");
  CHECK(after.records[0].value("status", "") == "quarantined");

  // Four writers, five changes each, on one record: every change kept.
  constexpr int kWriters = 4;
  constexpr int kChanges = 5;
  std::vector<std::thread> writers;
  std::atomic<int> failed{0};
  const auto start = std::chrono::steady_clock::now();
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      auto own = pillbox::broker::AmqpConnection::open(*pillbox::broker::parse_amqp_url(server.url()));
      if (!own) return void(++failed);
      pillbox::broker::AmqpStateLog log(*own, "crashes");
      for (int i = 0; i < kChanges; ++i) {
        auto done = log.change("race", [&](pillbox::broker::FleetState& s) {
          s.audit.push_back({0, "writer " + std::to_string(w), "noted", std::to_string(i)});
          return pillbox::Status::ok();
        });
        if (!done) ++failed;
      }
    });
  }
  for (auto& t : writers) t.join();
  const double race_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  CHECK(failed == 0);
  auto c = e2e::amqp_connect(server);
  pillbox::broker::AmqpStateLog log(c, "crashes");
  auto states = log.load();
  REQUIRE_MESSAGE(states.has_value(), states.error());
  CHECK((*states)["race"].version == kWriters * kChanges);
  CHECK((*states)["race"].state.audit.size() == static_cast<std::size_t>(kWriters * kChanges));
  MESSAGE(kWriters << " writers x " << kChanges << " changes of one record's state: " << race_ms << " ms");

  // Not pillbox's: left out, said.
  REQUIRE(c.confirm_publishes().is_ok());
  REQUIRE(c.publish("crashes.dlq.state", R"({"record":"0","version":99,"state":"forged"})").is_ok());
  REQUIRE(c.wait_confirmed().is_ok());
  const auto listed = run_pillbox(e2e::quarantine_args(server, "crashes", {"list"}));
  CHECK(listed.exit_code == 0);
  CHECK(listed.err.find("1 message of crashes.dlq.state left out") != std::string::npos);
}

// A message whose dead letter cannot be published (a key header within
// 400 bytes of a frame: with pillbox's headers beside it, over one) is rejected to
// the broker, which dead-letters it whole; left unacknowledged it would
// stop every worker that took it (a helper's read of the code found it:
// the publish broke the connection, the link ran it again, for ever).
void unsendable_dead_letter_is_no_wedge(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(pillbox::broker::declare_topology(c, {.queue = "wedge", .delivery_limit = pillbox::broker::worker_delivery_limit(3)})
              .has_value());
  AmqpOutgoing big;
  big.body = "fine payload";
  big.message_id = "big-key";
  constexpr std::size_t kKey = 131072 - 400;  // the message fits one frame; its dead letter cannot
  big.headers = {{"key", std::string(kKey, 'k')}};
  REQUIRE(c.confirm_publishes().is_ok());
  REQUIRE(c.publish("wedge", big).is_ok());
  REQUIRE(c.publish("wedge", "after it", "after").is_ok());
  REQUIRE(c.wait_confirmed().is_ok());
  const auto r = run_pillbox(worker_args(server, "wedge", {"--jobs", "1", "--exit-when-idle", "1500ms", "--json"}));
  INFO(r.err);
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 2);
  CHECK(r.records[0].value("verdict", "") == "dead-lettered");
  CHECK(r.records[0].dump().find("rejected: RabbitMQ dead-letters it whole") != std::string::npos);
  CHECK(r.records[1].value("verdict", "") == "ok");
  const auto dl = dead_letters(server, "wedge.dlq", 1);
  CHECK(header_text(dl[0], "x-first-death-reason") == "rejected");
  CHECK(header_text(dl[0], "key").size() == kKey);
  CHECK(dl[0].body == "fine payload");
  const auto shown = run_pillbox(e2e::quarantine_args(server, "wedge", {"show", "0", "--json"}));
  REQUIRE_MESSAGE(shown.records.size() == 1, shown.err);
  CHECK(shown.records[0].value("kind", "") == "protocol-error");
  CHECK(shown.records[0].at("amqp").value("first_death_reason", "") == "rejected");
  CHECK(e2e::eventually([&] { return queues(server)["wedge"].value("messages_unacknowledged", -1) == 0; },
                        std::chrono::seconds(20), std::chrono::milliseconds(200)));
  CHECK(queues(server)["wedge"].value("messages", -1) == 0);
}

// Messages ready in a queue (queue.declare, passive: fast, where
// rabbitmqctl takes a second or more a call).
int ready(AmqpConnection& c, const std::string& queue) {
  auto state = c.check_queue(queue);
  return state ? static_cast<int>(state->messages) : -1;
}

// The topology broken under a running worker: NAME.dlx deleted (with its
// binding) is declared again on the publishing link's next connection, so
// the dead letter arrives (a publish to a missing exchange closes the
// connection, and the link ran it again on connection after connection,
// for ever). NAME.results deleted: a result is never dropped, the worker
// stops and the message goes back; the next worker declares it again.
void broken_topology_under_a_worker(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  {
    e2e::Background w(e2e::pillbox_binary(), worker_args(server, "heal", {"--max-attempts", "1", "--exit-when-idle",
                                                                          "5s", "--json"}));
    // Both links up once a result is in (the publishing link's Setup
    // declares the topology too: not in the middle of it).
    const auto first = run_pillbox({"submit", "--amqp", server.url(), "--queue", "heal", "-"},
                                   e2e::task_line("fine", "fine"));
    REQUIRE_MESSAGE(first.exit_code == 0, first.describe());
    REQUIRE_MESSAGE(e2e::eventually([&] { return ready(c, "heal.results") == 1; }), w.err());
    REQUIRE(c.delete_exchange("heal.dlx").is_ok());
    const auto submitted = run_pillbox({"submit", "--amqp", server.url(), "--queue", "heal", "-"},
                                       e2e::task_line("segv", "S crashes"));
    REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());
    const int code = w.wait();
    INFO(w.err());
    CHECK(code == 0);
    CHECK(w.err().find("lost RabbitMQ: publishes link") != std::string::npos);  // said once, and back
    CHECK(w.err().find("RabbitMQ is back") != std::string::npos);
    const auto dl = dead_letters(server, "heal.dlq", 1);
    CHECK(header_text(dl[0], "key") == "segv");
    CHECK(drain(c, "heal.results").size() == 1);
  }
  {
    e2e::Background w(e2e::pillbox_binary(), worker_args(server, "heal2", {"--exit-when-idle", "5s"}));
    const auto first = run_pillbox({"submit", "--amqp", server.url(), "--queue", "heal2", "-"},
                                   e2e::task_line("first", "first"));
    REQUIRE_MESSAGE(first.exit_code == 0, first.describe());
    REQUIRE_MESSAGE(e2e::eventually([&] { return ready(c, "heal2.results") == 1; }), w.err());
    REQUIRE(c.delete_queue("heal2.results").is_ok());
    const auto submitted = run_pillbox({"submit", "--amqp", server.url(), "--queue", "heal2", "-"},
                                       e2e::task_line("good", "fine"));
    REQUIRE_MESSAGE(submitted.exit_code == 0, submitted.describe());
    const int code = w.wait();
    INFO(w.err());
    CHECK(code == 3);
    CHECK(w.err().find("cannot publish to 'heal2.results'") != std::string::npos);
  }
  // Not lost: back in the queue, and the next worker's result is kept.
  CHECK(e2e::eventually([&] { return queues(server)["heal2"].value("messages", -1) == 1; }));
  const auto again = run_pillbox(worker_args(server, "heal2", {"--exit-when-idle", "1s", "--json"}));
  CHECK_MESSAGE(again.exit_code == 0, again.describe());
  const auto results = drain(c, "heal2.results");
  REQUIRE(results.size() == 1);
  CHECK(results[0].body == "fine");
}

// More dead letters than one window (128) of a listing: every one, newest
// first, --limit and --offset pages through them.
void quarantine_pages_through_windows(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(pillbox::broker::declare_topology(c, {.queue = "many"}).has_value());
  REQUIRE(c.confirm_publishes().is_ok());
  constexpr int kLetters = 300;
  for (int i = 0; i < kLetters; ++i) {
    AmqpOutgoing m;
    const std::string body = "letter " + std::to_string(i);
    m.body = body;
    m.headers = {{"key", "k" + std::to_string(i)}};
    REQUIRE(c.publish_to_exchange("many.dlx", m).is_ok());
  }
  REQUIRE(c.wait_confirmed().is_ok());
  const auto start = std::chrono::steady_clock::now();
  const auto all = run_pillbox(e2e::quarantine_args(server, "many", {"list", "--json"}));
  const double all_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  REQUIRE_MESSAGE(all.exit_code == 0, all.describe());
  REQUIRE(all.records.size() == kLetters);
  for (int i = 0; i < kLetters; ++i) {
    CHECK(all.records[i].at("id").get<std::int64_t>() == kLetters - 1 - i);
    CHECK(all.records[i].value("key", "") == "k" + std::to_string(kLetters - 1 - i));
  }
  MESSAGE("quarantine list --amqp of " << kLetters << " dead letters: " << all_ms << " ms");
  const auto page = run_pillbox(e2e::quarantine_args(server, "many", {"list", "--json", "--limit", "5", "--offset", "130"}));
  REQUIRE(page.records.size() == 5);
  CHECK(page.records[0].at("id").get<std::int64_t>() == 169);
  CHECK(page.records[4].at("id").get<std::int64_t>() == 165);
  const auto one = run_pillbox(e2e::quarantine_args(server, "many", {"show", "7", "--json"}));
  REQUIRE(one.records.size() == 1);
  CHECK(one.records[0].value("key", "") == "k7");
}

}  // namespace

TEST_CASE("rabbitmq worker: results, retries through delay queues, signed dead letters, the broker's count") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  {
    INFO("results where RabbitMQ users look");
    results_where_users_look(server);
  }
  {
    INFO("a poison payload: retried through a delay queue, then dead-lettered, signed");
    poison_dead_lettered(server);
  }
  {
    INFO("a worker killed mid-task: the broker's count");
    killed_worker_counts(server);
  }
  {
    INFO("quarantine list, show, stats, export --amqp read the dead letters");
    quarantine_reads_the_dead_letters(server);
  }
  {
    INFO("quarantine discard, reproduce --amqp: operators' state kept in NAME.dlq.state");
    quarantine_keeps_operators_state(server);
  }
  {
    INFO("a dead letter that cannot be published: rejected to the broker, no wedge");
    unsendable_dead_letter_is_no_wedge(server);
  }
  {
    INFO("the topology broken under a running worker");
    broken_topology_under_a_worker(server);
  }
  {
    INFO("quarantine list --amqp pages through more than one window");
    quarantine_pages_through_windows(server);
  }
}
