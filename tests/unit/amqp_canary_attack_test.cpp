// Attacks on two RabbitMQ changes, with everything a message or a NAME.dlq
// entry says taken as a hostile claim:
//   - the decimal give-back (amqp_entry.h: stream_breaking_headers,
//     carried_copy; AmqpBackEnd::admit): a message with a top-level decimal
//     header is given back unrun as a copy whose decimals are text. The
//     copy must be one the broker takes (else every worker that gets the
//     message stops, and the broker at last dead-letters it as it is, the
//     decimal breaking NAME.dlq), must hold no decimal (no loop), and
//     must keep the message's key;
//   - decimal_text, for every scale and the extreme values;
//   - is_canary (amqp_dead_letter.h): what a submitter can make of a dead
//     letter, through a worker or a copy, is never doctor's canary.
#include <doctest/doctest.h>

#include <amqp.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_entry.h"
#include "tests/unit/amqp_worker_fixture.h"
#include "supervisor/io/terminal_text.h"

using namespace pillbox;
using namespace pillbox::broker;

namespace {

using amqp_fixture::delivered;
using amqp_fixture::held;
using amqp_fixture::set_key_as_delivered;

constexpr std::size_t kFrameMax = 131072;  // RabbitMQ's and rabbitmq-c's default frame_max

WorkerSettings settings() {
  WorkerSettings s;
  s.keys.stream = "jobs";
  s.consumer.name = "host:1";
  s.retry.max_attempts = 3;
  s.identity.handler_identity = "echo";
  return s;
}

AmqpMessage message() {
  AmqpMessage m;
  m.delivery_tag = 5;
  m.body = "payload";
  m.message_id = "order-17";
  m.headers = {{"key", std::string("report.pdf")}, {"tenant", std::string("acme")}};
  m.key = "report.pdf";
  return m;
}

AmqpValue decimal(std::uint8_t decimals, std::uint32_t value) {
  return AmqpValue::of_kind('D', AmqpDecimal{decimals, value});
}

// The copy AmqpBackEnd::give_back publishes for a message admit releases
// for its decimal headers (its delivery recorded as not run).
AmqpPublication given_back(const AmqpHeld& e) {
  return carried_copy(e, recorded_release(static_cast<std::uint32_t>(e.delivery), "host:1", 1000, "released: decimal"),
                      "jobs");
}

std::size_t header_frame_size(const AmqpOutgoing& m) {
  std::size_t size = 8 + 14 + 1;
  for (const std::string* p : {&m.message_id, &m.correlation_id, &m.reply_to}) {
    if (!p->empty()) size += 1 + p->size();
  }
  if (m.headers.empty()) return size;
  AmqpTableEncoder encoder;
  amqp_table_t raw = encoder.encode(m.headers);
  std::string buffer(4u << 20, '\0');
  amqp_bytes_t bytes{buffer.size(), buffer.data()};
  std::size_t offset = 0;
  if (amqp_encode_table(bytes, &raw, &offset) != AMQP_STATUS_OK) return std::numeric_limits<std::size_t>::max();
  return size + offset;
}

bool has_decimal(const AmqpTable& headers) {
  AmqpMessage m;
  m.headers = headers;
  return !stream_breaking_headers(m).empty();
}

// What doctor's canary looks like in NAME.dlq: expired out of NAME.doctor.ID.
AmqpMessage canary(const std::string& queue, const std::string& id) {
  AmqpMessage m;
  m.body = "pillbox doctor: a canary of the dead-letter route, not a task";
  m.message_id = "pillbox-canary-" + id;
  m.headers = {{std::string(kCanaryHeader), id},
               {"key", std::string("pillbox-doctor-canary")},
               {"x-first-death-exchange", std::string("")},
               {"x-first-death-queue", canary_queue_name(queue, id)},
               {"x-first-death-reason", std::string("expired")}};
  return m;
}

}  // namespace

TEST_CASE("amqp canary attack: decimal headers that grow as text cannot make the give-back copy exceed a frame") {
  // Each decimal counts 9 bytes among a message's own headers, but its copy
  // sends it as text: at scale 255, 257 characters. Within the 64 KiB of own
  // headers a worker runs with, thousands of them: a copy the client cannot
  // send (the worker stops, the message is left unacknowledged, delivered to
  // the next worker, which stops too, until the broker dead-letters it as it
  // is, its decimals breaking NAME.dlq). Refused unrun, or a copy that fits.
  for (const std::uint8_t scale : {std::uint8_t{255}, std::uint8_t{40}}) {
    AmqpMessage m = message();
    for (int i = 0; i < 5900; ++i) m.headers.push_back({"d", decimal(scale, 1)});
    const AmqpHeld e = held(m);
    const auto refused = check_message(settings(), e);
    if (refused) {
      CHECK(refused->protocol_error);
      // Its dead letter is one the broker takes and NAME.dlq keeps.
      const AmqpPublication dead = dead_letter_publication(settings(), e, refused->outcome, refused->reason, 1000);
      CHECK(header_frame_size(dead.message) <= kFrameMax);
      CHECK_FALSE(has_decimal(dead.message.headers));
      continue;
    }
    const AmqpPublication copy = given_back(e);
    INFO("scale " << int(scale) << ": a copy's content header of " << header_frame_size(copy.message) << " bytes");
    CHECK(header_frame_size(copy.message) <= kFrameMax);
  }
  // A few stay well within: given back, not refused.
  AmqpMessage few = message();
  for (int i = 0; i < 100; ++i) few.headers.push_back({"d" + std::to_string(i), decimal(255, 4294967295u)});
  const AmqpHeld e = held(few);
  CHECK_FALSE(check_message(settings(), e).has_value());
  CHECK(header_frame_size(given_back(e).message) <= kFrameMax);
}

TEST_CASE("amqp canary attack: a decimal key header does not change the key of the given-back copy") {
  // The key header is a decimal: no key (it is not text), the task's key is
  // the message id. Its copy must not turn the decimal into a text key.
  AmqpMessage m = message();
  m.headers = {{"key", decimal(2, 12345)}, {"tenant", std::string("acme")}};
  m.key.reset();
  const AmqpHeld e = held(m);
  REQUIRE(e.task.key == "order-17");
  CHECK_FALSE(check_message(settings(), e).has_value());
  REQUIRE(stream_breaking_headers(e.message) == std::vector<std::string>{"key"});
  const AmqpHeld back = held(delivered(given_back(e), 0));
  CHECK(back.task.key == "order-17");
  CHECK(stream_breaking_headers(back.message).empty());
  // And no message id: the key is the payload's hash, the same again.
  AmqpMessage anonymous = m;
  anonymous.message_id.clear();
  const AmqpHeld a = held(anonymous);
  CHECK(held(delivered(given_back(a), 0)).task.key == a.task.key);
}

TEST_CASE("amqp canary attack: the decimal give-back cannot loop: no copy carries a decimal") {
  // Names copied() drops (x-*, CC, BCC), the longest name, many decimals,
  // a decimal key, decimals inside tables (kept: a stream drops tables).
  AmqpMessage m = message();
  m.headers.push_back({"x-price", decimal(2, 1)});
  m.headers.push_back({"x-first-death-reason", decimal(0, 7)});
  m.headers.push_back({"CC", decimal(0, 7)});
  m.headers.push_back({"BCC", decimal(0, 7)});
  m.headers.push_back({std::string(255, 'n'), decimal(255, 4294967295u)});
  m.headers.push_back({"dup", decimal(1, 1)});
  m.headers.push_back({"dup", decimal(1, 2)});
  m.headers.push_back({"nested", AmqpValue::table({{"inner", decimal(1, 5)}})});
  for (int i = 0; i < 200; ++i) m.headers.push_back({"many" + std::to_string(i), decimal(static_cast<std::uint8_t>(i), 0)});
  const AmqpHeld e = held(m);
  CHECK_FALSE(check_message(settings(), e).has_value());
  CHECK_FALSE(stream_breaking_headers(e.message).empty());
  AmqpHeld current = e;
  for (int round = 0; round < 3; ++round) {
    const AmqpPublication copy = given_back(current);
    CHECK_FALSE(has_decimal(copy.message.headers));
    for (const AmqpField& f : copy.message.headers) {
      CHECK(f.name.rfind("x-", 0) != 0);
      CHECK(f.name != "CC");
      CHECK(f.name != "BCC");
    }
    CHECK(header_frame_size(copy.message) <= kFrameMax);
    current = held(delivered(copy, 0));
    CHECK(stream_breaking_headers(current.message).empty());  // runs: not given back again
    CHECK_FALSE(check_message(settings(), current).has_value());
    CHECK(current.delivery == round + 2);  // the copy counts on
  }
}

TEST_CASE("amqp canary attack: a decimal message whose history is unreadable is dead-lettered, not given back") {
  // admit checks before it gives back: a decimal never buys a refused
  // message another delivery. Its dead letter has the decimal as text.
  AmqpMessage m = message();
  m.headers.push_back({"price", decimal(2, 12345)});
  m.headers.push_back({std::string(kDeliveriesHeader), std::int64_t{3}});
  m.headers.push_back({std::string(kAttemptsHeader), std::string("not json")});
  const AmqpHeld e = held(m);
  const auto refused = check_message(settings(), e);
  REQUIRE(refused.has_value());
  CHECK(refused->protocol_error);
  const AmqpPublication dead = dead_letter_publication(settings(), e, refused->outcome, refused->reason, 1000);
  CHECK_FALSE(has_decimal(dead.message.headers));
  // A header name a copy cannot send: refused too.
  AmqpMessage nul = message();
  nul.headers.push_back({std::string("a\0b", 3), decimal(2, 1)});
  CHECK(check_message(settings(), held(nul)).has_value());
}

TEST_CASE("amqp canary attack: hostile decimal header names in the release note are made safe") {
  const std::string names[] = {"\x1b]0;owned\x07", "a\x1b[2Jb", std::string("\xc2\x9b") + "31m", "\xe2\x80\xae" "gpj.exe",
                               std::string(255, 'x'), std::string(200, '\x01')};
  for (const std::string& n : names) {
    const std::string cell = table_cell(n, 64);
    CHECK(cell.size() <= 64);
    for (const char c : cell) {
      const auto u = static_cast<unsigned char>(c);
      CHECK((u >= 0x20 && u != 0x7f));
    }
    CHECK(cell.find("\xc2\x9b") == std::string::npos);
    CHECK(cell.find("\xe2\x80\xae") == std::string::npos);
  }
}

TEST_CASE("amqp canary attack: decimal_text for every scale and the extreme values") {
  for (int scale = 0; scale <= 255; ++scale) {
    for (const std::uint32_t value : {0u, 1u, 9u, 10u, 12345u, 4294967295u}) {
      const std::string text = decimal_text(AmqpDecimal{static_cast<std::uint8_t>(scale), value});
      INFO("scale " << scale << ", value " << value << ": " << text);
      CHECK(text.size() <= 257);
      const std::size_t dot = text.find('.');
      if (scale == 0) {
        CHECK(text == std::to_string(value));
        continue;
      }
      REQUIRE(dot != std::string::npos);
      CHECK(text.size() - dot - 1 == static_cast<std::size_t>(scale));  // digits after the point
      const std::string whole = text.substr(0, dot);
      CHECK_FALSE(whole.empty());
      CHECK((whole == "0" || whole[0] != '0'));
      std::string digits = whole + text.substr(dot + 1);
      CHECK(digits.find_first_not_of("0123456789") == std::string::npos);
      digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
      CHECK(digits == std::to_string(value));
    }
  }
  CHECK(decimal_text({0, 0}) == "0");
  CHECK(decimal_text({0, 4294967295u}) == "4294967295");
  CHECK(decimal_text({9, 4294967295u}) == "4.294967295");
  CHECK(decimal_text({10, 4294967295u}) == "0.4294967295");
  CHECK(decimal_text({255, 0}) == "0." + std::string(255, '0'));
  CHECK(decimal_text({255, 4294967295u}) == "0." + std::string(245, '0') + "4294967295");
}

TEST_CASE("amqp canary attack: doctor's canary is told, and a near miss is not") {
  CHECK(is_canary(canary("jobs", "0123456789abcdef"), "jobs"));
  CHECK_FALSE(is_canary(canary("jobs", "0123456789abcdef"), "other"));
  for (const char* reason : {"rejected", "delivery_limit", "maxlen", "Expired", ""}) {
    AmqpMessage m = canary("jobs", "id");
    m.headers.back().value = std::string(reason);
    CHECK_FALSE(is_canary(m, "jobs"));
  }
  // The first death in NAME, or in another canary's queue.
  AmqpMessage in_work = canary("jobs", "id");
  in_work.headers[3].value = std::string("jobs");
  CHECK_FALSE(is_canary(in_work, "jobs"));
  AmqpMessage other_id = canary("jobs", "id");
  other_id.headers[3].value = canary_queue_name("jobs", "other");
  CHECK_FALSE(is_canary(other_id, "jobs"));
  // Not strings: no canary.
  AmqpMessage typed = canary("jobs", "id");
  typed.headers[0].value = decimal(0, 1);
  CHECK_FALSE(is_canary(typed, "jobs"));
  // A header given twice is read by its first: a first that is no string,
  // or the broker's own (first) queue, makes no canary of a second.
  AmqpMessage twice = canary("jobs", "id");
  twice.headers.insert(twice.headers.begin(), {"x-first-death-queue", std::string("jobs")});
  CHECK_FALSE(is_canary(twice, "jobs"));
  AmqpMessage twice_id = canary("jobs", "id");
  twice_id.headers.insert(twice_id.headers.begin(), {std::string(kCanaryHeader), std::int64_t{1}});
  CHECK_FALSE(is_canary(twice_id, "jobs"));
  // Huge values: compared, not trusted (linear).
  const std::string huge(1u << 20, 'a');
  AmqpMessage big = canary("jobs", huge);
  CHECK(is_canary(big, "jobs"));
  big.headers[3].value = canary_queue_name("jobs", huge + "b");
  CHECK_FALSE(is_canary(big, "jobs"));
}

TEST_CASE("amqp canary attack: a submitter's forged canary headers never make a canary of a dead letter pillbox writes") {
  // A work message carrying all of a canary's headers, first-death ones too.
  AmqpMessage m = canary("jobs", "id");
  m.headers.push_back({"x-death", AmqpValue::array({AmqpValue::table({{"queue", canary_queue_name("jobs", "id")},
                                                                       {"reason", std::string("expired")},
                                                                       {"count", std::int64_t{1}}})})});
  m.key = "pillbox-doctor-canary";
  const AmqpHeld e = held(m);
  // A worker's dead letter of it (refused or failed): not a canary.
  Outcome failed;
  failed.kind = Kind::kCrash;
  failed.fingerprint = "pb1-crash";
  const AmqpPublication dead = dead_letter_publication(settings(), e, failed, "crashed", 1000);
  CHECK_FALSE(is_canary(delivered(dead), "jobs"));
  CHECK(find_field(dead.message.headers, kCanaryHeader) == nullptr);
  CHECK(find_field(dead.message.headers, "x-first-death-queue") == nullptr);
  // A worker's copy (a retry, a give-back) leaves the broker's x-* out: were
  // the broker to dead-letter the copy, it writes its first death anew
  // (NAME): no canary either.
  const AmqpPublication copy = given_back(e);
  for (const AmqpField& f : copy.message.headers) CHECK(f.name.rfind("x-", 0) != 0);
  AmqpMessage dead_copy = delivered(copy);
  dead_copy.headers.push_back({"x-first-death-queue", std::string("jobs")});
  dead_copy.headers.push_back({"x-first-death-reason", std::string("delivery_limit")});
  CHECK_FALSE(is_canary(dead_copy, "jobs"));
}
