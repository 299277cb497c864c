// The quarantine verbs on RabbitMQ (quarantine list|show|stats|export
// --amqp URL --queue NAME) against what anyone allowed to publish to
// NAME.dlx can put in the stream NAME.dlq: forged offsets, headers of any
// type, records of any shape, escape sequences, hostile numbers, a copy of
// a signed letter with another payload, a flood that never lets the stream
// fall quiet; and the worker's reject path for a dead letter that cannot be
// sent. Each case asserts the safe outcome. One broker for every case (a
// node takes seconds to start): one test case, a function per attack.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "shared/base64.h"
#include "shared/sha256.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_entry.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/broker/fleet_key.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using pillbox::broker::AmqpConnection;
using pillbox::broker::AmqpOutgoing;
using pillbox::broker::AmqpTable;
using pillbox::broker::AmqpValue;
using e2e::run_pillbox;

namespace {

// NAME's topology (NAME.dlx into the stream NAME.dlq), and a connection
// that publishes with confirms.
AmqpConnection topology(const e2e::RabbitServer& server, const std::string& queue) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(pillbox::broker::declare_topology(c, {.queue = queue}).has_value());
  REQUIRE(c.confirm_publishes().is_ok());
  return c;
}

void letter(AmqpConnection& c, const std::string& queue, const AmqpOutgoing& m) {
  const auto s = c.publish_to_exchange(queue + ".dlx", m);
  REQUIRE_MESSAGE(s.is_ok(), s.message());
  const auto confirmed = c.wait_confirmed();
  REQUIRE_MESSAGE(confirmed.is_ok(), confirmed.message());
}

std::vector<std::int64_t> ids_of(const e2e::RunResult& r) {
  std::vector<std::int64_t> ids;
  for (const json& j : r.records) ids.push_back(j.at("id").get<std::int64_t>());
  return ids;
}

// What a terminal must never be handed: ESC, BEL, CR, backspace, C1 CSI
// (U+009B as UTF-8 and as a raw byte), DEL. The text output has none
// (table_cell: a raw 0x9B passed until this attack); --json keeps DEL and
// U+009B as JSON allows (a reader of JSON escapes what it shows): reported.
void c1_report(const std::string& text, const std::string& what, bool json) {
  const bool found = text.find('\x9b') != std::string::npos || text.find('\x7f') != std::string::npos;
  if (json) {
    if (found) MESSAGE(what << ": a C1 control (U+009B) or DEL in JSON, as JSON allows");
  } else {
    CHECK_MESSAGE(!found, what << ": a C1 control (0x9B) or DEL reaches the terminal");
  }
}

void no_terminal_controls(const std::string& text, const std::string& what, bool json = false) {
  c1_report(text, what, json);
  for (const char c : {'\x1b', '\x07', '\r', '\x08'}) {
    const auto at = text.find(c);
    CHECK_MESSAGE(at == std::string::npos, what << ": control byte " << static_cast<int>(static_cast<unsigned char>(c))
                                                << " at " << at << " in: " << text.substr(at == std::string::npos ? 0 : (at > 60 ? at - 60 : 0), 120));
  }
}

// One JSON object a line, as many lines as records.
void one_line_per_record(const e2e::RunResult& r, const std::string& what) {
  std::size_t lines = 0;
  for (const char c : r.out) lines += c == '\n' ? 1 : 0;
  CHECK_MESSAGE(lines == r.records.size(), what << ": " << lines << " lines, " << r.records.size() << " records");
  for (const json& j : r.records) CHECK_MESSAGE(j.is_object(), what);
}

// ---- 1. forged x-stream-offset ---------------------------------------------------

// A publisher's own x-stream-offset (any number, any type) must not be the
// record's id: ids are the broker's offsets, list and show agree on them,
// and nothing is hidden or makes the reader stop.
void forged_stream_offsets(e2e::RabbitServer& server) {
  auto c = topology(server, "offs");
  const std::vector<std::pair<std::string, std::optional<AmqpValue>>> forged = {
      {"k0", std::nullopt},
      {"k1", AmqpValue(std::int64_t{999999})},
      {"k2", AmqpValue(std::string("0"))},
      {"k3", AmqpValue(std::numeric_limits<std::int64_t>::max())},
      {"k4", AmqpValue(std::int64_t{-5})},
      {"k5", AmqpValue::of_kind('L', std::numeric_limits<std::uint64_t>::max())},
      {"k6", AmqpValue(std::int64_t{2})},
  };
  for (const auto& [key, offset] : forged) {
    AmqpOutgoing m;
    m.body = "body of " + key;
    m.headers = {{"key", key}};
    if (offset) m.headers.push_back({"x-stream-offset", *offset});
    letter(c, "offs", m);
  }
  const auto list = run_pillbox(e2e::quarantine_args(server, "offs", {"list", "--json"}), "", {}, {}, 60);
  INFO(list.describe());
  REQUIRE(list.exit_code == 0);
  CHECK(ids_of(list) == std::vector<std::int64_t>{6, 5, 4, 3, 2, 1, 0});
  for (const json& r : list.records) {
    const std::int64_t id = r.at("id").get<std::int64_t>();
    CHECK(r.value("key", "") == "k" + std::to_string(id));
    const auto shown = run_pillbox(e2e::quarantine_args(server, "offs", {"show", std::to_string(id), "--json"}), "", {}, {}, 60);
    REQUIRE_MESSAGE(shown.records.size() == 1, shown.describe());
    CHECK(shown.records[0].value("key", "") == "k" + std::to_string(id));
    CHECK(shown.records[0].at("amqp").value("offset", -1) == id);
  }
  const auto text = run_pillbox(e2e::quarantine_args(server, "offs", {"list"}), "", {}, {}, 60);
  CHECK(text.exit_code == 0);
  CHECK(text.err.find("7 records") != std::string::npos);
}

// ---- 2. a flood keeps the end from falling quiet ------------------------------------

// end() reads the newest chunk until the broker is quiet for 300 ms: a
// publisher that writes a letter every 100 ms must not keep a listing
// (or show) waiting for ever.
void flood_does_not_hang_the_reader(e2e::RabbitServer& server) {
  auto c = topology(server, "flood");
  for (int i = 0; i < 3; ++i) {
    AmqpOutgoing m;
    const std::string body = "before " + std::to_string(i);
    m.body = body;
    m.headers = {{"key", "before-" + std::to_string(i)}};
    letter(c, "flood", m);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> flooded{0};
  std::thread flooder([&] {
    auto address = pillbox::broker::parse_amqp_url(server.url());
    auto f = AmqpConnection::open(*address);
    if (!f) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (!stop && std::chrono::steady_clock::now() < until) {
      AmqpOutgoing m;
      m.body = "flood";
      m.headers = {{"key", std::string("flood")}};
      if (!f->publish_to_exchange("flood.dlx", m).is_ok()) return;
      ++flooded;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto list = run_pillbox(e2e::quarantine_args(server, "flood", {"list", "--json"}), "", {}, {}, 30);
  const auto show = run_pillbox(e2e::quarantine_args(server, "flood", {"show", "1", "--json"}), "", {}, {}, 30);
  stop = true;
  flooder.join();
  MESSAGE("under a flood of one letter per 100 ms (" << flooded << " sent): list took " << list.seconds
                                                      << " s, show " << show.seconds << " s");
  CHECK_MESSAGE(list.exit_code == 0, list.describe());
  CHECK(list.records.size() >= 3);
  CHECK(list.seconds < 6.0);
  CHECK_MESSAGE(show.exit_code == 0, show.describe());
  CHECK(show.seconds < 6.0);
  REQUIRE(show.records.size() == 1);
  CHECK(show.records[0].value("key", "") == "before-1");
}

// ---- 3. a signed letter's copy with another, large payload ---------------------------

// A listing leaves payloads over 64 KiB out: the signature must still
// cover the payload that is there, not the sha256 the record claims.
void swapped_large_payload_is_not_valid(e2e::RabbitServer& server, const std::string& key_file) {
  auto c = topology(server, "sig");
  auto key = pillbox::broker::FleetKey::load(key_file);
  REQUIRE_MESSAGE(key.has_value(), key.error());
  auto signed_letter = [&](const std::string& body, const std::string& name) {
    AmqpOutgoing m;
    m.headers = {{"key", name},
                 {"pillbox-queue", std::string("sig")},
                 {"pillbox-record", json{{"kind", "crash"},
                                         {"fingerprint", "sigfp"},
                                         {"payload_sha256", pillbox::sha256_hex(body)},
                                         {"payload_size", body.size()}}
                                        .dump()}};
    m.headers.push_back({"pillbox-sig", key->sign("sig.dlq", pillbox::broker::dead_letter_signed_fields(m, body))});
    return m;
  };
  const std::string small = "the payload the worker signed";
  AmqpOutgoing real = signed_letter(small, "signed");
  real.body = small;
  letter(c, "sig", real);  // 0: valid
  const std::string big(80 << 10, 'B');
  AmqpOutgoing real_big = signed_letter(big, "signed-big");
  real_big.body = big;
  letter(c, "sig", real_big);  // 1: valid, its payload over what a listing keeps
  const std::string other(70 << 10, 'E');
  AmqpOutgoing swapped = real;
  swapped.body = other;
  letter(c, "sig", swapped);  // 2: the signed headers, another payload (over 64 KiB)

  const auto list = run_pillbox(e2e::quarantine_args(server, "sig", {"list", "--json", "--fleet-key", key_file}), "", {}, {}, 60);
  INFO(list.describe());
  REQUIRE(list.exit_code == 0);
  REQUIRE(ids_of(list) == std::vector<std::int64_t>{2, 1, 0});
  CHECK(list.records[2].value("signature", "") == "valid");
  CHECK(list.records[1].value("signature", "") == "valid");
  CHECK(list.records[0].value("signature", "") == "bad");
  const auto shown = run_pillbox(e2e::quarantine_args(server, "sig", {"show", "2", "--json", "--fleet-key", key_file}), "", {}, {}, 60);
  REQUIRE(shown.records.size() == 1);
  CHECK(shown.records[0].value("signature", "") == "bad");
  // list without --json, and stats, say the same.
  const auto table = run_pillbox(e2e::quarantine_args(server, "sig", {"list", "--fleet-key", key_file}), "", {}, {}, 60);
  CHECK(table.exit_code == 0);
  std::size_t valid = 0;
  for (std::size_t at = 0; (at = table.out.find(" valid ", at)) != std::string::npos; ++at) ++valid;
  CHECK(valid == 2);
}

// A message dead-lettered twice (RabbitMQ lost the ack of the first): the
// second is a copy of the first record, left out of listings and counted;
// `show` and `discard` of it name the record. A letter with another
// payload, or another signature (an unsigned one before a signed one: a
// forgery must not hide the real letter), is a record of its own, with the
// fleet key and without it.
void copies_of_one_message(e2e::RabbitServer& server, const std::string& key_file) {
  auto c = topology(server, "twice");
  auto key = pillbox::broker::FleetKey::load(key_file);
  REQUIRE_MESSAGE(key.has_value(), key.error());
  auto dead = [&](const std::string& id, const std::string& body, bool sign, int delivery) {
    AmqpOutgoing m;
    m.message_id = id;
    m.body = body;
    m.headers = {{"key", "k-" + id},
                 {"pillbox-queue", std::string("twice")},
                 {"pillbox-record", json{{"kind", "crash"},
                                         {"fingerprint", "twicefp"},
                                         {"deliveries", delivery},
                                         {"payload_sha256", pillbox::sha256_hex(body)},
                                         {"payload_size", body.size()}}
                                        .dump()}};
    if (sign) m.headers.push_back({"pillbox-sig", key->sign("twice.dlq", pillbox::broker::dead_letter_signed_fields(m, body))});
    letter(c, "twice", m);
  };
  dead("m-1", "P", true, 1);    // 0: the record
  dead("m-1", "P", false, 1);   // 1: unsigned: its own record
  dead("m-1", "P", true, 2);    // 2: dead-lettered again (another history): a copy of 0
  dead("m-1", "Q", true, 1);    // 3: another payload: its own record
  dead("m-2", "R", false, 1);   // 4: a forgery first...
  dead("m-2", "R", true, 1);    // 5: ...does not hide the signed letter
  dead("m-1", "P", false, 3);   // 6: a copy of 1
  for (const bool with_key : {true, false}) {
    INFO("with the fleet key: " << with_key);
    std::vector<std::string> key_args;
    if (with_key) key_args = {"--fleet-key", key_file};
    auto args = [&](std::vector<std::string> a) {
      a.insert(a.end(), key_args.begin(), key_args.end());
      return e2e::quarantine_args(server, "twice", a);
    };
    const auto list = run_pillbox(args({"list", "--json"}), "", {}, {}, 60);
    INFO(list.describe());
    REQUIRE(list.exit_code == 0);
    CHECK(ids_of(list) == std::vector<std::int64_t>{5, 4, 3, 1, 0});
    CHECK(list.err.find("2 messages of twice.dlq left out: dead-lettered again, each a copy of an earlier record") !=
          std::string::npos);
    const auto stats = run_pillbox(args({"stats", "--json"}), "", {}, {}, 60);
    REQUIRE(stats.records.size() == 1);  // one fingerprint
    CHECK(stats.records[0].value("records", -1) == 5);
    const auto copy = run_pillbox(args({"show", "2"}), "", {}, {}, 60);
    CHECK(copy.exit_code == 2);
    CHECK(copy.err.find("2 is a copy of record 0") != std::string::npos);
    const auto other = run_pillbox(args({"show", "6"}), "", {}, {}, 60);
    CHECK(other.err.find("6 is a copy of record 1") != std::string::npos);
    const auto discard = run_pillbox(args({"discard", "2", "--reason", "dup"}), "", {}, {}, 60);
    CHECK(discard.exit_code == 2);
    CHECK(discard.err.find("copy of record 0") != std::string::npos);
  }
}

// ---- 4. escape sequences and JSON lines ----------------------------------------------

void hostile_text_stays_text(e2e::RabbitServer& server) {
  auto c = topology(server, "esc");
  const std::string esc = "\x1b[2J\x1b]0;pwn\x07\r\x08\x7f\xc2\x9b""31m\x9b";
  const json record = {
      {"kind", "crash" + esc},
      {"fingerprint", "fp" + esc},
      {"message", "line one\nline two" + esc},
      {"reason", "reason" + esc},
      {"crash_state", {"frame" + esc, 7}},
      {"policy_identity", "policy" + esc},
      {"syscall", "sys" + esc},
      {"signal", 11},
      {"handler", "exec"},
      {"exec_argv", {"argv" + esc}},
      {"working_dir", "dir" + esc},
      {"origin", {{"k" + esc, "v" + esc}}},
      {"source", "src" + esc},
      {"payload_sha256", "sha" + esc},
      {"stderr_tail_b64", pillbox::base64_encode("tail " + esc + "\n")},
      {"attempts_history", {{{"delivery", 1}, {"worker", "w" + esc}, {"kind", "k" + esc}, {"fingerprint", "f" + esc},
                             {"message", "m" + esc}, {"at_ms", 1700000000000}}}},
      {"created_at", "2026-01-01T00:00:00.000Z"}};
  const json x_death = {{"deaths",
                         {{{"reason", "r" + esc}, {"queue", "q" + esc}, {"count", "c" + esc}, {"time", 1700000000}},
                          {{"reason", 5}, {"time", 1e300}},
                          "not an object"}}};
  const json original = {{"message_id", "o" + esc}, {"headers", {{"h" + esc, "v" + esc}}}};
  AmqpOutgoing pillbox_letter;
  pillbox_letter.body = "payload " + esc;
  pillbox_letter.message_id = "mid" + esc;
  pillbox_letter.headers = {{"key", "key" + esc},
                            {"pillbox-queue", "queue" + esc},
                            {"pillbox-record", record.dump(-1, ' ', false, json::error_handler_t::replace)},
                            {"pillbox-x-death", x_death.dump(-1, ' ', false, json::error_handler_t::replace)},
                            {"pillbox-original", original.dump(-1, ' ', false, json::error_handler_t::replace)}};
  letter(c, "esc", pillbox_letter);  // 0
  AmqpOutgoing broker_letter;
  broker_letter.body = "b";
  broker_letter.message_id = "bm" + esc;
  broker_letter.headers = {{"key", "bk" + esc},
                           {"x-first-death-reason", "rejected" + esc},
                           {"x-first-death-queue", "\x1b]52;c;QUFBQQ==\x07" + esc},
                           {"pillbox-record", std::string("{\"kind\":\"unterminated \x1b")}};
  letter(c, "esc", broker_letter);  // 1
  AmqpOutgoing limit_letter = broker_letter;
  limit_letter.message_id = "lm" + esc;  // its own message: not a copy of 1
  limit_letter.headers = {{"key", "lk" + esc},
                          {"x-first-death-reason", std::string("delivery_limit")},
                          {"x-first-death-queue", "esc" + esc}};
  letter(c, "esc", limit_letter);  // 2
  letter(c, "esc", pillbox_letter);  // 3: a copy of 0, whose error must not echo its message id

  for (const auto& verb : std::vector<std::vector<std::string>>{
           {"list"}, {"stats"}, {"show", "0"}, {"show", "1"}, {"show", "2"}, {"show", "3"}, {"show", "9"}}) {
    const auto r = run_pillbox(e2e::quarantine_args(server, "esc", verb), "", {}, {}, 60);
    const std::string what = verb[0] + (verb.size() > 1 ? " " + verb[1] : "");
    INFO(what << ": " << r.describe());
    CHECK(r.exit_code >= 0);
    CHECK(r.term_signal == 0);
    no_terminal_controls(r.out, what + " stdout");
    no_terminal_controls(r.err, what + " stderr");
  }
  for (const auto& verb : std::vector<std::vector<std::string>>{
           {"list", "--json"}, {"stats", "--json"}, {"show", "0", "--json"}, {"show", "1", "--json"}}) {
    const auto r = run_pillbox(e2e::quarantine_args(server, "esc", verb), "", {}, {}, 60);
    const std::string what = verb[0] + " " + verb[1];
    INFO(what << ": " << r.describe());
    CHECK(r.exit_code == 0);
    one_line_per_record(r, what);
    no_terminal_controls(r.out, what + " stdout", /*json=*/true);
    no_terminal_controls(r.err, what + " stderr");
  }
}

// ---- 5. hostile numbers ---------------------------------------------------------------

void hostile_numbers(e2e::RabbitServer& server) {
  auto c = topology(server, "nums");
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  for (int i = 0; i < 2; ++i) {
    const json record = {{"kind", "crash"},
                         {"fingerprint", "same"},
                         {"repeats", kMax},
                         {"deliveries", std::numeric_limits<std::uint64_t>::max()},
                         {"payload_size", i == 0 ? kMin : kMax},
                         {"cpu_ms", kMax},
                         {"wall_ms", kMax},
                         {"max_rss_kb", kMax},
                         {"exit_code", kMax},
                         {"signal", i == 0 ? kMin : kMax},
                         {"attempts_history",
                          {{{"delivery", kMax}, {"at_ms", kMax}},
                           {{"delivery", kMin}, {"at_ms", kMin}},
                           {{"delivery", -1}, {"at_ms", 1e300}}}},
                         {"created_at", "9999-12-31T23:59:60.999Z"}};
    const json x_death = {{"deaths",
                           {{{"reason", "expired"}, {"count", kMax}, {"time", kMax}},
                            {{"count", kMin}, {"time", kMin}},
                            {{"time", 253402300799}}}}};
    AmqpOutgoing m;
    m.body = "numbers";
    m.headers = {{"key", "n" + std::to_string(i)},
                 {"pillbox-queue", std::string("nums")},
                 {"x-delivery-count", AmqpValue::of_kind('L', std::numeric_limits<std::uint64_t>::max())},
                 {"pillbox-record", record.dump()},
                 {"pillbox-x-death", x_death.dump()}};
    letter(c, "nums", m);
  }
  const auto stats = run_pillbox(e2e::quarantine_args(server, "nums", {"stats", "--json"}), "", {}, {}, 60);
  INFO(stats.describe());
  REQUIRE(stats.exit_code == 0);
  REQUIRE(stats.records.size() == 1);
  const json& group = stats.records[0];
  CHECK(group.value("records", -1) == 2);
  // Two records that each claim INT64_MAX repeats: a sum that wrapped
  // would read negative (and is undefined behaviour).
  CHECK_MESSAGE(group.value("repeats", std::int64_t{-1}) >= 0, group.dump());
  for (const auto& verb : std::vector<std::vector<std::string>>{
           {"stats"}, {"list"}, {"list", "--json"}, {"show", "0"}, {"show", "1", "--json"}, {"show", "1"}}) {
    const auto r = run_pillbox(e2e::quarantine_args(server, "nums", verb), "", {}, {}, 60);
    INFO(verb[0] << ": " << r.describe());
    CHECK(r.exit_code == 0);
    CHECK(r.term_signal == 0);
  }
}

// ---- 6. headers of forged types ---------------------------------------------------------

// Every header pillbox reads, of a type it does not expect: the letter is
// still listed, under its own offset, and nothing breaks the listing.
void forged_header_types(e2e::RabbitServer& server) {
  auto c = topology(server, "types");
  const std::vector<std::string> names = {"key", "pillbox-record", "pillbox-original", "pillbox-x-death",
                                          "pillbox-queue", "pillbox-canary", "x-first-death-reason",
                                          "x-first-death-queue", "pillbox-sig"};
  const std::vector<AmqpValue> values = {
      AmqpValue(std::int64_t{-1}),
      AmqpValue::of_kind('x', std::string("{\"kind\":\"bytes\"}")),
      AmqpValue::of_kind('d', std::numeric_limits<double>::quiet_NaN()),
      AmqpValue::of_kind('t', true),
      AmqpValue::timestamp(std::numeric_limits<std::uint64_t>::max()),
      AmqpValue::of_kind('b', std::int64_t{-128}),
  };
  std::size_t n = 0;
  for (const AmqpValue& v : values) {
    AmqpOutgoing m;
    m.body = "typed";
    for (const std::string& name : names) m.headers.push_back({name, v});
    // The broker may refuse a type a stream cannot keep (as 3.10 does a
    // top-level decimal): said, and the listing must survive it.
    auto publisher = e2e::amqp_connect(server);
    REQUIRE(publisher.confirm_publishes().is_ok());
    REQUIRE(publisher.publish_to_exchange("types.dlx", m).is_ok());
    if (const auto confirmed = publisher.wait_confirmed(); confirmed.is_ok()) {
      ++n;
    } else {
      MESSAGE("headers of type '" << v.kind << "' refused by the broker: " << confirmed.message());
    }
  }
  // A record of every JSON shape but an object, and one nested deep.
  for (const std::string& record : {std::string("[1,2,3]"), std::string("\"text\""), std::string("null"),
                                    std::string(5000, '[') + std::string(5000, ']'), std::string("{\"a\":") +
                                    std::string(3000, '{') + std::string(3000, '}') + "}"}) {
    AmqpOutgoing m;
    m.body = "shaped";
    m.headers = {{"key", std::string("shape")}, {"pillbox-record", record}, {"pillbox-x-death", record},
                 {"pillbox-original", record}};
    letter(c, "types", m);
    ++n;
  }
  const auto list = run_pillbox(e2e::quarantine_args(server, "types", {"list", "--json"}), "", {}, {}, 60);
  INFO(list.describe());
  REQUIRE(list.exit_code == 0);
  CHECK(list.records.size() == n);
  one_line_per_record(list, "list --json");
  for (std::size_t i = 0; i < n; ++i) {
    const auto shown = run_pillbox(e2e::quarantine_args(server, "types", {"show", std::to_string(i)}), "", {}, {}, 60);
    CHECK_MESSAGE(shown.exit_code == 0, "show " << i << ": " << shown.describe());
    CHECK(shown.term_signal == 0);
  }
  const auto stats = run_pillbox(e2e::quarantine_args(server, "types", {"stats"}), "", {}, {}, 60);
  CHECK_MESSAGE(stats.exit_code == 0, stats.describe());
}

// ---- 7. a forged canary is counted, never hidden silently ---------------------------------

void forged_canary_is_counted(e2e::RabbitServer& server) {
  auto c = topology(server, "canary");
  AmqpOutgoing real;
  real.body = "real";
  real.headers = {{"key", std::string("real")}};
  letter(c, "canary", real);
  AmqpOutgoing fake;
  fake.body = "hidden poison";
  fake.headers = {{"key", std::string("hidden")},
                  {"pillbox-canary", std::string("abc")},
                  {"x-first-death-reason", std::string("expired")},
                  {"x-first-death-queue", std::string("canary.doctor.abc")}};
  letter(c, "canary", fake);
  const auto list = run_pillbox(e2e::quarantine_args(server, "canary", {"list", "--json"}), "", {}, {}, 60);
  REQUIRE_MESSAGE(list.exit_code == 0, list.describe());
  CHECK(ids_of(list) == std::vector<std::int64_t>{0});
  CHECK(list.err.find("1 message of canary.dlq left out") != std::string::npos);
  CHECK(list.err.find("can make a message look like one") != std::string::npos);
  const auto stats = run_pillbox(e2e::quarantine_args(server, "canary", {"stats"}), "", {}, {}, 60);
  CHECK(stats.err.find("1 message of canary.dlq left out") != std::string::npos);
}

// ---- 8. export writes the payload, exactly -------------------------------------------------

void export_writes_the_payload(e2e::RabbitServer& server, const e2e::TempDir& dir) {
  auto c = topology(server, "exp");
  std::string payload;
  for (int i = 0; i < 256; ++i) payload += static_cast<char>(i);
  payload += std::string(200 << 10, '\0');  // over what a listing keeps
  AmqpOutgoing m;
  m.body = payload;
  m.headers = {{"key", std::string("exported")},
               {"pillbox-queue", std::string("exp")},
               {"pillbox-record", json{{"payload_sha256", pillbox::sha256_hex(payload)}}.dump()}};
  letter(c, "exp", m);
  // A record that names another payload's sha256: its bytes are not
  // exported as that record's.
  AmqpOutgoing lying = m;
  lying.body = "other bytes";
  letter(c, "exp", lying);
  const std::string out = dir.path() + "/exported";
  const auto r = run_pillbox(e2e::quarantine_args(server, "exp", {"export", "0", "-o", out}), "", {}, {}, 60);
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  std::ifstream in(out, std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(in), {}) == payload);
  const std::string out2 = dir.path() + "/lying";
  const auto l = run_pillbox(e2e::quarantine_args(server, "exp", {"export", "1", "-o", out2}), "", {}, {}, 60);
  CHECK(l.exit_code != 0);
  struct stat st{};
  CHECK(::stat(out2.c_str(), &st) != 0);
}

// ---- 9. NAME.dlq gone or declared again ------------------------------------------------------

void dlq_deleted_or_declared_again(e2e::RabbitServer& server) {
  auto c = topology(server, "gone");
  for (int i = 0; i < 5; ++i) {
    AmqpOutgoing m;
    m.body = "x";
    m.headers = {{"key", "g" + std::to_string(i)}};
    letter(c, "gone", m);
  }
  REQUIRE(c.delete_queue("gone.dlq").is_ok());
  const auto missing = run_pillbox(e2e::quarantine_args(server, "gone", {"list"}), "", {}, {}, 30);
  CHECK(missing.exit_code == 3);
  CHECK(missing.seconds < 10);
  // Declared again (a stream, empty), then one letter: offset 0 is the new one.
  REQUIRE(pillbox::broker::declare_topology(c, {.queue = "gone"}).has_value());
  AmqpOutgoing m;
  m.body = "new";
  m.headers = {{"key", std::string("new")}};
  letter(c, "gone", m);
  const auto list = run_pillbox(e2e::quarantine_args(server, "gone", {"list", "--json"}), "", {}, {}, 30);
  REQUIRE_MESSAGE(list.exit_code == 0, list.describe());
  CHECK(ids_of(list) == std::vector<std::int64_t>{0});
  const auto old = run_pillbox(e2e::quarantine_args(server, "gone", {"show", "4"}), "", {}, {}, 30);
  CHECK(old.exit_code == 2);
  CHECK(old.seconds < 10);
  // A quorum queue where the stream should be: refused, said so.
  REQUIRE(c.delete_queue("gone.dlq").is_ok());
  REQUIRE(c.declare_queue("gone.dlq", {{"x-queue-type", std::string("quorum")}}).has_value());
  const auto quorum = run_pillbox(e2e::quarantine_args(server, "gone", {"list"}), "", {}, {}, 30);
  CHECK(quorum.exit_code == 3);
  CHECK(quorum.err.find("x-queue-type") != std::string::npos);
}

// ---- 10. the worker's reject path ---------------------------------------------------------------

// A key large enough that the record and original are left out of the dead
// letter, yet small enough that the dead letter fits a frame: the worker
// writes it (with its record's kind), it is not rejected to the broker.
void sendable_dead_letter_is_not_rejected(e2e::RabbitServer& server) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(pillbox::broker::declare_topology(c, {.queue = "fits", .delivery_limit = pillbox::broker::worker_delivery_limit(1)})
              .has_value());
  REQUIRE(c.confirm_publishes().is_ok());
  AmqpOutgoing m;
  m.body = "S crashes";
  m.message_id = "fits-1";
  m.headers = {{"key", std::string(90 << 10, 'k')}};
  REQUIRE(c.publish("fits", m).is_ok());
  REQUIRE(c.wait_confirmed().is_ok());
  const auto r = run_pillbox({"worker", "--amqp", server.url(), "--queue", "fits", "--max-attempts", "1", "--jobs",
                              "1", "--exit-when-idle", "1500ms", "--json", "--", e2e::fixture("mixed_poison")},
                             "", {}, {}, 60);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0].value("verdict", "") == "dead-lettered");
  CHECK(r.records[0].dump().find("rejected: RabbitMQ dead-letters it whole") == std::string::npos);
  const auto shown = run_pillbox(e2e::quarantine_args(server, "fits", {"show", "0", "--json"}), "", {}, {}, 60);
  REQUIRE_MESSAGE(shown.records.size() == 1, shown.describe());
  CHECK_FALSE(shown.records[0].at("amqp").contains("first_death_reason"));  // the worker's, not the broker's
  // (Its record was over the 24 KiB a dead letter's header holds: said as
  // omitted, so the kind reads as the dead letter's own.)
  CHECK(shown.records[0].at("amqp").value("message_id", "") == "fits-1");
}

}  // namespace

TEST_CASE("rabbitmq quarantine under attack: what a publisher to NAME.dlx can put in NAME.dlq") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  e2e::TempDir dir(0700);
  const std::string key = e2e::fleet_key_file(dir);
  const auto start = std::chrono::steady_clock::now();
  auto lap = [&, last = start](const char* what) mutable {
    const auto now = std::chrono::steady_clock::now();
    MESSAGE(what << ": " << std::chrono::duration<double>(now - last).count() << " s");
    last = now;
  };
  {
    INFO("a forged x-stream-offset");
    forged_stream_offsets(server);
    lap("forged offsets");
  }
  {
    INFO("a flood: the stream never falls quiet");
    flood_does_not_hang_the_reader(server);
    lap("flood");
  }
  {
    INFO("a signed letter's copy with another payload over 64 KiB");
    swapped_large_payload_is_not_valid(server, key);
    lap("swapped payload");
  }
  {
    INFO("one message dead-lettered twice: a copy, not a second record");
    copies_of_one_message(server, key);
    lap("copies");
  }
  {
    INFO("escape sequences in every field; JSON lines");
    hostile_text_stays_text(server);
    lap("hostile text");
  }
  {
    INFO("hostile numbers");
    hostile_numbers(server);
    lap("hostile numbers");
  }
  {
    INFO("headers of forged types, records of every shape");
    forged_header_types(server);
    lap("forged types");
  }
  {
    INFO("a forged canary");
    forged_canary_is_counted(server);
    lap("forged canary");
  }
  {
    INFO("export");
    export_writes_the_payload(server, dir);
    lap("export");
  }
  {
    INFO("NAME.dlq deleted, declared again, of another type");
    dlq_deleted_or_declared_again(server);
    lap("dlq gone");
  }
  {
    INFO("the worker's reject path: a dead letter that fits is not rejected");
    sendable_dead_letter_is_not_rejected(server);
    lap("reject path");
  }
  MESSAGE("attacks took " << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() << " s");
}
