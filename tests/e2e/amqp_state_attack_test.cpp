// The operators' state of the quarantine on RabbitMQ (the stream
// NAME.dlq.state, supervisor/broker/amqp_state_log.h) under attack: what
// anyone allowed to publish to it can append (states too large for a reader
// to keep, hostile numbers, nesting, escape sequences, a flood of junk),
// operators racing each other, and the log declared as another kind of
// queue before pillbox. Forging a state is a documented limit (the log is as
// trusted as Redis's NAME:dlq:state); what is asserted is that nothing
// crashes, hangs or grows without bound, no change is lost or applied twice,
// and no change is reported done that readers do not see. One broker for
// every case: one test case, a function per attack.
#include <doctest/doctest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_state_log.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/broker/fleet_state.h"
#include "tests/e2e/background.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using pillbox::broker::AmqpConnection;
using pillbox::broker::AmqpOutgoing;
using e2e::run_pillbox;

namespace {

// NAME's topology with `letters` dead letters in NAME.dlq (records 0 ..
// letters - 1), and a connection that publishes with confirms.
AmqpConnection topology(const e2e::RabbitServer& server, const std::string& queue, int letters) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(pillbox::broker::declare_topology(c, {.queue = queue}).has_value());
  REQUIRE(c.confirm_publishes().is_ok());
  for (int i = 0; i < letters; ++i) {
    const std::string body = "payload " + std::to_string(i);  // AmqpOutgoing::body is a view
    AmqpOutgoing m;
    m.body = body;
    m.headers = {{"key", "k" + std::to_string(i)}};
    REQUIRE(c.publish_to_exchange(queue + ".dlx", m).is_ok());
  }
  REQUIRE(c.wait_confirmed().is_ok());
  return c;
}

// The state log declared as pillbox declares it.
void make_state_log(AmqpConnection& c, const std::string& queue) {
  const auto s = pillbox::broker::declare_state_log(c, queue);
  REQUIRE_MESSAGE(s.is_ok(), s.message());
}

void append(AmqpConnection& c, const std::string& queue, const std::string& body) {
  AmqpOutgoing m;
  m.body = body;
  REQUIRE(c.publish(queue + ".dlq.state", m).is_ok());
  REQUIRE(c.wait_confirmed().is_ok());
}

std::string state_message(const std::string& record, std::int64_t version, const std::string& state) {
  return json{{"record", record}, {"version", version}, {"state", state}}.dump();
}

json show(const e2e::RabbitServer& server, const std::string& queue, const std::string& id) {
  const auto r = run_pillbox(e2e::quarantine_args(server, queue, {"show", id, "--json"}), "", {}, {}, 60);
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.records.size() == 1);
  return r.records[0];
}

std::size_t count_of(const json& audit, const std::string& action) {
  std::size_t n = 0;
  for (const json& e : audit) n += e.value("action", "") == action ? 1 : 0;
  return n;
}

void no_terminal_controls(const std::string& text, const std::string& what) {
  for (const char c : {'\x1b', '\x07', '\r', '\x08', '\x9b', '\x7f'}) {
    const auto at = text.find(c);
    CHECK_MESSAGE(at == std::string::npos, what << ": control byte " << static_cast<int>(static_cast<unsigned char>(c))
                                                << " at " << at);
  }
}

// ---- 1. a state too large to be read back ------------------------------------------

// A forged version 1 whose audit trail leaves a few bytes below the log's
// 1 MiB per message: an honest discard adds an audit entry, and its message
// is over the size a reader keeps. The discard must not say "discarded"
// while every reader still sees the record quarantined (nor, retried, go on
// appending megabytes).
void state_too_large_to_read_back(e2e::RabbitServer& server) {
  auto c = topology(server, "big", 1);
  make_state_log(c, "big");
  pillbox::broker::FleetState forged;
  forged.audit.push_back({1, "someone", "noted", ""});
  const std::size_t target = (1u << 20) - 64;
  std::string body = state_message("0", 1, pillbox::broker::state_json(forged));
  forged.audit.back().detail.assign(target - body.size(), 'a');
  body = state_message("0", 1, pillbox::broker::state_json(forged));
  REQUIRE(body.size() == target);
  append(c, "big", body);

  const auto discarded = run_pillbox(e2e::quarantine_args(server, "big", {"discard", "0", "--reason", "too big to keep"}), "", {}, {}, 60);
  INFO(discarded.describe());
  CHECK(discarded.seconds < 30);
  const json shown = show(server, "big", "0");
  const bool in_effect = shown.value("status", "") == "discarded";
  // Said done only when done.
  CHECK_MESSAGE((discarded.exit_code == 0) == in_effect,
                "discard exit " << discarded.exit_code << ", status shown " << shown.value("status", ""));
  if (discarded.exit_code != 0) CHECK(discarded.err.find("state") != std::string::npos);
  MESSAGE("discard of a record with a ~1 MiB forged state: exit " << discarded.exit_code << " in "
                                                                   << discarded.seconds << " s");
}

// ---- 2. hostile numbers, nesting, junk ---------------------------------------------

// Versions at the ends of int64 and past them, floats where integers go,
// nesting 100,000 deep in the message and in its state: nothing crashes or
// overflows, an honest change still applies, and list and show agree.
void hostile_numbers_and_nesting(e2e::RabbitServer& server) {
  auto c = topology(server, "nums", 3);
  make_state_log(c, "nums");
  const std::string discarded = R"({"status":"discarded","updated_at":1,"audit":[]})";
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  for (const std::string& body : {
           state_message("0", max, discarded),
           state_message("0", std::numeric_limits<std::int64_t>::min(), discarded),
           std::string(R"({"record":"0","version":18446744073709551615,"state":")") + "{\\\"status\\\":\\\"discarded\\\"}\"}",
           std::string(R"({"record":"0","version":1e300,"state":"{}"})"),
           std::string(R"({"record":"0","version":1.0,"state":"{}"})"),
           std::string(R"({"record":"0","version":0,"state":"{\"status\":\"discarded\"}"})"),
           std::string(R"({"record":"0","version":-1,"state":"{\"status\":\"discarded\"}"})"),
           std::string(200000, '[') + std::string(200000, ']'),
           state_message("1", 1, std::string(100000, '[') + std::string(100000, ']')),
           state_message("1", 1, R"({"status":"quarantined","audit":[1,"x",null,[],{"at":"x"}]})"),
           // Floats where integers go: undefined behaviour to convert to
           // int64 unchecked.
           state_message("2", 1, R"({"status":"quarantined","updated_at":1e300,"audit":[{"at":-1e300,"actor":"a",)"
                                 R"("action":"noted","detail":"d"}],"reproduce":{"verdict":"flaky","runs":1e300,)"
                                 R"("matches":-1e300},"minimize":{"runs":1e300,"elapsed_ms":1e300}})"),
           std::string("not json at all"),
           std::string(""),
       }) {
    append(c, "nums", body);
  }
  const auto listed = run_pillbox(e2e::quarantine_args(server, "nums", {"list", "--json"}), "", {}, {}, 60);
  INFO(listed.describe());
  REQUIRE(listed.exit_code == 0);
  REQUIRE(listed.records.size() == 3);
  for (const json& r : listed.records) CHECK_MESSAGE(r.value("status", "") == "quarantined", r.dump().substr(0, 300));
  const json two = show(server, "nums", "2");
  const std::string text = two.dump();
  CHECK_MESSAGE(text.find("-9223372036854775808") == std::string::npos, text.substr(0, 600));
  const auto two_text = run_pillbox(e2e::quarantine_args(server, "nums", {"show", "2"}), "", {}, {}, 60);
  CHECK(two_text.exit_code == 0);
  const auto d = run_pillbox(e2e::quarantine_args(server, "nums", {"discard", "0", "--reason", "honest"}), "", {}, {}, 60);
  INFO(d.describe());
  CHECK(d.exit_code == 0);
  CHECK(show(server, "nums", "0").value("status", "") == "discarded");
  const auto again = run_pillbox(e2e::quarantine_args(server, "nums", {"discard", "1", "--reason", "honest"}), "", {}, {}, 60);
  CHECK(again.exit_code == 0);
  CHECK(show(server, "nums", "1").value("status", "") == "discarded");
}

// ---- 3. escape sequences in a forged audit trail ---------------------------------

void escapes_in_the_audit(e2e::RabbitServer& server) {
  auto c = topology(server, "esc", 1);
  make_state_log(c, "esc");
  pillbox::broker::FleetState forged;
  const std::string hostile = "\x1b]0;pwned\x07\x1b[2J\r\x08\xc2\x9b" "31m\x9b" "1m\x7f";
  forged.audit.push_back({1, "actor " + hostile, "noted " + hostile, "detail " + hostile});
  forged.reproduce_verdict = "flaky" + hostile;
  forged.waiting_entry = hostile;
  forged.minimized_sha256 = hostile;
  append(c, "esc", state_message("0", 1, pillbox::broker::state_json(forged)));
  const auto shown = run_pillbox(e2e::quarantine_args(server, "esc", {"show", "0"}), "", {}, {}, 60);
  INFO(shown.describe());
  CHECK(shown.exit_code == 0);
  no_terminal_controls(shown.out + shown.err, "show");
  const auto listed = run_pillbox(e2e::quarantine_args(server, "esc", {"list"}), "", {}, {}, 60);
  CHECK(listed.exit_code == 0);
  no_terminal_controls(listed.out + listed.err, "list");
  const auto stats = run_pillbox(e2e::quarantine_args(server, "esc", {"stats"}), "", {}, {}, 60);
  no_terminal_controls(stats.out + stats.err, "stats");
  const auto d = run_pillbox(e2e::quarantine_args(server, "esc", {"discard", "0", "--reason", "r"}), "", {}, {}, 60);
  CHECK(d.exit_code == 0);
  no_terminal_controls(d.out + d.err, "discard");
}

// ---- 4. operators racing ------------------------------------------------------------

// Six discards of one record at once, by six processes: exactly one
// applies it (one audit entry), the others say it was already done; none is
// lost. On a log that exists, none fails. On a log the racers create, the
// broker may refuse a consume of the stream it just made (its member not
// yet started: "does not have a replica", or INTERNAL_ERROR): such a
// discard fails before it writes, and the others still hold.
void racing_discards(e2e::RabbitServer& server, const std::string& queue, bool log_exists) {
  auto c = topology(server, queue, 1);
  if (log_exists) make_state_log(c, queue);
  constexpr int kRacers = 6;
  std::vector<e2e::RunResult> results(kRacers);
  std::vector<std::thread> racers;
  for (int i = 0; i < kRacers; ++i) {
    racers.emplace_back([&, i] {
      results[i] = run_pillbox(e2e::quarantine_args(server, queue, {"discard", "0", "--reason", "racer " + std::to_string(i)}), "",
                               {}, {}, 120);
    });
  }
  for (auto& t : racers) t.join();
  int ok = 0;
  int already = 0;
  double slowest = 0;
  for (const auto& r : results) {
    if (log_exists) CHECK_MESSAGE(r.exit_code == 0, r.describe());
    if (r.exit_code == 0) {
      ++ok;
    } else {
      CHECK_MESSAGE(r.exit_code == 3, r.describe());
      MESSAGE("a racer on a new log failed: " << r.err);
    }
    already += r.out.find("already discarded") != std::string::npos ? 1 : 0;
    slowest = std::max(slowest, r.seconds);
  }
  const json shown = show(server, queue, "0");
  if (ok > 0) {
    CHECK(already == ok - 1);
    CHECK(shown.value("status", "") == "discarded");
  }
  CHECK(count_of(shown.at("audit"), "discarded") == (ok > 0 ? 1u : 0u));
  MESSAGE(kRacers << " racing discards (log " << std::string(log_exists ? "there" : "new") << "): " << ok << " done, slowest "
                  << slowest << " s");
}

// ---- 5. a flood of junk -------------------------------------------------------------

// Many small messages that are no state: list counts them, a discard still
// applies, both in bounded time.
void flood_of_junk(e2e::RabbitServer& server) {
  auto c = topology(server, "junk", 1);
  make_state_log(c, "junk");
  constexpr int kJunk = 20000;
  for (int i = 0; i < kJunk; ++i) {
    const std::string body = i % 2 == 0 ? "x" : state_message("0", 2 + i, "{\"status\":\"discarded\"}");
    AmqpOutgoing m;
    m.body = body;
    REQUIRE(c.publish("junk.dlq.state", m).is_ok());
  }
  REQUIRE(c.wait_confirmed().is_ok());
  const auto listed = run_pillbox(e2e::quarantine_args(server, "junk", {"list"}), "", {}, {}, 120);
  INFO(listed.describe());
  CHECK(listed.exit_code == 0);
  CHECK(listed.err.find(std::to_string(kJunk / 2) + " messages of junk.dlq.state left out") != std::string::npos);
  const auto d = run_pillbox(e2e::quarantine_args(server, "junk", {"discard", "0", "--reason", "r"}), "", {}, {}, 120);
  CHECK(d.exit_code == 0);
  CHECK(show(server, "junk", "0").value("status", "") == "discarded");
  MESSAGE(kJunk << " junk state messages: list " << listed.seconds << " s, discard " << d.seconds << " s");
}

// ---- 6. the log declared as another kind of queue ---------------------------------

void state_log_not_a_stream(e2e::RabbitServer& server) {
  for (const std::string type : {"classic", "quorum"}) {
    const std::string queue = "ns" + type;
    auto c = topology(server, queue, 1);
    REQUIRE(c.declare_queue(queue + ".dlq.state", {{"x-queue-type", type}}).has_value());
    // A message in it: nothing pillbox does may consume it.
    REQUIRE(c.publish(queue + ".dlq.state", state_message("0", 1, "{\"status\":\"discarded\"}")).is_ok());
    REQUIRE(c.wait_confirmed().is_ok());
    const auto d = run_pillbox(e2e::quarantine_args(server, queue, {"discard", "0", "--reason", "r"}), "", {}, {}, 60);
    INFO(type << ": " << d.describe());
    CHECK(d.exit_code != 0);
    CHECK(d.seconds < 20);
    CHECK_MESSAGE(d.err.find("stream") != std::string::npos, d.err);
    MESSAGE(type << " state log, discard says: " << d.err);
    const auto l = run_pillbox(e2e::quarantine_args(server, queue, {"list"}), "", {}, {}, 60);
    INFO(type << " list: " << l.describe());
    CHECK(l.exit_code != 0);
    CHECK(l.seconds < 20);
    MESSAGE(type << " state log, list says: " << l.err);
    auto check = e2e::amqp_connect(server);
    auto held = check.check_queue(queue + ".dlq.state");
    REQUIRE(held.has_value());
    CHECK(held->messages == 1);
  }
}

// ---- 7. operators killed mid-change -----------------------------------------------

// Discards SIGKILLed at staggered moments (before, during and after their
// publish), then one that runs to its end: the record is discarded once,
// the log stays readable, and list and show agree.
void killed_mid_change(e2e::RabbitServer& server) {
  auto c = topology(server, "kill", 1);
  for (int delay_ms : {150, 300, 450, 600, 750, 900}) {
    e2e::Background d(e2e::pillbox_binary(), e2e::quarantine_args(server, "kill", {"discard", "0", "--reason", "killed " + std::to_string(delay_ms)}));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    d.signal(SIGKILL);
    d.wait();
  }
  const auto d = run_pillbox(e2e::quarantine_args(server, "kill", {"discard", "0", "--reason", "last"}), "", {}, {}, 60);
  INFO(d.describe());
  CHECK(d.exit_code == 0);
  const json shown = show(server, "kill", "0");
  CHECK(shown.value("status", "") == "discarded");
  CHECK(count_of(shown.at("audit"), "discarded") == 1);
  const auto listed = run_pillbox(e2e::quarantine_args(server, "kill", {"list", "--json", "--status", "discarded"}), "", {}, {}, 60);
  CHECK(listed.records.size() == 1);
}

// ---- 8. a broker restart ----------------------------------------------------------

// A discard while the broker is down fails in bounded time; after the
// restart the states written before it are all there and a change applies.
void broker_restart(e2e::RabbitServer& server) {
  server.stop(SIGTERM);
  const auto down = run_pillbox(e2e::quarantine_args(server, "race", {"discard", "0", "--reason", "down"}), "", {}, {}, 60);
  CHECK(down.exit_code != 0);
  CHECK(down.seconds < 20);
  server.start();
  // RabbitMQ says it is ready before it has recovered its streams: until
  // then they are missing (404).
  const auto back = std::chrono::steady_clock::now();
  CHECK(e2e::eventually(
      [&] { return run_pillbox(e2e::quarantine_args(server, "race", {"show", "0"}), "", {}, {}, 60).exit_code == 0; },
      std::chrono::seconds(30), std::chrono::milliseconds(500)));
  MESSAGE("streams back " << std::chrono::duration<double>(std::chrono::steady_clock::now() - back).count()
                          << " s after the broker said it was ready");
  CHECK(show(server, "race", "0").value("status", "") == "discarded");
  CHECK(show(server, "nums", "0").value("status", "") == "discarded");
  const auto d = run_pillbox(e2e::quarantine_args(server, "kill", {"discard", "0", "--reason", "after restart"}), "", {}, {}, 60);
  INFO(d.describe());
  CHECK(d.exit_code == 0);
  CHECK(d.out.find("already discarded") != std::string::npos);
}

}  // namespace

TEST_CASE("rabbitmq quarantine state log under attack: NAME.dlq.state") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  const auto start = std::chrono::steady_clock::now();
  auto lap = [&, last = start](const char* what) mutable {
    const auto now = std::chrono::steady_clock::now();
    MESSAGE(std::string(what) << ": " << std::chrono::duration<double>(now - last).count() << " s");
    last = now;
  };
  {
    INFO("a state too large to read back");
    state_too_large_to_read_back(server);
    lap("too large");
  }
  {
    INFO("hostile numbers and nesting");
    hostile_numbers_and_nesting(server);
    lap("numbers");
  }
  {
    INFO("escapes in a forged audit trail");
    escapes_in_the_audit(server);
    lap("escapes");
  }
  {
    INFO("racing discards");
    racing_discards(server, "race", true);
    racing_discards(server, "race2", false);
    lap("race");
  }
  {
    INFO("a flood of junk");
    flood_of_junk(server);
    lap("junk");
  }
  {
    INFO("the log of another queue type");
    state_log_not_a_stream(server);
    lap("not a stream");
  }
  {
    INFO("operators killed mid-change");
    killed_mid_change(server);
    lap("killed");
  }
  {
    INFO("a broker restart");
    broker_restart(server);
    lap("restart");
  }
}
