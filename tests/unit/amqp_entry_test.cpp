// A RabbitMQ work message as a worker holds it (supervisor/broker/
// amqp_entry.h): its deliveries are counted from the history its copies
// carry plus the broker's x-delivery-count, a delivery nobody recorded
// never reported back (a suspect's too: a RabbitMQ worker runs it alone),
// a history that is not pillbox's is refused unrun, and what a worker
// publishes (the carried copy, the result, the dead letter, a replayed
// message's notice) reads back as it wrote it, the dead letter signed over
// what an operator later checks.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "shared/sha256.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_entry.h"
#include "supervisor/broker/amqp_replay_notice.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/broker/fleet_key.h"
#include "tests/unit/amqp_worker_fixture.h"

using namespace pillbox;
using namespace pillbox::broker;
using json = nlohmann::json;

namespace {

using amqp_fixture::delivered;
using amqp_fixture::held;
using amqp_fixture::set_key_as_delivered;

WorkerSettings settings() { return amqp_fixture::worker_settings(); }

AmqpMessage message(std::int64_t count = 0) {
  AmqpMessage m;
  m.delivery_tag = 5;
  m.body = std::string("pay\0load", 8);
  m.message_id = "order-17";
  m.correlation_id = "req-42";
  m.headers = {{"key", std::string("report.pdf")}, {"tenant", std::string("acme")}};
  m.key = "report.pdf";
  m.delivery_count = count;
  if (count > 0) m.headers.push_back({"x-delivery-count", count});
  return m;
}

Outcome crash() { return amqp_fixture::segv(); }

RecordedDelivery failed_at(const AmqpHeld& e) {
  return recorded_outcome(static_cast<std::uint32_t>(e.delivery), "host:1", 1000, crash(), true, false);
}

const ReplayTag kTag{"0123456789abcdef0123456789abcdef", "5"};

// A message `quarantine replay --amqp` republished: record 5, its attempt kTag.
AmqpMessage replayed() {
  AmqpMessage m = message();
  add_replay_tag(m.headers, kTag);
  return m;
}

Outcome ran_ok(std::string output = "out") {
  Outcome ok;
  ok.kind = Kind::kOk;
  ok.exit_code = 0;
  ok.output = std::move(output);
  return ok;
}

// The tag a message carries, as the replay reads it back.
void check_tag(const AmqpTable& headers) {
  const auto tag = replay_tag(headers);
  REQUIRE(tag.has_value());
  CHECK(tag->attempt == kTag.attempt);
  CHECK(tag->record == kTag.record);
}

}  // namespace

TEST_CASE("amqp entry: a first delivery is delivery 1, named by its key and message id, payload exact") {
  const AmqpHeld e = held(message());
  CHECK(e.delivery == 1);
  CHECK(e.id == "order-17");
  CHECK(e.task.key == "report.pdf");
  CHECK(e.task.payload == std::string("pay\0load", 8));
  CHECK(e.message.body.empty());
  CHECK(e.history.lost.empty());
  CHECK_FALSE(check_message(settings(), e).has_value());

  AmqpMessage bare = message();
  bare.key.reset();
  bare.headers.clear();
  CHECK(held(bare).task.key == "order-17");
  bare.message_id.clear();
  const AmqpHeld anonymous = held(bare);
  CHECK(anonymous.id == "delivery 5");
  CHECK(anonymous.task.key.rfind("message:", 0) == 0);
  CHECK(anonymous.task.key.size() == 8 + 16);
}

TEST_CASE("amqp entry: deliveries the broker counted and nobody recorded never reported back") {
  // Redelivered twice by the broker (two workers died with it): delivery 1
  // never reported back; 2, a suspect's, left no start marker (none can be
  // written on RabbitMQ): not held against it (its worker may have held it
  // unstarted beside what killed it).
  const AmqpHeld e = held(message(2));
  CHECK(e.delivery == 3);
  CHECK(e.history.lost == std::vector<std::uint32_t>{1});
  CHECK(e.history.unstarted == std::vector<std::uint32_t>{2});
  CHECK(e.history.last_lost);
  CHECK_FALSE(check_message(settings(), e).has_value());
  // However often: a message that kills every worker ends at the broker's
  // x-delivery-limit, not as a good one charged for its neighbour.
  CHECK_FALSE(check_message(settings(), held(message(9))).has_value());

  // Deliveries lost between recorded ones each count: 1, 3 and 5 of a copy
  // that carries 2 and 4 is --max-attempts 3 of them: it kills workers.
  AmqpMessage m = message(1);
  m.headers.push_back({std::string(kDeliveriesHeader), std::int64_t{4}});
  m.headers.push_back({std::string(kAttemptsHeader),
                       "[" + delivery_json(recorded_outcome(2, "w", 1, crash(), false, true)) + "," +
                           delivery_json(recorded_outcome(4, "w", 1, crash(), false, true)) + "]"});
  const AmqpHeld killer = held(m);
  CHECK(killer.delivery == 6);
  CHECK(killer.history.lost == std::vector<std::uint32_t>{1, 3, 5});
  const auto refused = check_message(settings(), killer);
  REQUIRE(refused.has_value());
  CHECK(refused->outcome.kind == Kind::kSupervisorLost);
  CHECK_FALSE(refused->protocol_error);
  CHECK(refused->outcome.message.find("RabbitMQ") != std::string::npos);
}

TEST_CASE("amqp entry: a suspect given back stays one on its copy, and the delivery limit holds across copies") {
  // Two workers died with it; the third gave it back unrun (another
  // suspect ran alone there): its copy runs alone too.
  const AmqpHeld suspect = held(message(2));
  REQUIRE(suspect.history.last_lost);
  const AmqpPublication copy = carried_copy(
      suspect, recorded_suspect_release(3, "host:3", 1000, "released: a suspect runs alone on this worker"), "jobs");
  const AmqpHeld again = held(delivered(copy));
  CHECK(again.delivery == 4);
  CHECK(again.history.last_lost);
  CHECK(again.history.lost == std::vector<std::uint32_t>{1});
  CHECK(again.history.unstarted == std::vector<std::uint32_t>{2});
  CHECK_FALSE(check_message(settings(), again).has_value());

  // The broker counts each copy from 0: a message that kills every worker
  // it runs alone on, given back in turn with another such, would never
  // reach x-delivery-limit. Counted across the copies, the worker stops it
  // once its deliveries that never reported back pass the same limit.
  const auto limit = static_cast<std::int64_t>(worker_delivery_limit(settings().retry.max_attempts));
  auto given_back_after = [&](std::int64_t killed) {
    const AmqpHeld h = held(message(killed));
    return held(delivered(carried_copy(
        h, recorded_suspect_release(static_cast<std::uint32_t>(h.delivery), "w", 1, "released: another suspect"),
        "jobs")));
  };
  const AmqpHeld at_limit = given_back_after(limit);  // limit deliveries never reported back
  CHECK(at_limit.history.lost.size() + at_limit.history.unstarted.size() == static_cast<std::size_t>(limit));
  CHECK_FALSE(check_message(settings(), at_limit).has_value());
  const AmqpHeld past = held(delivered(carried_copy(
      at_limit, recorded_suspect_release(static_cast<std::uint32_t>(at_limit.delivery), "w", 1, "released"), "jobs"), 1));
  CHECK(past.history.lost.size() + past.history.unstarted.size() == static_cast<std::size_t>(limit) + 1);
  const auto refused = check_message(settings(), past);
  REQUIRE(refused.has_value());
  CHECK(refused->outcome.kind == Kind::kSupervisorLost);
  CHECK_FALSE(refused->protocol_error);
  CHECK(refused->reason.find("past the delivery limit") != std::string::npos);
}

TEST_CASE("amqp entry: given back as a suspect over and over, a message stays one, and is never refused for it") {
  // A flood of suspects (forged or not) gives a message back each time
  // another runs alone beside it: each give-back is a release on its copy,
  // never a delivery that did not report back. Past a few hundred, the
  // copy's history is written short (history_text): the suspicion must
  // survive that (it did not: after 269 give-backs the message ran beside
  // others again).
  AmqpHeld h = held(message(1));
  REQUIRE(h.history.last_lost);
  constexpr int kGiveBacks = 800;
  for (int given_back = 1; given_back <= kGiveBacks; ++given_back) {
    const auto release = recorded_suspect_release(static_cast<std::uint32_t>(h.delivery), "host:" + std::to_string(given_back),
                                                  1000 + given_back, "released: a suspect runs alone on this worker; left to the others");
    h = held(delivered(carried_copy(h, release, "jobs")));
    INFO("after " << given_back << " give-backs");
    REQUIRE(h.history_unreadable.empty());
    REQUIRE(h.history.last_lost);
    REQUIRE(h.history.lost.size() + h.history.unstarted.size() == 1);
    const auto refused = check_message(settings(), h);
    REQUIRE_MESSAGE(!refused, (refused ? refused->outcome.message : ""));
  }
  CHECK(h.delivery == kGiveBacks + 2);
}

TEST_CASE("amqp entry: a copy carries the history on; its deliveries count on from it") {
  const AmqpHeld first = held(message());
  const AmqpPublication copy = carried_copy(first, failed_at(first), "jobs.delay.1024");
  CHECK(copy.routing_key == "jobs.delay.1024");
  CHECK(copy.exchange.empty());
  CHECK(copy.body == first.task.payload);
  CHECK(copy.message.message_id == "order-17");
  CHECK(copy.message.correlation_id == "req-42");
  CHECK(find_field(copy.message.headers, "tenant") != nullptr);

  // Delivered again as a copy: delivery 2, delivery 1 recorded as it ended.
  const AmqpHeld second = held(delivered(copy));
  CHECK(second.delivery == 2);
  REQUIRE(second.history.recorded.size() == 1);
  CHECK(second.history.recorded[0].delivery == 1);
  CHECK(second.history.recorded[0].fingerprint == "pb1-crash");
  CHECK(second.history.recorded[0].charged);
  CHECK(second.history.lost.empty());
  CHECK(second.task.key == "report.pdf");
  // pillbox's headers are read, not carried as the message's own.
  CHECK(find_field(second.message.headers, kAttemptsHeader) == nullptr);
  CHECK(find_field(second.message.headers, kDeliveriesHeader) == nullptr);

  // The copy's worker died once with it: delivery 3, and 2 never reported back.
  const AmqpHeld third = held(delivered(copy, 1));
  CHECK(third.delivery == 3);
  CHECK(third.history.lost == std::vector<std::uint32_t>{2});
  CHECK(third.history.recorded.size() == 1);

  // A copy of a copy keeps both records.
  const AmqpHeld fourth = held(delivered(carried_copy(third, failed_at(third), "jobs")));
  CHECK(fourth.delivery == 4);
  CHECK(fourth.history.recorded.size() == 2);
  CHECK(fourth.history.lost == std::vector<std::uint32_t>{2});
}

TEST_CASE("amqp entry: a broker's x-death and count are not carried onto a copy") {
  AmqpMessage m = message(1);
  m.headers.push_back({"x-death", AmqpValue::array({})});
  const AmqpHeld e = held(m);
  const AmqpPublication copy = carried_copy(e, failed_at(e), "jobs");
  CHECK(find_field(copy.message.headers, "x-death") == nullptr);
  CHECK(find_field(copy.message.headers, "x-delivery-count") == nullptr);
  const AmqpHeld next = held(delivered(copy));
  CHECK(next.delivery == 3);
  CHECK(next.history.lost == std::vector<std::uint32_t>{1});
}

TEST_CASE("amqp entry: a history header that is not pillbox's is refused unrun, as a protocol error") {
  auto refused_with = [](AmqpTable extra) {
    AmqpMessage m = message();
    for (auto& f : extra) m.headers.push_back(std::move(f));
    const AmqpHeld e = held(m);
    auto r = check_message(settings(), e);
    REQUIRE_MESSAGE(r.has_value(), "accepted: " << e.history_unreadable);
    CHECK(r->protocol_error);
    CHECK(r->outcome.kind == Kind::kProtocolError);
    return r->outcome.message;
  };
  CHECK(refused_with({{std::string(kDeliveriesHeader), std::int64_t{2}}}).find("carries no") != std::string::npos);
  CHECK(refused_with({{std::string(kDeliveriesHeader), std::int64_t{-1}}}).find("not a count") != std::string::npos);
  CHECK(refused_with({{std::string(kDeliveriesHeader), std::string("2")}}).find("not a count") != std::string::npos);
  CHECK(refused_with({{std::string(kDeliveriesHeader), std::int64_t{1}}, {std::string(kAttemptsHeader), std::string("{")}})
            .find("pillbox-attempts") != std::string::npos);
  CHECK(refused_with({{std::string(kDeliveriesHeader), std::int64_t{1}},
                      {std::string(kAttemptsHeader), std::string(R"([{"delivery": 5, "kind": "crash"}])")}})
            .find("1..1") != std::string::npos);
  CHECK(refused_with({{std::string(kDeliveriesHeader), std::int64_t{1}},
                      {std::string(kAttemptsHeader), std::string(R"([{"delivery": 1, "kind": 7}])")}})
            .find("not a delivery pillbox recorded") != std::string::npos);
  CHECK(refused_with({{std::string(kAttemptsHeader), std::string("[]")}, {std::string(kAttemptsHeader), std::string("[]")}})
            .find("twice") != std::string::npos);
  // A count set by hand beyond what deliveries reach.
  AmqpMessage far = message();
  far.delivery_count = std::numeric_limits<std::int64_t>::max();
  const auto r = check_message(settings(), held(far));
  REQUIRE(r.has_value());
  CHECK(r->protocol_error);
  CHECK(r->reason == "delivery count out of range: not run");
}

TEST_CASE("amqp entry: a long history is cut in its details, never by a whole delivery") {
  Outcome big = crash();
  big.message = std::string(4000, 'm');
  big.crash_state.assign(50, std::string(200, 'f'));
  AmqpHeld e = held(message());
  for (int i = 0; i < 8; ++i) {
    const RecordedDelivery d = recorded_outcome(static_cast<std::uint32_t>(e.delivery), "host:1", 1000, big, false, true);
    e = held(delivered(carried_copy(e, d, "jobs")));
  }
  CHECK(e.delivery == 9);
  CHECK(e.history.recorded.size() == 8);
  CHECK(e.history.lost.empty());
  const AmqpPublication last = carried_copy(e, failed_at(e), "jobs");
  const AmqpValue* text = find_field(last.message.headers, kAttemptsHeader);
  REQUIRE(text != nullptr);
  CHECK(text->text()->size() <= kMaxCarriedHistory);
  // The newest keep their details.
  CHECK(e.history.recorded.back().message.size() == 4000);
}

TEST_CASE("amqp entry: a result goes to reply_to with its correlation id, else to NAME.results, else nowhere") {
  Outcome ok;
  ok.kind = Kind::kOk;
  ok.exit_code = 0;
  ok.output = std::string("out\xff", 4);
  AmqpMessage m = message();
  m.reply_to = "amq.gen-reply";
  const AmqpHeld rpc = held(m);
  WorkerSettings s = settings();
  s.results = false;  // --no-results: a requester still gets its reply
  auto reply = result_publication(s, rpc, ok, "");
  REQUIRE(reply.has_value());
  CHECK(reply->routing_key == "amq.gen-reply");
  CHECK(reply->message.correlation_id == "req-42");
  CHECK(reply->body == ok.output);
  const AmqpValue* status = find_field(reply->message.headers, "status");
  REQUIRE(status != nullptr);
  CHECK(*status->text() == "ok");
  CHECK(find_field(reply->message.headers, "output") == nullptr);
  CHECK(find_field(reply->message.headers, "output_b64") == nullptr);

  const AmqpHeld plain = held(message());
  auto kept = result_publication(settings(), plain, ok, "jobs.results");
  REQUIRE(kept.has_value());
  CHECK(kept->routing_key == "jobs.results");
  CHECK_FALSE(result_publication(settings(), plain, ok, "").has_value());

  s = settings();
  s.results_max_output = 2;
  auto omitted = result_publication(s, plain, ok, "jobs.results");
  REQUIRE(omitted.has_value());
  CHECK(omitted->body.empty());
  CHECK(find_field(omitted->message.headers, "output_sha256") != nullptr);
}

TEST_CASE("amqp entry: a dead letter carries the record with its history, signed over what reads back") {
  WorkerSettings s = settings();
  s.fleet_key = FleetKey(std::string(32, 'k'));
  const AmqpHeld first = held(message());
  const AmqpHeld second = held(delivered(carried_copy(first, failed_at(first), "jobs.delay.1024"), 1));
  const AmqpPublication dl = dead_letter_publication(s, second, crash(), "failed twice alike", 5000);
  CHECK(dl.exchange == "jobs.dlx");
  CHECK(dl.body == first.task.payload);
  CHECK(dl.message.body.empty());
  AmqpMessage back = delivered(dl);
  back.headers.push_back({"x-stream-offset", std::int64_t{3}});
  const AmqpDeadLetter read = read_dead_letter(back);
  CHECK(read.unreadable.empty());
  CHECK(read.key == "report.pdf");
  CHECK(read.queue == "jobs");
  CHECK(read.record.value("kind", "") == "crash");
  CHECK(read.record.value("reason", "") == "failed twice alike");
  CHECK(read.record.at("queue").value("name", "") == "jobs");
  CHECK(read.record.value("deliveries", 0) == 3);
  const json& attempts = read.record.at("attempts_history");
  REQUIRE(attempts.size() == 3);
  CHECK(attempts[0].value("delivery", 0) == 1);
  CHECK(attempts[0].value("fingerprint", "") == "pb1-crash");
  CHECK(attempts[1].value("kind", "") == "supervisor-lost");
  CHECK(attempts[2].value("delivery", 0) == 3);
  // The original's own history headers are pillbox's, not its properties.
  CHECK(read.original.at("headers").count(std::string(kAttemptsHeader)) == 0);

  const AmqpValue* sig = find_field(back.headers, kSignatureHeader);
  REQUIRE(sig != nullptr);
  CHECK(s.fleet_key->verify("jobs.dlq", dead_letter_signed_fields(back)) == Signature::kValid);
  AmqpMessage forged = back;
  forged.body = "other";
  CHECK(s.fleet_key->verify("jobs.dlq", dead_letter_signed_fields(forged)) == Signature::kBad);
  CHECK(s.fleet_key->verify("other.dlq", dead_letter_signed_fields(back)) == Signature::kBad);
}

TEST_CASE("amqp entry: a decimal header, which a stream queue cannot keep, is named and goes on a copy as text") {
  AmqpMessage m = message();
  m.headers.push_back({"price", AmqpValue::of_kind('D', AmqpDecimal{2, 12345})});
  m.headers.push_back({"tiny", AmqpValue::of_kind('D', AmqpDecimal{4, 7})});
  m.headers.push_back({"nested", AmqpValue::table({{"inner", AmqpValue::of_kind('D', AmqpDecimal{1, 5})}})});
  const AmqpHeld e = held(m);
  // Only top-level ones: a stream drops tables and arrays as a whole.
  CHECK(stream_breaking_headers(e.message) == std::vector<std::string>{"price", "tiny"});
  CHECK(stream_breaking_headers(held(message()).message).empty());
  CHECK_FALSE(check_message(settings(), e).has_value());  // not refused: given back made safe

  const AmqpPublication copy = carried_copy(e, failed_at(e), "jobs");
  const AmqpMessage back = delivered(copy, 0);
  REQUIRE(find_field(back.headers, "price") != nullptr);
  REQUIRE(find_field(back.headers, "price")->text() != nullptr);
  CHECK(*find_field(back.headers, "price")->text() == "123.45");
  REQUIRE(find_field(back.headers, "tiny")->text() != nullptr);
  CHECK(*find_field(back.headers, "tiny")->text() == "0.0007");
  CHECK(find_field(back.headers, "tenant")->text() != nullptr);  // the rest as it was
  CHECK(stream_breaking_headers(held(back).message).empty());
  CHECK(held(back).delivery == 2);  // the copy counts on
}

TEST_CASE("amqp entry: a replayed message that ran ok has its notice for NAME.dlq.state; no other message has one") {
  const AmqpHeld e = held(replayed());
  const auto p = replay_notice_publication(settings(), e, ran_ok());
  REQUIRE(p.has_value());
  CHECK(p->exchange.empty());
  CHECK(p->routing_key == "jobs.dlq.state");
  CHECK(p->notice);
  CHECK(p->message.body.empty());  // views nothing: the body is p->body, set when sent
  const auto read = read_replay_notice(delivered(*p));
  REQUIRE(read.has_value());
  CHECK(read->tag.attempt == kTag.attempt);
  CHECK(read->tag.record == "5");
  CHECK(read->worker == "host:1");  // as its result's `worker`
  CHECK(read->message_id == "order-17");
  CHECK(read->output_omitted.empty());
  // The payload it ran, by its sha256: a replay takes the notice for the payload it republished only.
  CHECK(read->payload_sha256 == pillbox::sha256_hex(e.task.payload));
  CHECK(read->payload_sha256.size() == 64);
  // A copy of the publication (the settle's vector) holds its own body.
  const AmqpPublication copied = *p;
  CHECK(read_replay_notice(delivered(copied)).has_value());

  // Its output over --results-max-output: the notice says why the result lacks it.
  WorkerSettings small = settings();
  small.results_max_output = 2;
  const auto omitted = replay_notice_publication(small, e, ran_ok("more than two"));
  REQUIRE(omitted.has_value());
  const auto said = read_replay_notice(delivered(*omitted));
  REQUIRE(said.has_value());
  CHECK(said->output_omitted.find("too large: 13 bytes, over --results-max-output 2") != std::string::npos);
  // The same words as the result's output_omitted header.
  const auto result = result_publication(small, e, ran_ok("more than two"), "jobs.results");
  REQUIRE(result.has_value());
  const AmqpValue* header = find_field(result->message.headers, "output_omitted");
  REQUIRE(header != nullptr);
  CHECK(*header->text() == said->output_omitted);

  // --no-results: a reply still goes to a reply_to; without one, no result
  // is kept anywhere, and the notice says so.
  WorkerSettings no_results = settings();
  no_results.results = false;
  const auto none = replay_notice_publication(no_results, e, ran_ok());
  REQUIRE(none.has_value());
  CHECK(read_replay_notice(delivered(*none))->output_omitted.find("--no-results") != std::string::npos);
  AmqpMessage rpc = replayed();
  rpc.reply_to = "amq.gen-reply";
  const auto replied = replay_notice_publication(no_results, held(rpc), ran_ok());
  REQUIRE(replied.has_value());
  CHECK(read_replay_notice(delivered(*replied))->output_omitted.empty());

  // No tag, or one not of the replay's form: no notice.
  CHECK_FALSE(replay_notice_publication(settings(), held(message()), ran_ok()).has_value());
  AmqpMessage forged = message();
  add_replay_tag(forged.headers, ReplayTag{"xyz", "5"});
  CHECK_FALSE(replay_notice_publication(settings(), held(forged), ran_ok()).has_value());
  AmqpMessage twice = replayed();
  add_replay_tag(twice.headers, kTag);
  CHECK_FALSE(replay_notice_publication(settings(), held(twice), ran_ok()).has_value());
}

TEST_CASE("amqp entry: a replayed message's retry and give-back copies carry its tag on") {
  const AmqpHeld first = held(replayed());
  const AmqpPublication retry = carried_copy(first, failed_at(first), "jobs.delay.1024");
  check_tag(retry.message.headers);
  const AmqpHeld second = held(delivered(retry));
  check_tag(second.message.headers);
  // Given back (the worker stops), from a copy: still the replay's.
  const AmqpPublication back = carried_copy(second, recorded_release(2, "host:1", 1000, "released: stopping"), "jobs");
  const AmqpHeld third = held(delivered(back));
  check_tag(third.message.headers);
  CHECK(third.delivery == 3);
  // Once each: a copy never doubles them (a tag given twice is none).
  CHECK(std::count_if(back.message.headers.begin(), back.message.headers.end(),
                      [](const AmqpField& f) { return is_replay_tag_header(f.name); }) == 2);
  // So its ok, at the end, is still told to the replay.
  CHECK(replay_notice_publication(settings(), third, ran_ok()).has_value());
}

TEST_CASE("amqp entry: a replayed message's dead letter carries its tag, however little room the original's headers get") {
  WorkerSettings s = settings();
  s.fleet_key = FleetKey(std::string(32, 'k'));
  const AmqpHeld e = held(replayed());
  AmqpMessage back = delivered(dead_letter_publication(s, e, crash(), "failed again", 5000));
  check_tag(back.headers);
  const AmqpDeadLetter read = read_dead_letter(back);
  CHECK(read.unreadable.empty());
  CHECK(read.original.at("headers").contains(std::string(kReplayHeader)));
  CHECK(s.fleet_key->verify("jobs.dlq", dead_letter_signed_fields(back)) == Signature::kValid);

  // Behind 16 KiB of the original's own headers (carried up to there): still carried.
  AmqpMessage crowded = message();
  crowded.headers.push_back({"bulk", std::string(17u << 10, 'b')});
  add_replay_tag(crowded.headers, kTag);
  back = delivered(dead_letter_publication(s, held(crowded), crash(), "failed again", 5000));
  CHECK(find_field(back.headers, "bulk") == nullptr);
  check_tag(back.headers);

  // A key that leaves no room for the original's headers (they give way to
  // fit one frame): pillbox's stay, the tag among them.
  AmqpMessage big = replayed();
  big.headers[0].value = std::string(126u << 10, 'k');
  set_key_as_delivered(big);
  const AmqpPublication fitted = dead_letter_publication(s, held(big), crash(), "failed again", 5000);
  CHECK(find_field(fitted.message.headers, "tenant") == nullptr);
  check_tag(fitted.message.headers);

  // Headers that are no tag of the replay's form stay in pillbox-original only.
  AmqpMessage forged = message();
  add_replay_tag(forged.headers, ReplayTag{"xyz", "5"});
  back = delivered(dead_letter_publication(s, held(forged), crash(), "failed again", 5000));
  CHECK(find_field(back.headers, kReplayHeader) == nullptr);
  CHECK(find_field(back.headers, kReplayOfHeader) == nullptr);
  CHECK(read_dead_letter(back).original.at("headers").contains(std::string(kReplayHeader)));
}
