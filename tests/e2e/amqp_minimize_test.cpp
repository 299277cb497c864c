// pillbox minimize --amqp against a real rabbitmq-server the test starts
// itself (rabbit_server.h; one broker, one test case, a function per case):
// a crashing payload with junk around its trigger shrinks to the trigger;
// a session SIGKILLed midway resumes from the best payload it saved, which
// it saves at once and then at most every 5 s; export --minimized gives the
// bytes and show says so; --restart searches again; a record a replay
// holds, or discarded, is minimized all the same (as on Redis); and
// claims forged in NAME.dlq.state and NAME.dlq.minimized (another
// record's payload, other bytes, one too large, an offset past the end, a
// record that does not exist, a forged progress) are not taken.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_payload_stream.h"
#include "supervisor/broker/amqp_quarantine.h"
#include "supervisor/broker/amqp_state_log.h"
#include "supervisor/broker/amqp_stream_reader.h"
#include "supervisor/broker/fleet_payload_log.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using pillbox::broker::AmqpPayloadStream;
using pillbox::broker::AmqpOutgoing;
using pillbox::broker::AmqpQuarantine;
using pillbox::broker::AmqpStateLog;
using pillbox::broker::FleetRecord;
using pillbox::broker::FleetState;
using e2e::run_pillbox;

namespace {

constexpr std::string_view kToken = "P0ISONED";  // the poison plugin crashes on it anywhere

struct Fleet {
  e2e::RabbitServer& server;
  std::string key;  // the fleet key's file

  // The poison plugin, each run `delay_ms` long.
  std::vector<std::string> worker(const std::string& queue, int delay_ms, const std::vector<std::string>& extra) const {
    std::vector<std::string> args = {"worker",       "--amqp",    server.url(),   "--queue",
                                     queue,          "--max-attempts", "1",       "--fleet-key",
                                     key,            "--handler", e2e::poison_plugin(), "--arg",
                                     "delay_ms=" + std::to_string(delay_ms)};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  std::vector<std::string> minimize(const std::string& queue, const std::string& id,
                                    const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = {"minimize", id,        "--jobs", "1",   "--json", "--quiet", "--handler",
                                     e2e::poison_plugin(), "--amqp", server.url(), "--queue", queue,
                                     "--fleet-key", key};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
  e2e::RunResult quarantine(const std::string& queue, const std::vector<std::string>& verb) const {
    auto args = e2e::quarantine_args(server, queue, verb);
    args.insert(args.end(), {"--fleet-key", key});
    return run_pillbox(args);
  }
  json show(const std::string& queue, const std::string& id) const {
    const auto r = quarantine(queue, {"show", id, "--json"});
    REQUIRE_MESSAGE(r.records.size() == 1, r.describe());
    return r.records[0];
  }
};

// `size` random lowercase letters (never the token) with the token at `at`.
std::string junk_around_token(std::size_t size, std::size_t at) {
  std::mt19937 rng(28);
  std::string bytes(size, 'a');
  for (char& c : bytes) c = static_cast<char>('a' + rng() % 26);
  bytes.replace(at, kToken.size(), kToken);
  return bytes;
}

// Publishes `payloads` to `queue` (keys k0, k1, ...) and has the poison
// plugin dead-letter each: records 0, 1, ... in that order.
void dead_letter(const Fleet& fleet, const std::string& queue, int delay_ms, const std::vector<std::string>& payloads) {
  // A worker declares the topology (NAME must exist for a publish to it).
  const auto declared = run_pillbox(fleet.worker(queue, 0, {"--exit-when-idle", "200ms", "--quiet"}));
  REQUIRE_MESSAGE(declared.exit_code == 0, declared.describe());
  auto c = e2e::amqp_connect(fleet.server);
  REQUIRE(c.confirm_publishes().is_ok());
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    AmqpOutgoing m;
    m.body = payloads[i];
    m.message_id = "msg-" + std::to_string(i);
    m.headers = {{"key", "k" + std::to_string(i)}};
    REQUIRE(c.publish(queue, m).is_ok());
    REQUIRE(c.wait_confirmed().is_ok());  // one by one: dead-lettered, and so numbered, in this order
  }
  // One slot: dead-lettered in the order published.
  const auto w = run_pillbox(fleet.worker(queue, delay_ms, {"--jobs", "1", "--exit-when-idle", "1500ms", "--quiet"}));
  REQUIRE_MESSAGE(w.exit_code == 0, w.describe());
  const auto listed = fleet.quarantine(queue, {"list", "--json"});
  REQUIRE_MESSAGE(listed.records.size() == payloads.size(), listed.describe());
  for (const json& r : listed.records) {
    CHECK(r["signature"] == "valid");
    CHECK(r["key"] == "k" + r["id"].dump());
  }
}

// Record `id` as the quarantine reads it, its state with it.
FleetRecord record_of(const e2e::RabbitServer& server, const std::string& queue, const std::string& id) {
  auto address = pillbox::broker::parse_amqp_url(server.url());
  REQUIRE(address.has_value());
  auto q = AmqpQuarantine::open(*address, queue);
  REQUIRE_MESSAGE(q.has_value(), q.error());
  auto r = q->get(id);
  REQUIRE_MESSAGE(r.has_value(), r.error());
  return std::move(*r);
}

// How many payloads NAME.dlq.minimized holds (0: none yet).
std::int64_t appended(const e2e::RabbitServer& server, const std::string& queue) {
  auto c = e2e::amqp_connect(server);
  const std::string name = pillbox::broker::amqp_minimized_name(queue);
  if (!c.check_queue(name)) return 0;
  pillbox::broker::AmqpStreamReader reader(c, name, 0);
  auto end = reader.end();
  REQUIRE_MESSAGE(end.has_value(), end.error());
  return *end;
}

// The line of `text` that holds `part` ("" when none does).
std::string line_with(const std::string& text, const std::string& part) {
  const std::size_t at = text.find(part);
  if (at == std::string::npos) return "";
  const std::size_t from = text.rfind('\n', at);
  const std::size_t start = from == std::string::npos ? 0 : from + 1;
  return text.substr(start, text.find('\n', at) - start);
}

std::size_t count_action(const json& audit, const std::string& action) {
  std::size_t n = 0;
  for (const json& e : audit) n += e.value("action", "") == action ? 1 : 0;
  return n;
}

// 16 KiB of junk around the token, 100 ms a run: SIGKILLed once its first
// progress is saved, the next session resumes from that best payload and
// ends at the token; export and show have it; a finished search is not
// redone; --restart does it all again, saving at most every 5 s.
void killed_then_resumed(const Fleet& fleet) {
  const std::string payload = junk_around_token(16 * 1024, 9000);
  dead_letter(fleet, "slow", 100, {payload});
  const auto none = fleet.quarantine("slow", {"export", "0", "--minimized", "-o", "-"});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("record 0 has no minimized payload (pillbox minimize 0 --amqp URL --queue slow)") !=
        std::string::npos);

  e2e::Background first(e2e::pillbox_binary(), fleet.minimize("slow", "0"));
  // The first improvement is saved at once (halving the junk takes a few runs).
  REQUIRE_MESSAGE(e2e::eventually([&] { return record_of(fleet.server, "slow", "0").state.minimize.has_value(); },
                                  std::chrono::seconds(60), std::chrono::milliseconds(50)),
                  first.err());
  REQUIRE_MESSAGE(!first.ended(), (first.out() + first.err()));  // midway: about 60 runs of 100 ms to go
  first.signal(SIGKILL);
  CHECK(first.wait() == 128 + SIGKILL);

  const FleetRecord killed = record_of(fleet.server, "slow", "0");
  REQUIRE(killed.state.minimize.has_value());
  const pillbox::store::MinimizeState saved = *killed.state.minimize;
  CHECK_FALSE(saved.finished);
  CHECK(killed.record.minimized_sha256.empty());  // nothing recorded yet: the session never ended
  auto c = e2e::amqp_connect(fleet.server);
  auto payloads = AmqpPayloadStream::minimized(c, "slow");
  std::string why_not;
  auto best = pillbox::broker::read_minimization(*payloads, killed.state.minimize_best_at, killed, saved.best_sha256,
                                                 why_not);
  REQUIRE_MESSAGE(best.has_value(), best.error());
  REQUIRE_MESSAGE(best->has_value(), why_not);
  const std::size_t saved_size = (*best)->size();
  CHECK(saved_size < payload.size());
  CHECK(saved_size > kToken.size());
  CHECK((*best)->find(kToken) != std::string::npos);
  MESSAGE("killed after " << saved.runs << " runs with a best of " << saved_size << " bytes saved");

  const auto resumed = run_pillbox(fleet.minimize("slow", "0"));
  INFO(resumed.describe());
  REQUIRE(resumed.exit_code == 0);
  REQUIRE(resumed.records.size() == 1);
  const json& r = resumed.records[0];
  CHECK(r["id"] == 0);
  CHECK(r["resumed"] == true);
  CHECK(r["finished"] == true);
  CHECK(r["original_size"] == payload.size());
  CHECK(r["minimized_size"] == kToken.size());
  CHECK(r["minimized_sha256"] == pillbox::sha256_hex(kToken));
  // The saved session's runs count: it went on from there.
  CHECK(r["runs"].get<std::int64_t>() == saved.runs + r["runs_this_session"].get<std::int64_t>());

  e2e::TempDir dir;
  const std::string file = dir.path() + "/min.bin";
  const auto exported = fleet.quarantine("slow", {"export", "0", "--minimized", "-o", file});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);
  CHECK(e2e::read_file(file) == kToken);
  const auto original = fleet.quarantine("slow", {"export", "0", "-o", "-"});
  CHECK(original.out == payload);  // untouched
  const auto shown = fleet.quarantine("slow", {"show", "0"});
  INFO(shown.describe());
  CHECK(line_with(shown.out, "(export --minimized)").find("8 bytes, sha256 " + pillbox::sha256_hex(kToken)) !=
        std::string::npos);
  const json j = fleet.show("slow", "0");
  CHECK(j["minimized_sha256"] == pillbox::sha256_hex(kToken));
  CHECK(count_action(j["audit"], "minimized") == 1);
  CHECK(j["status"] == "quarantined");

  // Finished: not searched again.
  const auto done = run_pillbox(fleet.minimize("slow", "0"));
  REQUIRE_MESSAGE(done.records.size() == 1, done.describe());
  CHECK(done.records[0]["runs_this_session"] == 0);
  CHECK(done.records[0]["minimized_size"] == kToken.size());

  // --restart: from the original again, the whole search; each improvement
  // is not an append: the first at once, then at most one every 5 s, and
  // the end.
  const std::int64_t before = appended(fleet.server, "slow");
  const auto again = run_pillbox(fleet.minimize("slow", "0", {"--restart"}));
  INFO(again.describe());
  REQUIRE(again.records.size() == 1);
  const json& a = again.records[0];
  CHECK(a["resumed"] == false);
  CHECK(a["finished"] == true);
  CHECK(a["minimized_size"] == kToken.size());
  CHECK(a["runs_this_session"] == a["runs"]);
  // The resumed session had less to do than the whole search.
  CHECK(r["runs_this_session"].get<std::int64_t>() < a["runs_this_session"].get<std::int64_t>());
  const std::int64_t appends = appended(fleet.server, "slow") - before;
  const std::int64_t bound = 2 + again.seconds / 5;
  MESSAGE("--restart: " << a["runs"] << " runs in " << again.seconds << " s, " << appends
                        << " payloads appended (at most " << bound << ")");
  CHECK(appends >= 1);
  CHECK(appends <= bound);
  CHECK(count_action(fleet.show("slow", "0")["audit"], "minimized") == 1);  // the same result: not recorded twice
}

// As on Redis: minimize runs here and changes no status, so a record a
// replay holds, or one discarded, is minimized all the same.
void locked_and_discarded(const Fleet& fleet) {
  std::string payload = "S" + junk_around_token(300, 100);
  payload.replace(101, kToken.size(), "XXXXXXXX");  // no token: the 'S' alone crashes it
  dead_letter(fleet, "held", 0, {payload});
  const auto discarded = fleet.quarantine("held", {"discard", "0", "--reason", "known"});
  REQUIRE_MESSAGE(discarded.exit_code == 0, discarded.describe());
  auto other = e2e::amqp_connect(fleet.server);
  REQUIRE(other.declare_exclusive_queue("held.dlq.lock.0").is_ok());  // a replay's lock
  const auto refused = fleet.quarantine("held", {"discard", "0", "--reason", "again"});
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("is being replayed right now") != std::string::npos);

  const auto m = run_pillbox(fleet.minimize("held", "0"));
  INFO(m.describe());
  REQUIRE(m.exit_code == 0);
  REQUIRE(m.records.size() == 1);
  CHECK(m.records[0]["minimized_size"] == 1);
  REQUIRE(other.delete_queue("held.dlq.lock.0").is_ok());
  const json j = fleet.show("held", "0");
  CHECK(j["status"] == "discarded");  // as it was
  CHECK(j["minimized_sha256"] == pillbox::sha256_hex("S"));
  CHECK(count_action(j["audit"], "discarded") == 1);
  CHECK(count_action(j["audit"], "minimized") == 1);
  CHECK(fleet.quarantine("held", {"export", "0", "--minimized", "-o", "-"}).out == "S");
}

// What a publisher to NAME.dlq.state and NAME.dlq.minimized can write, by
// the compare and set pillbox uses itself: claims that are checked, not taken.
void forged_claims(const Fleet& fleet) {
  const std::string payload = "S" + std::string(63, 'j');
  dead_letter(fleet, "forged", 0, {payload, "A" + std::string(63, 'k')});
  auto c = e2e::amqp_connect(fleet.server);
  auto payloads = AmqpPayloadStream::minimized(c, "forged");
  AmqpStateLog log(c, "forged");
  auto forge = [&](const std::string& id, const std::function<void(FleetState&)>& change) {
    auto written = log.change(id, [&](FleetState& s) {
      change(s);
      return pillbox::Status::ok();
    });
    REQUIRE_MESSAGE(written.has_value(), written.error());
  };
  auto at = [&](const std::string& id, const std::string& bytes) {
    auto offset = payloads->append(id, bytes);
    REQUIRE_MESSAGE(offset.has_value(), offset.error());
    return *offset;
  };
  // Each forged claim of a minimized payload for record 0, and what export says of it.
  const std::string evil = "EVIL";
  const std::string oversized(payload.size() + 1, 'S');
  struct Claim {
    std::string sha256;   // of the minimized payload, as the forged state says
    std::int64_t at;      // where it is, likewise
    std::string refused;  // what export says of it
  };
  const std::vector<Claim> claims = {
      {pillbox::sha256_hex(evil), at("1", evil), "is not a payload of record 0"},
      {pillbox::sha256_hex("S"), at("0", evil), "does not match the sha256 its state names"},
      {pillbox::sha256_hex(oversized), at("0", oversized), "is 65 bytes, more than the record's own payload (64)"},
      {pillbox::sha256_hex(evil), 1'000'000'000'000, "which ends before it"},
      {pillbox::sha256_hex(evil), -1, "its state names no offset"},
  };
  for (const Claim& claim : claims) {
    forge("0", [&](FleetState& s) {
      s.minimized_sha256 = claim.sha256;
      s.minimized_at = claim.at;
    });
    const std::string& said = claim.refused;
    const auto exported = fleet.quarantine("forged", {"export", "0", "--minimized", "-o", "-"});
    INFO(said);
    INFO(exported.describe());
    CHECK(exported.exit_code == 3);
    CHECK(exported.out.empty());
    CHECK(exported.err.find("the minimized payload of record 0 cannot be had: ") != std::string::npos);
    CHECK(exported.err.find(said) != std::string::npos);
    // show says what the state claims, never a size it could not check.
    const auto shown = fleet.quarantine("forged", {"show", "0"});
    CHECK(shown.exit_code == 0);
    const std::string line = line_with(shown.out, "(export --minimized)");
    CHECK(line.find("sha256 " + claim.sha256) != std::string::npos);
    CHECK(line.find("bytes") == std::string::npos);
  }

  // A state for a record that does not exist is no record.
  forge("999", [&, o = at("999", evil)](FleetState& s) {
    s.minimized_sha256 = pillbox::sha256_hex(evil);
    s.minimized_at = o;
  });
  const auto listed = fleet.quarantine("forged", {"list", "--json"});
  CHECK(listed.records.size() == 2);
  const auto missing = fleet.quarantine("forged", {"export", "999", "--minimized", "-o", "-"});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("no record 999") != std::string::npos);

  // A forged progress, "finished", pointing at another record's payload:
  // not taken, the search starts over from the original and records its own.
  const std::string forged_best = "S forged best";
  forge("0", [&, o = at("1", forged_best)](FleetState& s) {
    s.minimize = pillbox::store::MinimizeState{pillbox::sha256_hex(forged_best), 3, 100, true};
    s.minimize_best_at = o;
  });
  const auto m = run_pillbox(fleet.minimize("forged", "0"));
  INFO(m.describe());
  REQUIRE(m.records.size() == 1);
  CHECK(m.records[0]["resumed"] == false);
  CHECK(m.records[0]["finished"] == true);
  CHECK(m.records[0]["minimized_size"] == 1);
  const auto honest = fleet.quarantine("forged", {"export", "0", "--minimized", "-o", "-"});
  CHECK(honest.exit_code == 0);
  CHECK(honest.out == "S");
  // Nor a best of the record's own with bytes its sha256 does not name.
  forge("0", [&, o = at("0", forged_best)](FleetState& s) {
    s.minimize = pillbox::store::MinimizeState{pillbox::sha256_hex("S"), 3, 100, true};
    s.minimize_best_at = o;
  });
  const auto again = run_pillbox(fleet.minimize("forged", "0"));
  REQUIRE_MESSAGE(again.records.size() == 1, again.describe());
  CHECK(again.records[0]["resumed"] == false);
  CHECK(again.records[0]["minimized_size"] == 1);
}

}  // namespace

TEST_CASE("minimize --amqp: shrinks to the trigger, resumes after SIGKILL, export and show have it; forged claims refused") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  e2e::TempDir keys(0700);
  const std::string key = e2e::fleet_key_file(keys);
  const Fleet fleet{server, key};
  killed_then_resumed(fleet);
  locked_and_discarded(fleet);
  forged_claims(fleet);
}
