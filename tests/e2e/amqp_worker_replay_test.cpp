// The worker's side of `quarantine replay --amqp` against a real
// rabbitmq-server the test starts itself (rabbit_server.h; one broker, one
// test case, a function per case): a message that carries a replay's tag
// (supervisor/broker/amqp_replay_notice.h) and runs ok has its result where
// results go and a notice in the stream NAME.dlq.state, written before the
// message is acknowledged (also with --no-results, and with a reply_to);
// one that fails again is dead-lettered with the tag carried on, through
// its retry's copy, and leaves no notice; a tag not of the replay's form is
// no tag. A notice that cannot be written keeps the message unacknowledged
// and stops the worker; NAME.dlq.state of another type stops it at start.
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_replay_notice.h"
#include "supervisor/broker/amqp_stream_reader.h"
#include "supervisor/broker/amqp_topology.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using pillbox::broker::AmqpConnection;
using pillbox::broker::AmqpMessage;
using pillbox::broker::AmqpOutgoing;
using pillbox::broker::ReplayNotice;
using pillbox::broker::ReplayTag;
using e2e::run_pillbox;

using e2e::drain;
namespace {

const std::string kAttemptOk = "00112233445566778899aabbccddeeff";
const std::string kAttemptRpc = "0123456789abcdef0123456789abcdef";
const std::string kAttemptCrash = "ffeeddccbbaa99887766554433221100";
const std::string kAttemptQuiet = "abcdefabcdefabcdefabcdefabcdef01";

std::vector<std::string> worker_args(const e2e::RabbitServer& server, const std::string& queue,
                                     const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"worker", "--amqp", server.url(), "--queue", queue, "--backoff-base", "10ms"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--", e2e::fixture("mixed_poison")});
  return args;
}

// NAME's topology as a worker with the default --max-attempts declares it,
// and a connection that publishes with confirms.
AmqpConnection fleet(const e2e::RabbitServer& server, const std::string& queue) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(pillbox::broker::declare_topology(c, {.queue = queue}).has_value());
  REQUIRE(c.confirm_publishes().is_ok());
  return c;
}

// A message as the replay republishes one: its own id and key, and the tag
// (here any headers: a tag not of its form is published as it is).
void publish(AmqpConnection& c, const std::string& queue, const std::string& body, const std::string& id,
             const std::string& attempt, const std::string& record, const std::string& reply_to = "") {
  AmqpOutgoing m;
  m.body = body;
  m.message_id = id;
  m.reply_to = reply_to;
  if (!reply_to.empty()) m.correlation_id = "corr-" + id;
  m.headers = {{"key", "key-" + id}};
  if (!attempt.empty()) pillbox::broker::add_replay_tag(m.headers, ReplayTag{attempt, record});
  REQUIRE(c.publish(queue, m).is_ok());
  REQUIRE(c.wait_confirmed().is_ok());
}

// Every message of the stream NAME.dlq.state, read by offset as the
// replay reads it (amqp_stream_reader.h); none when the stream is empty.
std::vector<AmqpMessage> state_log(const e2e::RabbitServer& server, const std::string& queue) {
  auto c = e2e::amqp_connect(server);
  pillbox::broker::AmqpStreamReader reader(c, queue + ".dlq.state", 1u << 20);
  auto end = reader.end();
  REQUIRE_MESSAGE(end.has_value(), end.error());
  std::vector<AmqpMessage> out;
  const pillbox::Status read = reader.read(0, *end, [&](AmqpMessage&& m) {
    out.push_back(std::move(m));
    return true;
  });
  REQUIRE_MESSAGE(read.is_ok(), read.message());
  return out;
}

// The notices of the state log, by their record.
std::map<std::string, ReplayNotice> notices(const e2e::RabbitServer& server, const std::string& queue) {
  std::map<std::string, ReplayNotice> by_record;
  for (const AmqpMessage& m : state_log(server, queue)) {
    const auto n = pillbox::broker::read_replay_notice(m);
    REQUIRE_MESSAGE(n.has_value(), "not a notice in " << queue << ".dlq.state: " << m.body);
    CHECK_MESSAGE(by_record.count(n->tag.record) == 0, "two notices of record " << n->tag.record);
    by_record[n->tag.record] = *n;
  }
  return by_record;
}

// Messages ready in a queue (queue.declare, passive).
int ready(AmqpConnection& c, const std::string& queue) {
  auto state = c.check_queue(queue);
  return state ? static_cast<int>(state->messages) : -1;
}

std::map<std::string, json> verdicts_by_key(const e2e::RunResult& r) {
  std::map<std::string, json> by_key;
  for (const json& v : r.records) by_key[v.value("key", "")] = v;
  return by_key;
}

// Replayed messages that run ok leave a notice (with their result where it
// goes: NAME.results, or a reply_to); one that fails again leaves its dead
// letter, tag carried on through its retry's copy, and no notice; a tag not
// of the replay's form, or none, no notice either.
void notices_of_replayed_messages(e2e::RabbitServer& server) {
  auto c = fleet(server, "replayed");
  REQUIRE(c.declare_queue("replayed-replies", {}).has_value());
  publish(c, "replayed", "fine payload", "r-ok", kAttemptOk, "5");
  publish(c, "replayed", "rpc payload", "r-rpc", kAttemptRpc, "6", "replayed-replies");
  publish(c, "replayed", "S crashes again", "r-crash", kAttemptCrash, "7");
  publish(c, "replayed", "fine too", "r-forged", "xyz", "8");
  publish(c, "replayed", "plain", "r-plain", "", "");

  const auto r = run_pillbox(worker_args(server, "replayed", {"--jobs", "2", "--max-attempts", "2",
                                                              "--exit-when-idle", "1500ms", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  auto verdicts = verdicts_by_key(r);
  CHECK(verdicts["key-r-ok"].value("verdict", "") == "ok");
  // Its verdict names its result's queue, not the notice's.
  CHECK(verdicts["key-r-ok"].value("result_entry", "") == "replayed.results");
  CHECK(verdicts["key-r-rpc"].value("verdict", "") == "ok");
  CHECK(verdicts["key-r-crash"].value("verdict", "") == "dead-lettered");
  CHECK(verdicts["key-r-forged"].value("verdict", "") == "ok");
  CHECK(verdicts["key-r-plain"].value("verdict", "") == "ok");

  // Results where results go.
  std::map<std::string, std::string> output_of;
  for (const AmqpMessage& m : drain(c, "replayed.results")) output_of[m.key.value_or("")] = m.body;
  CHECK(output_of.size() == 3);
  CHECK(output_of["key-r-ok"] == "fine payload");
  CHECK(output_of["key-r-forged"] == "fine too");
  const auto replies = drain(c, "replayed-replies");
  REQUIRE(replies.size() == 1);
  CHECK(replies[0].correlation_id == "corr-r-rpc");

  // The notices: the two replayed messages that ran ok, nothing else.
  const auto by_record = notices(server, "replayed");
  CHECK(by_record.size() == 2);
  REQUIRE(by_record.count("5") == 1);
  const ReplayNotice& ok = by_record.at("5");
  CHECK(ok.tag.attempt == kAttemptOk);
  CHECK(ok.message_id == "r-ok");
  CHECK_FALSE(ok.worker.empty());
  CHECK(ok.worker.find(':') != std::string::npos);  // HOST:PID, as its result's `worker`
  CHECK(ok.output_omitted.empty());
  REQUIRE(by_record.count("6") == 1);
  CHECK(by_record.at("6").tag.attempt == kAttemptRpc);
  CHECK(by_record.at("6").message_id == "r-rpc");
  CHECK(by_record.count("7") == 0);  // failed again: its dead letter says so
  CHECK(by_record.count("8") == 0);  // no tag of the replay's

  // Failed again (retried through a delay queue first): its dead letter
  // carries the tag as the original's.
  auto reader = e2e::amqp_connect(server);
  REQUIRE(reader.consume("replayed.dlq", 10, {{"x-stream-offset", std::string("first")}}).is_ok());
  auto got = reader.next(std::chrono::seconds(30));
  REQUIRE_MESSAGE(got.has_value(), got.error());
  REQUIRE(got->has_value());
  const AmqpMessage& dl = **got;
  const auto letter = pillbox::broker::read_dead_letter(dl);
  CHECK(letter.key == "key-r-crash");
  CHECK(letter.record.value("deliveries", 0) == 2);
  const auto tag = pillbox::broker::replay_tag(dl.headers);
  REQUIRE(tag.has_value());
  CHECK(tag->attempt == kAttemptCrash);
  CHECK(tag->record == "7");
  CHECK(letter.original.at("headers").contains("pillbox-replay"));

  // Nothing left unacknowledged: each ack came after its notice.
  CHECK(e2e::eventually([&] { return ready(c, "replayed") == 0; }));
  MESSAGE("a worker of 5 messages, 2 of them replayed ok: " << r.seconds << " s");
}

// --no-results: the notice all the same, saying that no result was kept.
void notice_without_results(e2e::RabbitServer& server) {
  auto c = fleet(server, "quiet");
  publish(c, "quiet", "fine", "q-ok", kAttemptQuiet, "0");
  const auto r = run_pillbox(worker_args(server, "quiet", {"--no-results", "--exit-when-idle", "1s", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto by_record = notices(server, "quiet");
  REQUIRE(by_record.count("0") == 1);
  CHECK(by_record.at("0").tag.attempt == kAttemptQuiet);
  CHECK(by_record.at("0").output_omitted.find("--no-results") != std::string::npos);
  CHECK(c.check_queue("quiet.results").has_value() == false);  // never declared
}

// NAME.dlq.state deleted under a running worker: the notice is refused (no
// queue), the message is left unacknowledged, its result unsent, and the
// worker stops naming the stream; the next worker declares it again and
// settles the message, notice first.
void notice_refused_stops_the_worker(e2e::RabbitServer& server) {
  auto c = fleet(server, "gone");
  {
    e2e::Background w(e2e::pillbox_binary(), worker_args(server, "gone", {"--exit-when-idle", "5s"}));
    // Both links up once a result is in.
    publish(c, "gone", "first", "g-first", "", "");
    REQUIRE_MESSAGE(e2e::eventually([&] { return ready(c, "gone.results") == 1; }), w.err());
    REQUIRE(c.delete_queue("gone.dlq.state").is_ok());
    publish(c, "gone", "fine", "g-ok", kAttemptOk, "3");
    const int code = w.wait();
    INFO(w.err());
    CHECK(code == 3);
    CHECK(w.err().find("cannot publish the replay notice of message g-ok to 'gone.dlq.state'") != std::string::npos);
    MESSAGE("the worker whose notice was refused says: " << w.err());
  }
  // Back in the queue, its result not published.
  CHECK(e2e::eventually([&] { return ready(c, "gone") == 1; }));
  CHECK(ready(c, "gone.results") == 1);
  const auto again = run_pillbox(worker_args(server, "gone", {"--exit-when-idle", "1s", "--json"}));
  INFO(again.describe());
  CHECK(again.exit_code == 0);
  const auto by_record = notices(server, "gone");
  REQUIRE(by_record.count("3") == 1);
  CHECK(by_record.at("3").tag.attempt == kAttemptOk);
  CHECK(drain(c, "gone.results").size() == 2);
}

// NAME.dlq.state declared as another type before any worker: the worker
// does not start, and says why in one line; the queue is left as it was.
void state_log_of_another_type(e2e::RabbitServer& server) {
  auto c = fleet(server, "classic");
  REQUIRE(c.declare_queue("classic.dlq.state", {{"x-queue-type", std::string("classic")}}).has_value());
  publish(c, "classic", "fine", "c-ok", kAttemptOk, "1");
  const auto r = run_pillbox(worker_args(server, "classic", {"--exit-when-idle", "1s"}));
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  // The line that names the stream says what is wrong with it.
  const std::size_t named = r.err.find("classic.dlq.state");
  REQUIRE(named != std::string::npos);
  const std::size_t from = r.err.rfind('\n', named) == std::string::npos ? 0 : r.err.rfind('\n', named) + 1;
  const std::string line = r.err.substr(from, r.err.find('\n', named) - from);
  CHECK(line.find("x-queue-type") != std::string::npos);
  CHECK(line.find("'stream'") != std::string::npos);
  MESSAGE("a state log of another type: " << line);
  CHECK(ready(c, "classic") == 1);  // nothing run
}

}  // namespace

TEST_CASE("rabbitmq worker: a replayed message's notice in NAME.dlq.state, before its ack") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  {
    INFO("replayed messages: notices of those that ran ok, the tag on the dead letter of one that failed");
    notices_of_replayed_messages(server);
  }
  {
    INFO("--no-results: the notice all the same");
    notice_without_results(server);
  }
  {
    INFO("a notice refused: the message unacknowledged, the worker stopped");
    notice_refused_stops_the_worker(server);
  }
  {
    INFO("NAME.dlq.state of another type: a setup error");
    state_log_of_another_type(server);
  }
}
