// Attacks on a RabbitMQ work message as a worker holds it (supervisor/
// broker/amqp_entry.h). Everything a message carries (body, message_id,
// correlation_id, reply_to, every header: key, pillbox-attempts,
// pillbox-deliveries, pillbox-sig, x-delivery-count, x-death) is written by
// whoever may publish to the queue. Each case here builds what such a
// publisher can send, or what one allowed to publish to NAME.dlx can make
// of a dead letter, and checks the safe outcome:
//   - a delivery number is judged only within 1..kMaxDeliveries, never
//     wrapped, whatever the counts say;
//   - a history that is not pillbox's refuses the message unrun as a
//     protocol error: never a throw, a crash, unbounded time or memory;
//   - a good message is never refused or counted lost for what its
//     publisher could not control (its history as pillbox wrote it reads
//     back as pillbox's, however long it grew);
//   - a copy never carries the broker's own headers (x-*, nor CC/BCC, which
//     would route it to other queues too), nor a second history, and fits
//     one AMQP frame (131072 bytes) with the message's own headers: a copy,
//     reply or dead letter the worker builds is one the broker takes;
//   - a dead letter's signature does not verify after any change to what
//     an operator reads of it (read_dead_letter: key, payload, message id,
//     queue, record, the original's properties, x-death), and its record
//     is kept (not replaced by "omitted") for a history or failure of any
//     size.
// What could take long (a quadratic path) runs in a child process killed
// at its bound, so that a regression fails the test instead of stalling.
#include <doctest/doctest.h>

#include <amqp.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_entry.h"
#include "supervisor/broker/fleet_key.h"
#include "tests/unit/amqp_worker_fixture.h"
#include "tests/child_run.h"

using namespace pillbox;
using namespace pillbox::broker;
using json = nlohmann::json;
using test_support::ChildRun;
using test_support::in_child;

namespace {

using amqp_fixture::delivered;
using amqp_fixture::held;
using amqp_fixture::set_key_as_delivered;

constexpr std::size_t kFrameMax = 131072;  // RabbitMQ's and rabbitmq-c's default frame_max

WorkerSettings settings() { return amqp_fixture::worker_settings(); }

// The message's `key` as amqp_connection.cpp's message_of reads it: the
// first header named key, when it is a string ('S' or 'x').
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

// `m` with pillbox's history headers as a publisher wrote them.
AmqpMessage with_history(AmqpValue deliveries, std::string attempts, std::int64_t count = 0) {
  AmqpMessage m = message(count);
  m.headers.push_back({std::string(kDeliveriesHeader), std::move(deliveries)});
  m.headers.push_back({std::string(kAttemptsHeader), std::move(attempts)});
  return m;
}

Outcome crash(std::size_t message_bytes = 16, std::size_t frames = 2) {
  Outcome o;
  o.kind = Kind::kCrash;
  o.fingerprint = "pb1-0123456789abcdef";
  o.signal = 11;
  o.message = std::string(message_bytes, 'm');
  for (std::size_t i = 0; i < frames; ++i) o.crash_state.push_back("parse_" + std::to_string(i) + std::string(90, 'f'));
  return o;
}

RecordedDelivery failed_at(const AmqpHeld& e, const Outcome& o = crash()) {
  return recorded_outcome(static_cast<std::uint32_t>(e.delivery), "host:1", 1000, o, true, false);
}

// `{"delivery":N}` records from..to: the shortest text parse_delivery takes.
std::string minimal_records(std::uint32_t from, std::uint32_t to) {
  std::string text = "[";
  for (std::uint32_t n = from; n <= to; ++n) text += (n > from ? ",{\"delivery\":" : "{\"delivery\":") + std::to_string(n) + "}";
  return text + "]";
}

// The wire size of a header table, by rabbitmq-c's own encoder (what
// basic.publish puts in the content header frame).
std::size_t wire_size(const AmqpTable& headers) {
  AmqpTableEncoder encoder;
  amqp_table_t raw = encoder.encode(headers);
  std::string buffer(1u << 18, '\0');
  amqp_bytes_t bytes{buffer.size(), buffer.data()};
  std::size_t offset = 0;
  // No assertion here: it is called inside INFO's lazy text too.
  if (amqp_encode_table(bytes, &raw, &offset) != AMQP_STATUS_OK) return std::numeric_limits<std::size_t>::max();
  return offset;
}

// The content header frame basic.publish sends for `m` as amqp_connection
// sends it (delivery mode, message id, correlation id, reply-to, headers):
// frame header and end (8), class, weight, body size, property flags (14).
std::size_t header_frame_size(const AmqpOutgoing& m) {
  std::size_t size = 8 + 14 + 1;
  for (const std::string* p : {&m.message_id, &m.correlation_id, &m.reply_to}) {
    if (!p->empty()) size += 1 + p->size();
  }
  if (!m.headers.empty()) size += wire_size(m.headers);
  return size;
}

// Why AmqpConnection::publish_to would refuse to send `p` (its names: 1 to
// 255 bytes without NUL), or "".
std::string unsendable(const AmqpPublication& p) {
  auto bad = [](const std::string& s) { return s.empty() || s.size() > 255 || s.find('\0') != std::string::npos; };
  if (!p.exchange.empty() && bad(p.exchange)) return "exchange";
  if (p.exchange.empty() && bad(p.routing_key)) return "routing key";
  for (const std::string* s : {&p.message.message_id, &p.message.correlation_id, &p.message.reply_to}) {
    if (!s->empty() && bad(*s)) return "property";
  }
  for (const AmqpField& f : p.message.headers) {
    if (bad(f.name)) return "header name";
  }
  return "";
}

// A publication the broker takes: sendable, its content header one frame.
bool broker_takes(const AmqpPublication& p) {
  return unsendable(p).empty() && header_frame_size(p.message) <= kFrameMax;
}

bool refused_as_protocol_error(const std::optional<Refused>& r) {
  return r.has_value() && r->protocol_error && r->outcome.kind == Kind::kProtocolError;
}

}  // namespace

TEST_CASE("amqp entry attack: delivery counts near the integer limits are refused unrun, never wrapped") {
  struct Case {
    std::string what;
    AmqpValue deliveries;
    std::int64_t count;
  };
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::vector<Case> cases = {
      {"pillbox-deliveries 2^63-1, x-delivery-count 2^63-1", AmqpValue(kMax), kMax},
      {"pillbox-deliveries 2^63-2, x-delivery-count 1", AmqpValue(kMax - 1), 1},
      {"pillbox-deliveries 2^63-1, first delivery", AmqpValue(kMax), 0},
      {"pillbox-deliveries 'L' 2^64-1", AmqpValue::of_kind('L', std::numeric_limits<std::uint64_t>::max()), 0},
      {"pillbox-deliveries 'L' 2^63", AmqpValue::of_kind('L', std::uint64_t{1} << 63), 0},
      {"pillbox-deliveries -1", AmqpValue(std::int64_t{-1}), 0},
      {"pillbox-deliveries -2^63", AmqpValue(std::numeric_limits<std::int64_t>::min()), 0},
      {"pillbox-deliveries kMaxDeliveries", AmqpValue(kMaxDeliveries), 0},
      {"pillbox-deliveries kMaxDeliveries-1, x-delivery-count kMaxDeliveries", AmqpValue(kMaxDeliveries - 1),
       kMaxDeliveries},
      {"pillbox-deliveries 1, x-delivery-count 2^63-1", AmqpValue(std::int64_t{1}), kMax},
      {"pillbox-deliveries a timestamp of 2^64-1", AmqpValue::timestamp(std::numeric_limits<std::uint64_t>::max()), 0},
      {"pillbox-deliveries 3.0", AmqpValue::of_kind('d', 3.0), 0},
      {"pillbox-deliveries true", AmqpValue(true), 0},
      {"pillbox-deliveries \"3\"", AmqpValue(std::string("3")), 0},
      {"pillbox-deliveries 'x' bytes \"3\"", AmqpValue::of_kind('x', std::string("3")), 0},
      {"pillbox-deliveries void", AmqpValue(), 0},
      {"pillbox-deliveries an array", AmqpValue::array({AmqpValue(std::int64_t{3})}), 0},
      {"pillbox-deliveries a table", AmqpValue::table({{"n", std::int64_t{3}}}), 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    AmqpMessage m = with_history(c.deliveries, "[]");
    m.delivery_count = c.count;
    const AmqpHeld e = held(m);
    CHECK(e.delivery >= 1);  // never wrapped below
    CHECK(e.carried >= 0);
    CHECK(e.carried < kMaxDeliveries);
    CHECK(e.history.recorded.empty());
    CHECK(e.history.lost.empty());
    const auto r = check_message(settings(), e);
    CHECK(refused_as_protocol_error(r));
  }

  // The broker's count alone, out of range: refused, its history unread.
  AmqpMessage far = message();
  far.delivery_count = kMax;
  const AmqpHeld e = held(far);
  CHECK(e.delivery == kMaxDeliveries + 1);
  CHECK(e.history.lost.empty());
  const auto r = check_message(settings(), e);
  REQUIRE(r.has_value());
  CHECK(r->reason == "delivery count out of range: not run");

  // A count below zero (message_of never makes one) is no earlier delivery.
  AmqpMessage below = message();
  below.delivery_count = std::numeric_limits<std::int64_t>::min();
  CHECK(held(below).delivery == 1);

  // The edge: 9999 carried (the last one recorded) is judged at delivery
  // 10000; one more delivery by the broker is out of range.
  const std::string last = "[" + delivery_json(recorded_release(9999, "w", 1, "released: stopping")) + "]";
  const AmqpHeld edge = held(with_history(AmqpValue(std::int64_t{9999}), last));
  CHECK(edge.delivery == kMaxDeliveries);
  CHECK(edge.history_unreadable.empty());
  CHECK(edge.history.lost == std::vector<std::uint32_t>{1});  // 2..9998: suspects', never started
  // Judged, not out of range: 9998 deliveries never reported back, past
  // the delivery limit kept across copies (a supervisor-lost dead letter).
  const auto judged = check_message(settings(), edge);
  REQUIRE(judged.has_value());
  CHECK(judged->reason == "9998 deliveries never reported back: past the delivery limit; not run again");
  CHECK(judged->outcome.kind == Kind::kSupervisorLost);
  const AmqpHeld beyond = held(with_history(AmqpValue(std::int64_t{9999}), last, 1));
  CHECK(beyond.delivery == kMaxDeliveries + 1);
  CHECK(refused_as_protocol_error(check_message(settings(), beyond)));
}

TEST_CASE("amqp entry attack: a history header too long, too deep or not JSON is refused unrun") {
  auto refusal = [](AmqpValue attempts, std::int64_t carried = 1) {
    AmqpMessage m = message();
    m.headers.push_back({std::string(kDeliveriesHeader), carried});
    m.headers.push_back({std::string(kAttemptsHeader), std::move(attempts)});
    const AmqpHeld e = held(m);
    const auto r = check_message(settings(), e);
    CHECK(refused_as_protocol_error(r));
    CHECK(e.history.recorded.empty());
    return r ? r->outcome.message : std::string();
  };
  const std::string one = delivery_json(recorded_release(1, "w", 1, "released"));

  // 48 KiB + 1: over what a copy carries, never parsed.
  std::string padded = "[" + one + std::string(kMaxCarriedHistory - one.size() - 2 + 1, ' ') + "]";
  REQUIRE(padded.size() == kMaxCarriedHistory + 1);
  CHECK(refusal(padded).find("bytes long") != std::string::npos);
  // Exactly 48 KiB is read (pillbox's own copies may reach it).
  padded.erase(padded.size() - 2, 1);
  REQUIRE(padded.size() == kMaxCarriedHistory);
  const AmqpHeld at_limit = held(with_history(AmqpValue(std::int64_t{1}), padded));
  CHECK(at_limit.history_unreadable.empty());
  CHECK(at_limit.history.recorded.size() == 1);

  // Deeply nested, in arrays or objects, balanced or not: refused by depth
  // (or, longer, by size), never parsed.
  CHECK(refusal(std::string(40000, '[')).find("deeper") != std::string::npos);
  CHECK(refusal(std::string(200000, '[')).find("bytes long") != std::string::npos);
  std::string objects;
  for (int i = 0; i < 5000; ++i) objects += "{\"a\":";
  CHECK(refusal("[" + objects).find("deeper") != std::string::npos);
  CHECK(refusal(std::string(20000, '[') + std::string(20000, ']')).find("deeper") != std::string::npos);

  // Not JSON, not UTF-8, a NUL, not an array.
  CHECK(refusal(std::string("[{\"delivery\":1,\"worker\":\"\xff\xfe\"}]")).find("not JSON") != std::string::npos);
  // nlohmann's parser stops at a NUL: what follows it would be read by no
  // one, so a text with one is not pillbox's.
  CHECK(refusal(std::string("[{\"delivery\":1}]\0[]", 19)).find("NUL") != std::string::npos);
  CHECK(refusal(std::string("[{\"delivery\":1}]\0", 17)).find("NUL") != std::string::npos);
  CHECK(refusal(std::string("[{\"delivery\":1},]")).find("not JSON") != std::string::npos);
  for (const std::string not_array : {"{}", "1", "\"[]\"", "null", "true", ""}) {
    CAPTURE(not_array);
    refusal(not_array);
  }
  // Of another kind than a string.
  CHECK(refusal(AmqpValue(std::int64_t{1})).find("not a string") != std::string::npos);
  CHECK(refusal(AmqpValue::array({AmqpValue(one)})).find("not a string") != std::string::npos);
  CHECK(refusal(AmqpValue::table({{"1", AmqpValue(one)}})).find("not a string") != std::string::npos);
  CHECK(refusal(AmqpValue()).find("not a string") != std::string::npos);
  // Bytes ('x') are a string's bytes: read alike.
  AmqpMessage as_bytes = with_history(AmqpValue(std::int64_t{1}), "");
  as_bytes.headers.back().value = AmqpValue::of_kind('x', "[" + one + "]");
  const AmqpHeld x = held(as_bytes);
  CHECK(x.history_unreadable.empty());
  CHECK(x.history.recorded.size() == 1);

  // A history that nests deep is refused fast, whatever its size.
  const ChildRun run = in_child(std::chrono::seconds(20), [] {
    const auto started = std::chrono::steady_clock::now();
    for (int i = 0; i < 50; ++i) {
      AmqpMessage m = with_history(AmqpValue(std::int64_t{1}), std::string(kMaxCarriedHistory, '['));
      const AmqpHeld e = held(m);
      if (e.history_unreadable.empty()) return std::string("read as pillbox's");
    }
    return "ok in " + std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  });
  INFO("child: " << run.said << ", " << run.seconds << " s");
  CHECK(run.finished);
  CHECK(run.said.rfind("ok", 0) == 0);
  CHECK(run.seconds < 5.0);
}

TEST_CASE("amqp entry attack: a record a copy could not have carried refuses the message, never counts") {
  const std::string last = delivery_json(recorded_release(3, "w", 1, "released"));
  auto refused_with = [&](const std::string& record) {
    CAPTURE(record);
    const AmqpHeld e = held(with_history(AmqpValue(std::int64_t{3}), "[" + record + "," + last + "]"));
    CHECK_FALSE(e.history_unreadable.empty());
    CHECK(refused_as_protocol_error(check_message(settings(), e)));
  };
  // Deliveries out of 1..3, or not whole numbers that fit.
  for (const std::string n : {"0", "-1", "4", "10001", "4294967297", "4294967296", "18446744073709551615",
                        "18446744073709551616", "1e300", "1.0", "1.5", "-0", "\"1\"", "true", "null", "[1]", "{}"}) {
    refused_with(std::string("{\"delivery\":") + n + "}");
  }
  refused_with("{\"kind\":\"crash\"}");  // no delivery
  refused_with("1");
  refused_with("[]");
  refused_with("\"{\\\"delivery\\\":1}\"");
  refused_with(last);  // delivery 3 twice
  // Fields of the wrong type: not a record pillbox wrote.
  for (const std::string f : {"\"kind\":7", "\"kind\":\"no-such-kind\"", "\"charged\":\"yes\"", "\"transient\":1",
                        "\"crash_state\":\"x\"", "\"crash_state\":[1]", "\"at_ms\":1.5", "\"at_ms\":null",
                        "\"signal\":\"SIGFOO\"", "\"signal\":-1", "\"exit_code\":4294967296", "\"worker\":5",
                        "\"note\":[]", "\"cpu_ms\":-1", "\"fingerprint\":{}"}) {
    refused_with(std::string("{\"delivery\":1,") + f + "}");
  }

  // Duplicate keys in a record: read one way only (the last), never twice.
  const AmqpHeld dup = held(with_history(
      AmqpValue(std::int64_t{3}), "[{\"delivery\":1,\"delivery\":2,\"kind\":\"crash\",\"kind\":\"\",\"charged\":false}," +
                                      last + "]"));
  if (dup.history_unreadable.empty()) {
    REQUIRE(dup.history.recorded.size() == 2);
    CHECK(dup.history.recorded[0].delivery == 2);
    CHECK(dup.history.recorded[0].kind.empty());
    CHECK(dup.history.lost == std::vector<std::uint32_t>{1});
  }

  // pillbox on RabbitMQ writes no start marker (none can be written): one
  // is not its record.
  refused_with("{\"delivery\":1,\"kind\":\"\",\"started\":true}");
  // A copy carries the record of the delivery it was copied at: a history
  // without it is not pillbox's (not one whose deliveries all read as lost).
  const AmqpHeld forged = held(with_history(AmqpValue(std::int64_t{5}), "[]"));
  CHECK(refused_as_protocol_error(check_message(settings(), forged)));
  const AmqpHeld forged_earlier = held(with_history(
      AmqpValue(std::int64_t{5}), "[" + delivery_json(recorded_release(2, "w", 1, "released")) + "]"));
  CHECK(refused_as_protocol_error(check_message(settings(), forged_earlier)));
}

TEST_CASE("amqp entry attack: repeated history headers are refused, and a copy carries one history") {
  const std::string one = "[" + delivery_json(recorded_release(1, "w", 1, "released")) + "]";
  const std::vector<AmqpTable> repeated = {
      {{std::string(kDeliveriesHeader), std::int64_t{1}},
       {std::string(kAttemptsHeader), one},
       {std::string(kAttemptsHeader), one}},
      {{std::string(kDeliveriesHeader), std::int64_t{1}},
       {std::string(kDeliveriesHeader), std::int64_t{1}},
       {std::string(kAttemptsHeader), one}},
      {{std::string(kAttemptsHeader), std::int64_t{1}},
       {std::string(kDeliveriesHeader), std::int64_t{1}},
       {std::string(kAttemptsHeader), one}},
      {{std::string(kDeliveriesHeader), std::string("x")},
       {std::string(kAttemptsHeader), one},
       {std::string(kDeliveriesHeader), std::int64_t{1}}},
  };
  for (const AmqpTable& extra : repeated) {
    AmqpMessage m = message();
    m.headers.insert(m.headers.end(), extra.begin(), extra.end());
    const AmqpHeld e = held(m);
    CHECK(refused_as_protocol_error(check_message(settings(), e)));
    CHECK(e.history.recorded.empty());
    // Kept as they came (its dead letter's pillbox-original shows them).
    CHECK(e.message.headers == m.headers);
  }

  // Names that only look like pillbox's are the message's own: carried as
  // they came, never read; the copy carries exactly one history, pillbox's.
  AmqpMessage m = message();
  m.headers.push_back({"Pillbox-Attempts", std::string("[{\"delivery\":1}]")});
  m.headers.push_back({"pillbox-deliveries ", std::int64_t{9}});
  m.headers.push_back({"history", AmqpValue::table({{std::string(kAttemptsHeader), std::string("[]")},
                                                     {std::string(kDeliveriesHeader), std::int64_t{7}}})});
  const AmqpHeld e = held(m);
  CHECK(e.delivery == 1);
  CHECK(e.history_unreadable.empty());
  const AmqpPublication copy = carried_copy(e, failed_at(e), "jobs.delay.1024");
  std::size_t attempts = 0, deliveries = 0;
  for (const AmqpField& f : copy.message.headers) {
    attempts += f.name == kAttemptsHeader;
    deliveries += f.name == kDeliveriesHeader;
  }
  CHECK(attempts == 1);
  CHECK(deliveries == 1);
  const AmqpHeld next = held(delivered(copy));
  CHECK(next.delivery == 2);
  CHECK(next.history_unreadable.empty());
  CHECK(next.history.recorded.size() == 1);
}

TEST_CASE("amqp entry attack: a message given back unchecked never has its history made pillbox's") {
  // A worker that stops gives back what it holds, checked or not (its copy
  // records the delivery as not run). A history that is not pillbox's must
  // not come back as one that is: the next worker refuses it alike.
  const std::string garbage = "[{\"delivery\":1,\"kind\":7}]";
  const std::vector<AmqpTable> histories = {
      {{std::string(kDeliveriesHeader), std::int64_t{5}}, {std::string(kAttemptsHeader), std::string("[]")}},
      {{std::string(kDeliveriesHeader), std::int64_t{1}}, {std::string(kAttemptsHeader), garbage}},
      {{std::string(kDeliveriesHeader), std::int64_t{9998}}, {std::string(kAttemptsHeader), std::string("{")}},
      {{std::string(kDeliveriesHeader), std::int64_t{3}}},
      {{std::string(kDeliveriesHeader), std::string("3")}, {std::string(kAttemptsHeader), std::string("[]")}},
      {{std::string(kAttemptsHeader), std::string("[]")}, {std::string(kAttemptsHeader), std::string("[]")}},
  };
  for (const AmqpTable& history : histories) {
    AmqpMessage m = message();
    m.headers.insert(m.headers.end(), history.begin(), history.end());
    AmqpHeld e = held(m);
    REQUIRE(refused_as_protocol_error(check_message(settings(), e)));
    AmqpHeld again = e;
    for (int i = 0; i < 3; ++i) {
      const RecordedDelivery released =
          recorded_release(static_cast<std::uint32_t>(again.delivery), "host:1", 1, "released: the worker is stopping");
      const AmqpPublication copy = carried_copy(again, released, "jobs");
      CHECK(broker_takes(copy));
      again = held(delivered(copy));
      CHECK(refused_as_protocol_error(check_message(settings(), again)));
      CHECK(again.history_unreadable == e.history_unreadable);
    }
  }
}

TEST_CASE("amqp entry attack: a copy carries none of the broker's headers: x-*, nor CC and BCC that route it") {
  AmqpMessage m = message(1);
  m.headers.push_back({"x-death", AmqpValue::array({AmqpValue::table({{"queue", std::string("jobs")},
                                                                      {"reason", std::string("rejected")},
                                                                      {"count", std::int64_t{1}}})})});
  m.headers.push_back({"x-first-death-queue", std::string("jobs")});
  m.headers.push_back({"x-first-death-reason", std::string("rejected")});
  m.headers.push_back({"x-", std::string("")});
  // Sender-selected distribution: RabbitMQ routes a message to the queues
  // CC and BCC name as well (the default exchange: any queue), and keeps CC
  // on the message it delivers. Carried on, each copy would also land in
  // NAME (a copy that does not wait, and copies of copies: a message that
  // multiplies) or NAME.dlq, under the worker's rights.
  m.headers.push_back({"CC", AmqpValue::array({AmqpValue(std::string("jobs")), AmqpValue(std::string("jobs.dlq"))})});
  m.headers.push_back({"BCC", AmqpValue::array({AmqpValue(std::string("jobs.results"))})});
  const AmqpHeld e = held(m);
  REQUIRE_FALSE(check_message(settings(), e).has_value());
  const AmqpPublication copy = carried_copy(e, failed_at(e), "jobs.delay.1024");
  for (const AmqpField& f : copy.message.headers) {
    CAPTURE(f.name);
    CHECK(f.name.rfind("x-", 0) != 0);
    CHECK(f.name != "CC");
    CHECK(f.name != "BCC");
  }
  CHECK(find_field(copy.message.headers, "tenant") != nullptr);  // its own are carried

  // Nor a dead letter: a CC of another type than an array is refused by
  // the broker (unacceptable_type_in_header), the dead letter with it.
  AmqpMessage scalar = message();
  scalar.headers.push_back({"CC", std::string("jobs")});
  scalar.headers.push_back({"BCC", std::string("jobs")});
  const AmqpHeld s = held(scalar);
  const AmqpPublication dl = dead_letter_publication(settings(), s, crash(), "failed", 1000);
  CHECK(find_field(dl.message.headers, "CC") == nullptr);
  CHECK(find_field(dl.message.headers, "BCC") == nullptr);
  const AmqpPublication dl2 = dead_letter_publication(settings(), e, crash(), "failed", 1000);
  CHECK(find_field(dl2.message.headers, "CC") == nullptr);
  CHECK(find_field(dl2.message.headers, "BCC") == nullptr);
}

TEST_CASE("amqp entry attack: short records that a copy would write long: refused or carried within bounds, fast") {
  // 48 KiB of `{"delivery":N}` records (a release each, pillbox's fields
  // defaulted): re-written as pillbox writes them, five times as long, past
  // what the next worker reads, and past one frame. Cutting details never
  // shrinks them: the cut must not be quadratic either.
  // Filled to the limit, and 1 KiB short of it.
  for (const std::size_t room : {std::size_t{0}, std::size_t{1024}}) {
    CAPTURE(room);
    const ChildRun run = in_child(std::chrono::seconds(30), [room] {
      std::uint32_t n = 1;
      for (std::size_t size = minimal_records(1, 1).size();; ++n) {
        size += minimal_records(n + 1, n + 1).size() - 1;  // ",{...}"
        if (size > kMaxCarriedHistory - room) break;
      }
      const std::string attempts = minimal_records(1, n);
      if (attempts.size() > kMaxCarriedHistory - room || attempts.size() + 32 < kMaxCarriedHistory - room) {
        return std::string("UNSAFE test: ") + std::to_string(attempts.size()) + " bytes of records";
      }
      AmqpMessage m = with_history(AmqpValue(static_cast<std::int64_t>(n)), attempts);
      if (wire_size(m.headers) > 120000) return std::string("UNSAFE test: the original does not fit a frame");
      const auto started = std::chrono::steady_clock::now();
      const AmqpHeld e = held(m);
      const auto r = check_message(settings(), e);
      std::string verdict;
      if (r) {
        verdict = refused_as_protocol_error(r) ? "safe: refused unrun as a protocol error" : "UNSAFE: refused as " + r->reason;
      } else {
        const AmqpPublication copy = carried_copy(e, failed_at(e), "jobs");
        const AmqpValue* h = find_field(copy.message.headers, kAttemptsHeader);
        const AmqpHeld next = held(delivered(copy));
        if (h == nullptr || h->text() == nullptr) {
          verdict = "UNSAFE: no history";
        } else if (h->text()->size() > kMaxCarriedHistory) {
          verdict = "UNSAFE: the copy's history is " + std::to_string(h->text()->size()) + " bytes";
        } else if (!broker_takes(copy)) {
          verdict = "UNSAFE: the broker refuses the copy";
        } else if (!next.history_unreadable.empty()) {
          verdict = "UNSAFE: the next worker refuses the copy: " + next.history_unreadable;
        } else if (next.history.recorded.size() != n + 1 || !next.history.lost.empty()) {
          verdict = "UNSAFE: the copy's history reads otherwise";
        } else {
          verdict = "safe: carried";
        }
      }
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      return verdict + " (" + std::to_string(n) + " records, " + std::to_string(took) + " s)";
    });
    INFO("child: " << run.said << ", " << run.seconds << " s, signal " << run.signal);
    CHECK_MESSAGE(run.finished, "did not finish within 30 s");
    CHECK(run.said.rfind("safe", 0) == 0);
    CHECK(run.said.rfind(room == 0 ? "safe: refused" : "safe: carried", 0) == 0);
    CHECK(run.seconds < 5.0);
  }
}

TEST_CASE("amqp entry attack: a good message's history, however long, reads back as pillbox's") {
  // A message given back or failing transiently N times (each recorded,
  // none charged: nothing its publisher controls). Either the copy reads
  // back as pillbox's history and fits a frame, or the worker refuses it
  // before it runs (its history is full), never a copy the next worker
  // calls "not pillbox's" or the broker refuses.
  const Outcome transient = [] {
    Outcome o = crash(kMaxRecordedMessage, 40);
    o.kind = Kind::kSandboxError;
    o.fingerprint = "pb1-fedcba9876543210";
    return o;
  }();
  for (const std::uint32_t n : {1u, 10u, 100u, 400u, 700u, 1000u, 1500u, 2500u, 9998u}) {
    CAPTURE(n);
    AmqpHeld e = held(message());
    for (std::uint32_t d = 1; d <= n; ++d) {
      e.history.recorded.push_back(d % 2 == 0 ? recorded_release(d, "host-with-a-long-name:123456", 1733500000000,
                                                                 "released: the worker is stopping (SIGTERM)")
                                              : recorded_outcome(d, "host-with-a-long-name:123456", 1733500000000,
                                                                 transient, false, true, "transient: retried"));
    }
    e.delivery = n + 1;
    e.carried = n;
    if (auto r = check_message(settings(), e)) {
      CHECK(refused_as_protocol_error(r));
      CHECK(n >= 400);  // not a short history
      continue;
    }
    const AmqpPublication copy = carried_copy(e, failed_at(e, transient), "jobs.delay.1024");
    CHECK(broker_takes(copy));
    const AmqpValue* h = find_field(copy.message.headers, kAttemptsHeader);
    REQUIRE(h != nullptr);
    CHECK(h->text()->size() <= kMaxCarriedHistory);
    const AmqpHeld next = held(delivered(copy));
    CHECK(next.history_unreadable.empty());
    CHECK(next.delivery == n + 2);
    CHECK(next.history.lost.empty());
    REQUIRE(next.history.recorded.size() == n + 1);
    // What judging needs is kept, record by record.
    for (std::uint32_t d = 1; d <= n; ++d) {
      const RecordedDelivery& r = next.history.recorded[d - 1];
      CHECK(r.delivery == d);
      CHECK(r.kind == e.history.recorded[d - 1].kind);
      CHECK(r.fingerprint == e.history.recorded[d - 1].fingerprint);
      CHECK(r.charged == e.history.recorded[d - 1].charged);
      CHECK(r.transient == e.history.recorded[d - 1].transient);
      if (r.kind != e.history.recorded[d - 1].kind) break;
    }
    CHECK(next.history.recorded.back().fingerprint == transient.fingerprint);
  }
}

TEST_CASE("amqp entry attack: big own headers and a long history never make a copy the broker refuses") {
  // Originals that fit one frame: own headers of 20 to 126 KiB, with no
  // history, or one of pillbox's shape that nearly fills
  // kMaxCarriedHistory. A copy adds a record (a big crash's: its message
  // and 64 frames) and carries the rest on: it must fit a frame too, or
  // the message must be refused before it runs.
  std::string full = "[";
  std::uint32_t records = 0;
  for (;;) {
    const std::string r =
        delivery_json(recorded_outcome(records + 1, "host:1", 1, crash(kMaxRecordedMessage, 20), false, true));
    if (full.size() + r.size() + 2 > kMaxCarriedHistory - 1024) break;
    full += (records++ > 0 ? "," : "") + r;
  }
  full += "]";
  std::size_t checked = 0;
  for (const bool with_history : {false, true}) {
    for (const std::size_t own_kib : {20, 40, 56, 60, 63, 64, 65, 68, 72, 80, 96, 112, 120, 124, 126}) {
      CAPTURE(with_history);
      CAPTURE(own_kib);
      AmqpMessage m = message();
      if (with_history) {
        m.headers.push_back({std::string(kDeliveriesHeader), static_cast<std::int64_t>(records)});
        m.headers.push_back({std::string(kAttemptsHeader), full});
      }
      for (std::size_t i = 0, size = wire_size(m.headers); size + 4200 < own_kib << 10; ++i) {
        m.headers.push_back({"own-" + std::to_string(i), std::string(4000, 'h')});
        size += 1 + m.headers.back().name.size() + 5 + 4000;
      }
      AmqpOutgoing as_published;
      as_published.message_id = m.message_id;
      as_published.correlation_id = m.correlation_id;
      as_published.headers = m.headers;
      if (header_frame_size(as_published) > kFrameMax) continue;  // never delivered
      ++checked;
      const AmqpHeld e = held(m);
      REQUIRE(e.history_unreadable.empty());
      if (auto r = check_message(settings(), e)) {
        CHECK(refused_as_protocol_error(r));
        CHECK(own_kib > 48);  // a message with a few KiB of headers runs
      } else {
        for (const Outcome& o : {crash(kMaxRecordedMessage, 64), crash()}) {
          const AmqpPublication copy = carried_copy(e, failed_at(e, o), "jobs.delay.1024");
          const std::size_t copy_size = wire_size(copy.message.headers);
          INFO("the copy's headers: " << copy_size << " bytes");
          CHECK(broker_takes(copy));
          CHECK(held(delivered(copy)).history_unreadable.empty());
        }
      }
      // Its dead letter, refused or not.
      const AmqpPublication dl = dead_letter_publication(settings(), e, crash(kMaxRecordedMessage, 64), "failed", 1);
      CHECK(broker_takes(dl));
    }
  }
  CHECK(checked > 15);
}

TEST_CASE("amqp entry attack: the dead letter of a message with a key near a frame's size fits one frame") {
  // Refused for its key (over --max-key), the message is dead-lettered
  // with its key whole in the header `key`, beside its own headers: its
  // own give way (all are in pillbox-original, or said to be omitted), and
  // the record holds the key's first bytes. A key within 8 KiB of a
  // frame's size leaves no room for the record: not checked here (see
  // amqp_entry.h).
  std::size_t checked = 0;
  for (const std::size_t key_kib : {16, 96, 112, 116, 118}) {
    for (const std::size_t own : {0, 8000, 12000, 16000, 20000}) {
      CAPTURE(key_kib);
      CAPTURE(own);
      AmqpMessage m = message();
      m.headers[0].value = std::string(key_kib << 10, 'k');
      m.key = m.headers[0].value.text() ? std::optional<std::string>(*m.headers[0].value.text()) : std::nullopt;
      for (std::size_t i = 0; i * 4000 < own; ++i) m.headers.push_back({"own-" + std::to_string(i), std::string(3990, 'h')});
      AmqpOutgoing as_published;
      as_published.message_id = m.message_id;
      as_published.correlation_id = m.correlation_id;
      as_published.headers = m.headers;
      if (header_frame_size(as_published) > kFrameMax) continue;  // never delivered
      ++checked;
      const AmqpHeld e = held(m);
      const auto r = check_message(settings(), e);
      REQUIRE(refused_as_protocol_error(r));
      WorkerSettings s = settings();
      s.fleet_key = FleetKey(std::string(32, 'k'));
      const AmqpPublication dl = dead_letter_publication(s, e, r->outcome, r->reason, 1);
      CHECK(broker_takes(dl));
      const AmqpMessage back = delivered(dl);
      const AmqpDeadLetter read = read_dead_letter(back);
      CHECK(read.key == e.task.key);
      CHECK(read.record.value("kind", "") == "protocol-error");
      CHECK(s.fleet_key->verify("jobs.dlq", dead_letter_signed_fields(back)) == Signature::kValid);
    }
  }
  CHECK(checked > 15);
}

TEST_CASE("amqp entry attack: ids and names pillbox could not send back refuse the message unrun") {
  // AMQP sends names as short strings; pillbox sends them as C strings (no
  // NUL) of 1..255 bytes. A copy, a reply or a dead letter with such a name
  // would be refused at publish: the message is refused before it runs.
  struct Case {
    std::string what;
    std::function<void(AmqpMessage&)> make;
  };
  const std::vector<Case> cases = {
      {"message_id with NUL", [](AmqpMessage& m) { m.message_id = std::string("ord\0er", 6); }},
      {"correlation_id with NUL", [](AmqpMessage& m) { m.correlation_id = std::string("req\0", 4); }},
      {"reply_to with NUL", [](AmqpMessage& m) { m.reply_to = std::string("amq.gen-\0x", 10); }},
      {"reply_to of 256 bytes", [](AmqpMessage& m) { m.reply_to = std::string(256, 'r'); }},
      {"message_id of 256 bytes", [](AmqpMessage& m) { m.message_id = std::string(256, 'i'); }},
      {"a header named \"\"", [](AmqpMessage& m) { m.headers.push_back({"", std::string("v")}); }},
      {"a header name with NUL", [](AmqpMessage& m) { m.headers.push_back({std::string("a\0b", 3), std::string("v")}); }},
      {"a header name of 256 bytes", [](AmqpMessage& m) { m.headers.push_back({std::string(256, 'n'), std::int64_t{1}}); }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    AmqpMessage m = message();
    c.make(m);
    const AmqpHeld e = held(m);
    if (auto r = check_message(settings(), e)) {
      CHECK(refused_as_protocol_error(r));
      // Its dead letter is sendable: pillbox leaves out what is not.
      const AmqpPublication dl = dead_letter_publication(settings(), e, r->outcome, r->reason, 1);
      CHECK(unsendable(dl).empty());
      continue;
    }
    const AmqpPublication copy = carried_copy(e, failed_at(e), "jobs.delay.1024");
    CHECK(unsendable(copy).empty());
    Outcome ok;
    ok.kind = Kind::kOk;
    ok.exit_code = 0;
    const auto reply = result_publication(settings(), e, ok, "jobs.results");
    REQUIRE(reply.has_value());
    CHECK(unsendable(*reply).empty());
  }
  // A broker's header of any name is dropped from a copy, not refused.
  AmqpMessage broker = message();
  broker.headers.push_back({std::string("x-\0", 3), std::int64_t{1}});
  const AmqpHeld b = held(broker);
  if (!check_message(settings(), b)) CHECK(unsendable(carried_copy(b, failed_at(b), "jobs")).empty());
}

TEST_CASE("amqp entry attack: a reply is never published into the fleet's own queues") {
  // reply_to NAME: its result becomes a task (output as payload, the key
  // again), whose reply_to... runs for ever; NAME.delay.MS likewise after
  // a wait; NAME.dlq: a dead letter pillbox never wrote, under the worker's
  // name.
  Outcome ok;
  ok.kind = Kind::kOk;
  ok.exit_code = 0;
  ok.output = "out";
  for (const std::string to : {"jobs", "jobs.dlq", "jobs.delay.1024", "jobs.delay.1", "jobs.dlx"}) {
    CAPTURE(to);
    AmqpMessage m = message();
    m.reply_to = to;
    const AmqpHeld e = held(m);
    if (auto r = check_message(settings(), e)) {
      CHECK(refused_as_protocol_error(r));
      continue;
    }
    const auto reply = result_publication(settings(), e, ok, "jobs.results");
    if (reply) CHECK(reply->routing_key != to);
  }
  // Other queues are the requester's to name.
  for (const std::string to : {"amq.rabbitmq.reply-to", "amq.gen-Xa2", "jobs.results", "jobs2", "other.jobs"}) {
    CAPTURE(to);
    AmqpMessage m = message();
    m.reply_to = to;
    const AmqpHeld e = held(m);
    CHECK_FALSE(check_message(settings(), e).has_value());
    const auto reply = result_publication(settings(), e, ok, "");
    REQUIRE(reply.has_value());
    CHECK(reply->routing_key == to);
  }
}

namespace {

// What an operator reads of a dead letter (read_dead_letter), as text.
struct Read {
  std::string key, payload, message_id, queue, record, original, x_death;
  bool operator==(const Read&) const = default;
};
Read read_of(const AmqpMessage& m) {
  const AmqpDeadLetter d = read_dead_letter(m);
  return {d.key, d.payload, d.message_id, d.queue, d.record.dump(), d.original.dump(), d.x_death.dump()};
}

AmqpTable::iterator header(AmqpTable& t, std::string_view name) {
  return std::find_if(t.begin(), t.end(), [&](const AmqpField& f) { return f.name == name; });
}
void drop(AmqpMessage& m, std::string_view name) {
  std::erase_if(m.headers, [&](const AmqpField& f) { return f.name == name; });
}
void set(AmqpMessage& m, std::string_view name, AmqpValue v) {
  auto it = header(m.headers, name);
  if (it == m.headers.end()) {
    m.headers.push_back({std::string(name), std::move(v)});
  } else {
    it->value = std::move(v);
  }
}

}  // namespace

TEST_CASE("amqp entry attack: a dead letter's signature breaks at any change to what an operator reads") {
  WorkerSettings s = settings();
  s.fleet_key = FleetKey(std::string(32, 'k'));
  const std::string dlq = "jobs.dlq";

  struct Base {
    std::string what;
    AmqpMessage m;
  };
  std::vector<Base> bases;
  bases.push_back({"a key header", message()});
  {
    AmqpMessage m = message();
    m.headers[0].value = std::string();
    m.key = "";
    bases.push_back({"an empty key", m});
  }
  {
    AmqpMessage m = message();
    m.headers.erase(m.headers.begin());
    m.key.reset();
    m.message_id.clear();
    bases.push_back({"no key, no message id (message:SHA)", m});
  }
  {
    AmqpMessage m = message();
    m.headers.insert(m.headers.begin(), {"key", std::int64_t{42}});
    set_key_as_delivered(m);
    bases.push_back({"a first key header that is not a string", m});
  }
  {
    AmqpMessage m = message();
    m.headers[0].value = std::string();
    m.key = "";
    m.message_id.clear();
    bases.push_back({"an empty key, no message id", m});
  }

  struct Mutation {
    std::string what;
    std::function<void(AmqpMessage&)> apply;
  };
  const std::vector<Mutation> mutations = {
      {"no key header", [](AmqpMessage& m) { drop(m, "key"); }},
      {"key an integer", [](AmqpMessage& m) { set(m, "key", AmqpValue(std::int64_t{7})); }},
      {"key void", [](AmqpMessage& m) { set(m, "key", AmqpValue()); }},
      {"key as bytes", [](AmqpMessage& m) {
         auto it = header(m.headers, "key");
         if (it != m.headers.end() && it->value.text()) it->value = AmqpValue::of_kind('x', *it->value.text());
       }},
      {"another key first", [](AmqpMessage& m) { m.headers.insert(m.headers.begin(), {"key", std::string("rm -rf")}); }},
      {"another key last", [](AmqpMessage& m) { m.headers.push_back({"key", std::string("rm -rf")}); }},
      {"an empty key first", [](AmqpMessage& m) { m.headers.insert(m.headers.begin(), {"key", std::string()}); }},
      {"message id changed", [](AmqpMessage& m) { m.message_id = "order-18"; }},
      {"message id removed", [](AmqpMessage& m) { m.message_id.clear(); }},
      {"message id set to the key", [](AmqpMessage& m) {
         if (m.key) m.message_id = *m.key;
       }},
      {"payload changed", [](AmqpMessage& m) { m.body = "other"; }},
      {"payload emptied", [](AmqpMessage& m) { m.body.clear(); }},
      {"pillbox-queue removed", [](AmqpMessage& m) { drop(m, "pillbox-queue"); }},
      {"pillbox-queue changed", [](AmqpMessage& m) { set(m, "pillbox-queue", std::string("other")); }},
      {"pillbox-queue an integer", [](AmqpMessage& m) { set(m, "pillbox-queue", AmqpValue(std::int64_t{1})); }},
      {"pillbox-queue removed, x-first-death-queue other", [](AmqpMessage& m) {
         drop(m, "pillbox-queue");
         m.headers.push_back({"x-first-death-queue", std::string("other")});
       }},
      {"pillbox-queue removed, x-first-death-queue the same", [](AmqpMessage& m) {
         drop(m, "pillbox-queue");
         m.headers.push_back({"x-first-death-queue", std::string("jobs")});
       }},
      {"record removed", [](AmqpMessage& m) { drop(m, "pillbox-record"); }},
      {"record changed", [](AmqpMessage& m) { set(m, "pillbox-record", std::string("{\"kind\":\"ok\"}")); }},
      {"another record first", [](AmqpMessage& m) {
         m.headers.insert(m.headers.begin(), {"pillbox-record", std::string("{\"kind\":\"ok\"}")});
       }},
      {"record as bytes", [](AmqpMessage& m) {
         auto it = header(m.headers, "pillbox-record");
         it->value = AmqpValue::of_kind('x', *it->value.text());
       }},
      {"original changed", [](AmqpMessage& m) {
         set(m, "pillbox-original", std::string("{\"message_id\":\"x\",\"reply_to\":\"evil\",\"headers\":{}}"));
       }},
      {"original removed", [](AmqpMessage& m) { drop(m, "pillbox-original"); }},
      {"x-death changed", [](AmqpMessage& m) { set(m, "pillbox-x-death", std::string("{\"deaths\":[]," "\"forged\":1}")); }},
      {"x-death removed", [](AmqpMessage& m) { drop(m, "pillbox-x-death"); }},
      {"a second signature", [](AmqpMessage& m) {
         auto it = header(m.headers, "pillbox-sig");
         m.headers.push_back(*it);
       }},
      {"the signature an integer", [](AmqpMessage& m) { set(m, "pillbox-sig", AmqpValue(std::int64_t{0})); }},
      {"headers reversed", [](AmqpMessage& m) { std::reverse(m.headers.begin(), m.headers.end()); }},
      {"x-stream-offset added", [](AmqpMessage& m) { m.headers.push_back({"x-stream-offset", std::int64_t{3}}); }},
      {"an own header added", [](AmqpMessage& m) { m.headers.push_back({"tenant2", std::string("evil")}); }},
  };

  for (const Base& base : bases) {
    CAPTURE(base.what);
    const AmqpHeld e = held(base.m);
    const AmqpPublication dl = dead_letter_publication(s, e, crash(), "failed twice alike", 5000);
    const AmqpMessage letter = delivered(dl);
    REQUIRE(s.fleet_key->verify(dlq, dead_letter_signed_fields(letter)) == Signature::kValid);
    const Read as_written = read_of(letter);
    CHECK(as_written.key == e.task.key);
    for (const Mutation& mutation : mutations) {
      CAPTURE(mutation.what);
      AmqpMessage changed = letter;
      mutation.apply(changed);
      set_key_as_delivered(changed);
      const Read now = read_of(changed);
      const Signature sig = s.fleet_key->verify(dlq, dead_letter_signed_fields(changed));
      if (!(now == as_written)) {
        INFO("read as key '" << now.key << "', id '" << now.message_id << "', queue '" << now.queue << "'");
        CHECK(sig != Signature::kValid);
      }
    }
  }
}

TEST_CASE("amqp entry attack: a dead letter keeps its record whatever the history and failure weigh") {
  // A crash's record: its message and frames, the stderr tail (8 KiB, as
  // base64), every delivery before it with its own. Over 24 KiB, the dead
  // letter would say "omitted" for the whole record: an operator would not
  // know what failed.
  Outcome big = crash(kMaxRecordedMessage, 64);
  big.stderr_tail = std::string(8192, 'e');
  auto check_letter = [](const AmqpPublication& dl, std::uint32_t deliveries) {
    CHECK(broker_takes(dl));
    const AmqpDeadLetter read = read_dead_letter(delivered(dl));
    CHECK(read.unreadable.empty());
    REQUIRE(read.record.is_object());
    CHECK(read.record.count("omitted") == 0);
    CHECK(read.record.value("kind", "") == "crash");
    CHECK(read.record.value("fingerprint", "") == "pb1-0123456789abcdef");
    CHECK(read.record.value("key", "") == "report.pdf");
    CHECK(read.record.value("deliveries", 0) == deliveries);
    REQUIRE(read.record.contains("attempts_history"));
    const json& attempts = read.record.at("attempts_history");
    REQUIRE(attempts.is_array());
    CHECK(attempts.size() >= 2);
    if (!attempts.empty()) CHECK(attempts.back().value("delivery", 0) == deliveries);
  };

  // Three deliveries, each a big crash (max-attempts 3): a common end.
  AmqpHeld e = held(message());
  for (int i = 0; i < 2; ++i) e = held(delivered(carried_copy(e, failed_at(e, big), "jobs.delay.1024")));
  REQUIRE(e.delivery == 3);
  check_letter(dead_letter_publication(settings(), e, big, "failed 3 times alike", 5000), 3);

  // A long history of releases and transient failures, each with details.
  AmqpHeld longer = held(message());
  for (std::uint32_t d = 1; d <= 300; ++d) {
    longer.history.recorded.push_back(recorded_outcome(d, "host:1", 1, crash(kMaxRecordedMessage, 10), false, true));
  }
  longer.delivery = 301;
  longer.carried = 300;
  check_letter(dead_letter_publication(settings(), longer, big, "failed", 5000), 301);
}

TEST_CASE("amqp entry attack: a forged history judges only the message that carries it") {
  // A publisher can forge the history of its own messages only (a message
  // cannot be changed once published): lost deliveries 1 and 3 around
  // recorded releases 2 and 4 (4 the one it claims it was copied at) and
  // the broker's count of one more: three lost, "kills workers". That
  // refuses its own message; the same key, message id and payload without
  // the forgery runs.
  const std::string forged = "[" + delivery_json(recorded_release(2, "w", 1, "released")) + "," +
                             delivery_json(recorded_release(4, "w", 1, "released")) + "]";
  const AmqpHeld bad = held(with_history(AmqpValue(std::int64_t{4}), forged, 1));
  CHECK(bad.history.lost == std::vector<std::uint32_t>{1, 3, 5});
  const auto r = check_message(settings(), bad);
  REQUIRE(r.has_value());
  CHECK(r->outcome.kind == Kind::kSupervisorLost);
  const AmqpHeld good = held(message());
  CHECK(good.task.key == bad.task.key);
  CHECK(good.task.payload == bad.task.payload);
  CHECK(good.id == bad.id);
  CHECK_FALSE(check_message(settings(), good).has_value());
  // Its copies never carry the forgery to another message: a copy of the
  // good one carries its own history only.
  const AmqpHeld next = held(delivered(carried_copy(good, failed_at(good), "jobs")));
  CHECK(next.history.lost.empty());
  CHECK(next.history.recorded.size() == 1);
}

TEST_CASE("amqp entry attack: keys and ids: the fallbacks are stable, collisions are claims and nothing more") {
  // No key and no message id: "message:" and 16 hex digits of the
  // payload's SHA-256, kept by every copy (a header it carries), whatever
  // the delivery tag.
  AmqpMessage anonymous = message();
  anonymous.headers.erase(anonymous.headers.begin());
  anonymous.key.reset();
  anonymous.message_id.clear();
  const AmqpHeld a = held(anonymous);
  CHECK(a.task.key == "message:" + sha256_hex(anonymous.body).substr(0, 16));
  CHECK(a.id == "delivery 5");
  const AmqpHeld a2 = held(delivered(carried_copy(a, failed_at(a), "jobs")));
  CHECK(a2.task.key == a.task.key);
  CHECK(a2.task.payload == a.task.payload);

  // A message claiming that key (or the id "delivery 5") is a claim: it
  // names its own message; its history and payload are its own.
  AmqpMessage claimer = message();
  claimer.headers[0].value = a.task.key;
  claimer.key = a.task.key;
  claimer.message_id = "delivery 5";
  claimer.body = "other payload";
  const AmqpHeld c = held(claimer);
  CHECK(c.task.key == a.task.key);
  CHECK(c.id == a.id);
  CHECK(c.task.payload != a.task.payload);
  // The dead letter of each names its own payload, and a signature over
  // one does not verify the other.
  WorkerSettings s = settings();
  s.fleet_key = FleetKey(std::string(32, 'k'));
  const AmqpMessage dl_a = delivered(dead_letter_publication(s, a, crash(), "failed", 1));
  const AmqpMessage dl_c = delivered(dead_letter_publication(s, c, crash(), "failed", 1));
  AmqpMessage swapped = dl_c;
  swapped.body = dl_a.body;
  CHECK(s.fleet_key->verify("jobs.dlq", dead_letter_signed_fields(swapped)) != Signature::kValid);

  // A first key header that is not a string: the key is the message id, on
  // every copy and in the dead letter alike.
  AmqpMessage typed = message();
  typed.headers.insert(typed.headers.begin(), {"key", std::int64_t{42}});
  set_key_as_delivered(typed);
  const AmqpHeld t = held(typed);
  CHECK(t.task.key == "order-17");
  const AmqpHeld t2 = held(delivered(carried_copy(t, failed_at(t), "jobs")));
  CHECK(t2.task.key == "order-17");
  const AmqpHeld t3 = held(delivered(carried_copy(t2, failed_at(t2), "jobs")));
  CHECK(t3.task.key == "order-17");
  CHECK(t3.history.recorded.size() == 2);
  CHECK(read_dead_letter(delivered(dead_letter_publication(s, t3, crash(), "failed", 1))).key == "order-17");

  // Key bytes are kept exactly (NUL, not UTF-8), as bytes or as a string.
  AmqpMessage raw = message();
  const std::string odd("a\0\xff\xfe", 4);
  raw.headers[0].value = AmqpValue::of_kind('x', odd);
  raw.key = odd;
  const AmqpHeld r = held(raw);
  CHECK(r.task.key == odd);
  CHECK(held(delivered(carried_copy(r, failed_at(r), "jobs"))).task.key == odd);
  const AmqpMessage dl_r = delivered(dead_letter_publication(s, r, crash(), "failed", 1));
  CHECK(read_dead_letter(dl_r).key == odd);
  CHECK(s.fleet_key->verify("jobs.dlq", dead_letter_signed_fields(dl_r)) == Signature::kValid);
}
