// The attempt engine (supervisor/flow/task_flow.h) over its Redis Streams
// back end (supervisor/broker/stream_back_end.h), against a real
// redis-server the test starts: the engine's rules with made-up outcomes
// (no child runs), and what each leaves in Redis. The same rules over the
// store's back end are task_flow_test's.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/broker/stream_back_end.h"
#include "supervisor/flow/task_flow.h"
#include "tests/e2e/redis_server.h"

namespace {

using namespace std::chrono_literals;
using pillbox::Kind;
using pillbox::Outcome;
using pillbox::Task;
using pillbox::TaskSource;
using pillbox::Verdict;
using pillbox::broker::WorkerVerdict;
using nlohmann::json;

struct EngineVerdicts final : pillbox::VerdictSink {
  void on_verdict(const Task& task, const Outcome&, const Verdict& v) override { told[task.key].push_back(v); }
  void on_input_error(const std::string& message) override { notices.push_back(message); }
  void on_notice(const std::string& message) override { notices.push_back(message); }
  void on_lost(const Task& task, const pillbox::TaskLost& l) override { lost[task.key] = l; }
  std::map<std::string, std::vector<Verdict>> told;
  std::map<std::string, pillbox::TaskLost> lost;
  std::vector<std::string> notices;
};

struct IntakeVerdicts final : pillbox::broker::WorkerSink {
  void on_verdict(const Task& task, const Outcome& outcome, const WorkerVerdict& v) override {
    told[task.key].push_back(v);
    kinds[task.key] = outcome.kind;
  }
  void on_notice(const std::string& message) override { notices.push_back(message); }
  std::map<std::string, std::vector<WorkerVerdict>> told;
  std::map<std::string, Kind> kinds;
  std::vector<std::string> notices;
};

Outcome ok() { return Outcome{}; }

Outcome failure(Kind kind, const std::string& fingerprint) {
  Outcome o;
  o.kind = kind;
  o.fingerprint = fingerprint;
  o.message = std::string(pillbox::to_string(kind));
  o.exit_code = kind == Kind::kHandlerError ? 1 : -1;
  return o;
}

// One worker: the engine over a StreamBackEnd on stream "jobs", driven like
// the dispatcher (prepare, take tasks while slots are free, end the oldest
// running task with what the handler says, else wait on the flow's fds
// until its wake-up) until the intake ends (--exit-when-idle) and every
// answer is in.
struct Worker {
  // `claim_idle`: entries pending that long on another consumer are taken over.
  Worker(const e2e::RedisServer& server, pillbox::FlowSettings flow_settings = {},
         std::chrono::milliseconds claim_idle = 200ms) {
    auto address = pillbox::broker::parse_redis_url(server.url());
    REQUIRE(address.has_value());
    auto on_state = [](bool, const std::string&) {};
    auto r = pillbox::broker::BrokerLink::open(*address, "reads", on_state);
    REQUIRE(r.has_value());
    auto w = pillbox::broker::BrokerLink::open(*address, "settles", on_state);
    REQUIRE(w.has_value());
    reader = std::move(*r);
    writer = std::move(*w);
    pillbox::broker::WorkerSettings s;
    s.keys = pillbox::broker::stream_keys("jobs");
    s.consumer = {"pillbox", "w1"};
    s.identity.handler_identity = "test-handler";
    s.identity.handler = "test";
    s.identity.policy = "test-policy";
    s.claim_idle = claim_idle;
    s.exit_when_idle = 800ms;
    s.read_block = 50ms;
    s.jobs = 2;
    s.retry = flow_settings.retry;
    {
      auto redis = pillbox::broker::RedisConnection::open(*address);
      REQUIRE(redis.has_value());
      REQUIRE(pillbox::broker::create_group(*redis, s.keys, "pillbox").is_ok());
    }
    back_end.emplace(s, *reader, *writer, intake_sink);
    flow_settings.identity = s.identity;
    if (!flow_settings.seed) flow_settings.seed = 1;
    flow.emplace(flow_settings, back_end->intake(), sink, *back_end);
  }
  ~Worker() {
    reader->stop();
    writer->stop();
  }

  void drive(const std::function<Outcome(const Task&)>& handler, std::size_t slots = 2) {
    std::deque<Task> running;
    bool ended = false;
    int spins = 0;
    const auto give_up_at = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < give_up_at) {
      REQUIRE(flow->prepare(ended ? 0 : slots - running.size()).is_ok());
      std::optional<std::chrono::steady_clock::time_point> wake;
      while (!ended && running.size() < slots) {
        TaskSource::Item item = flow->next();
        if (item.type == TaskSource::Item::Type::kEnd) {
          ended = true;
        } else if (item.type == TaskSource::Item::Type::kWait) {
          wake = item.wake_at;
          break;
        } else if (item.type == TaskSource::Item::Type::kTask) {
          handed.push_back(item.task.key);
          alongside.push_back(running.size());
          running.push_back(item.task);
        }
      }
      REQUIRE(flow->commit_turn().is_ok());
      if (ended && running.empty()) {
        REQUIRE(flow->finish().is_ok());
        // The releases finish() wrote reach Redis before the links stop.
        while (!back_end->quiet()) wait_on({writer->wait_fd()}, 5s);
        back_end->drain();
        return;
      }
      if (!running.empty()) {
        const Task task = running.front();
        running.pop_front();
        flow->on_outcome(task, handler(task));
        continue;
      }
      auto timeout = 1000ms;
      if (wake) {
        timeout = std::chrono::ceil<std::chrono::milliseconds>(*wake - std::chrono::steady_clock::now());
        timeout = std::max(timeout, 0ms);
      }
      // A wake-up asked for at once, with nothing to read, turn after turn,
      // is a spin (the dispatcher would burn a core).
      const bool ready = wait_on(flow->wait_fds(), timeout);
      spins = timeout == 0ms && !ready ? spins + 1 : 0;
      REQUIRE_MESSAGE(spins < 100, "the flow asks to be woken at once, turn after turn, with nothing to do");
    }
    FAIL("the worker did not end in 30 s");
  }

  // Whether an fd became readable.
  static bool wait_on(const std::vector<int>& fds, std::chrono::milliseconds timeout) {
    std::vector<pollfd> polled;
    for (int fd : fds) polled.push_back({fd, POLLIN, 0});
    return ::poll(polled.data(), polled.size(), static_cast<int>(timeout.count())) > 0;
  }

  std::unique_ptr<pillbox::broker::BrokerLink> reader, writer;
  IntakeVerdicts intake_sink;
  EngineVerdicts sink;
  std::optional<pillbox::broker::StreamBackEnd> back_end;
  std::optional<pillbox::TaskFlow> flow;
  std::vector<std::string> handed;
  std::vector<std::size_t> alongside;  // how many others ran when each was handed out
};

pillbox::FlowSettings retries(std::uint32_t max_attempts) {
  pillbox::FlowSettings s;
  s.retry.max_attempts = max_attempts;
  s.retry.backoff_base = 10ms;
  s.retry.backoff_max = 20ms;
  return s;
}

// A breaker that opens once `window` payloads in a row failed alike, and
// probes every 100 ms; the first retry's backoff (full jitter) is 7.98 s
// with this seed, so that a failure's retry waits until the breaker holds it.
pillbox::FlowSettings outage_after(std::size_t window) {
  pillbox::FlowSettings s = retries(3);
  s.breaker.window = window;
  s.breaker.threshold = 1.0;
  s.breaker.probe_interval = 100ms;
  s.retry.backoff_base = 8s;
  s.retry.backoff_max = 8s;
  s.seed = 27;
  return s;
}

json record_of(const e2e::StreamEntry& dead_letter) {
  auto j = json::parse(dead_letter.fields.at("record"), nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

// The next entry of "jobs" delivered to `consumer` of group "pillbox" (made
// here), which never reports back: a worker that died.
void read_by(const e2e::RedisServer& server, const std::string& consumer) {
  auto redis = e2e::connect(server);
  REQUIRE(redis.command({"XGROUP", "CREATE", "jobs", "pillbox", "0", "MKSTREAM"}).has_value());
  REQUIRE(redis.command({"XREADGROUP", "GROUP", "pillbox", consumer, "COUNT", "1", "STREAMS", "jobs", ">"}).has_value());
}

// What delivery `n` of entry `id` recorded in its history (its JSON), ""
// when nothing.
std::string recorded_text(const e2e::RedisServer& server, const std::string& id, const std::string& n) {
  auto redis = e2e::connect(server);
  auto r = redis.command({"HGET", "jobs:attempts:" + id, n});
  REQUIRE(r.has_value());
  return pillbox::broker::reply_text(r->get());
}

// The same, parsed; fails the test when it is not JSON.
json recorded(const e2e::RedisServer& server, const std::string& id, const std::string& n) {
  const json d = json::parse(recorded_text(server, id, n), nullptr, false);
  REQUIRE_FALSE(d.is_discarded());
  return d;
}

std::size_t history_keys(const e2e::RedisServer& server) {
  auto redis = e2e::connect(server);
  auto r = redis.command({"KEYS", "jobs:attempts:*"});
  REQUIRE(r.has_value());
  return (*r)->elements;
}

TEST_CASE("engine over Redis: ok tasks settle to NAME:results once, named in their verdicts, nothing left pending") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"a", "payload a"}, {"b", "payload b"}, {"c", "payload c"}});
  Worker worker(server, retries(3));
  worker.drive([](const Task& t) {
    Outcome o = ok();
    o.output = "out of " + t.key;
    return o;
  });
  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 3);
  for (const auto& r : results) {
    const std::string key = r.fields.at("key");
    CHECK(r.fields.at("output") == "out of " + key);
    CHECK(r.fields.at("deliveries") == "1");
    CHECK(r.fields.at("worker") == "w1");
    REQUIRE(worker.sink.told[key].size() == 1);
    CHECK(worker.sink.told[key][0].type == Verdict::Type::kOk);
    CHECK(worker.sink.told[key][0].settled_as == r.id);  // told once Redis answered, with where
  }
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs"}) == 0);  // settled entries are deleted
  CHECK(history_keys(server) == 0);
}

TEST_CASE("engine over Redis: a retry is delivered again (the count rises), and the same crash twice is dead-lettered with its history") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  e2e::add_entries(server, "jobs", {{"bad", "crashes"}, {"flaky", "fails once"}});
  Worker worker(server, retries(3));
  int flaky_runs = 0;
  worker.drive([&](const Task& t) {
    if (t.key == "bad") return failure(Kind::kCrash, "crash-fp");
    return ++flaky_runs == 1 ? failure(Kind::kWallTimeout, "fp-timeout") : ok();
  });
  const auto dlq = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(dlq.size() == 1);
  CHECK(dlq[0].fields.at("key") == "bad");
  CHECK(dlq[0].fields.at("payload") == "crashes");
  CHECK(dlq[0].fields.at("deliveries") == "2");
  const json record = record_of(dlq[0]);
  CHECK(record["reason"].get<std::string>().find("crash crash-fp on two attempts in a row") != std::string::npos);
  REQUIRE(record["attempts_history"].size() == 2);
  CHECK(record["attempts_history"][0]["delivery"] == 1);
  CHECK(record["attempts_history"][0]["kind"] == "crash");
  CHECK(record["attempts_history"][0]["charged"] == true);
  CHECK(record["attempts_history"][1]["delivery"] == 2);
  REQUIRE(worker.sink.told["bad"].size() == 1);
  CHECK(worker.sink.told["bad"][0].type == Verdict::Type::kQuarantined);
  CHECK(worker.sink.told["bad"][0].settled_as == dlq[0].id);
  CHECK(worker.sink.told["bad"][0].attempts == 2);

  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 1);
  CHECK(results[0].fields.at("key") == "flaky");
  CHECK(results[0].fields.at("deliveries") == "2");  // delivered again for its retry
  CHECK(flaky_runs == 3);  // the second was ok; the third is the engine's known-good check (a copy) before
                           // it dead-letters "bad", whose failures came while nothing had worked yet
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
  CHECK(history_keys(server) == 0);
}

TEST_CASE("engine over Redis: an entry whose last delivery never reported back runs alone, its start recorded before it runs") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"suspect", "killed its worker"}});
  read_by(server, "dead");  // a worker that read it and died: delivery 1 never reported back
  e2e::add_entries(server, "jobs", {{"other1", "fine"}, {"other2", "fine"}});
  Worker worker(server, retries(3));
  std::string marker_when_run;
  worker.drive([&](const Task& t) {
    if (t.key == "suspect") marker_when_run = recorded_text(server, ids[0], "2");
    return ok();
  });
  CHECK(marker_when_run.find("\"started\":true") != std::string::npos);
  for (std::size_t i = 0; i < worker.handed.size(); ++i) {
    if (worker.handed[i] == "suspect") CHECK(worker.alongside[i] == 0);
  }
  REQUIRE(worker.sink.told["suspect"].size() == 1);
  CHECK(worker.sink.told["suspect"][0].type == Verdict::Type::kOk);
  CHECK(worker.sink.told["suspect"][0].attempts == 2);
  CHECK(e2e::stream_entries(server, "jobs:results").size() == 3);
}

TEST_CASE("engine over Redis: entries that are not tasks are dead-lettered unrun by the intake; the engine never sees them") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  {
    auto redis = e2e::connect(server);
    REQUIRE(redis.command({"XADD", "jobs", "*", "key", "no-payload"}).has_value());
  }
  e2e::add_entries(server, "jobs", {{"good", "fine"}});
  pillbox::FlowSettings settings = retries(3);
  Worker worker(server, settings);
  std::vector<std::string> ran;
  worker.drive([&](const Task& t) {
    ran.push_back(t.key);
    return ok();
  });
  CHECK(ran == std::vector<std::string>{"good"});
  REQUIRE(worker.intake_sink.told["no-payload"].size() == 1);
  const WorkerVerdict& v = worker.intake_sink.told["no-payload"][0];
  CHECK(v.type == WorkerVerdict::Type::kDeadLettered);
  CHECK(v.reason == "malformed entry: not run");
  CHECK(worker.intake_sink.kinds["no-payload"] == Kind::kProtocolError);
  CHECK(worker.sink.told.count("no-payload") == 0);
  const auto dlq = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(dlq.size() == 1);
  CHECK(dlq[0].id == v.added);
  CHECK(worker.back_end->report().protocol_errors == 1);
}

TEST_CASE("engine over Redis: an entry taken over while its retry waits is lost to the engine: no verdict, nothing settled here") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"stolen", "taken over"}});
  pillbox::FlowSettings settings = retries(3);
  settings.retry.backoff_base = 400ms;  // long enough for the theft below
  settings.retry.backoff_max = 400ms;
  Worker worker(server, settings, 30s);  // the thief is not taken over from in this test
  int runs = 0;
  worker.drive([&](const Task&) {
    if (++runs == 1) {
      // While its retry waits, another consumer claims it (XCLAIM by hand).
      auto redis = e2e::connect(server);
      REQUIRE(redis.command({"XCLAIM", "jobs", "pillbox", "thief", "0", ids[0]}).has_value());
    }
    return failure(Kind::kWallTimeout, "fp-timeout");
  });
  CHECK(runs == 1);
  CHECK(worker.sink.told.count("stolen") == 0);
  REQUIRE(worker.sink.lost.count("stolen") == 1);
  CHECK(e2e::pending_on(server, ids[0]).first == "thief");
  CHECK(e2e::stream_entries(server, "jobs:results").empty());
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
}

TEST_CASE("engine over Redis: SIGTERM lets what runs settle and gives back what waits, recorded, pending for the fleet") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"waits", "retried later"}, {"runs", "fine"}});
  pillbox::FlowSettings settings = retries(3);
  settings.retry.backoff_base = 5s;  // still waiting when SIGTERM comes
  settings.retry.backoff_max = 5s;
  Worker worker(server, settings, 30s);
  worker.drive([&](const Task& t) {
    if (t.key == "waits") return failure(Kind::kWallTimeout, "fp-timeout");
    ::raise(SIGTERM);  // while "runs" runs
    return ok();
  });
  REQUIRE(worker.sink.told["runs"].size() == 1);
  CHECK(worker.sink.told["runs"][0].type == Verdict::Type::kOk);
  REQUIRE(worker.sink.told["waits"].size() == 1);
  CHECK(worker.sink.told["waits"][0].type == Verdict::Type::kHeld);
  CHECK(worker.sink.told["waits"][0].reason == "the worker is stopping");
  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 1);
  CHECK(results[0].fields.at("key") == "runs");
  // Left pending at delivery 1, its failure recorded: the next worker goes
  // on from there and does not count a delivery that never reported back.
  CHECK(e2e::pending_on(server, ids[0]) == std::pair<std::string, long long>{"w1", 1});
  CHECK(recorded(server, ids[0], "1")["kind"] == "wall-timeout");
  CHECK(worker.back_end->report().stop_signal == SIGTERM);
  CHECK(std::any_of(worker.intake_sink.notices.begin(), worker.intake_sink.notices.end(),
                    [](const std::string& n) { return n.rfind("stopping (SIGTERM)", 0) == 0; }));
}

TEST_CASE("engine over Redis: an outage's failures are recorded uncharged, held, and run again (delivered again) once a probe works") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  std::vector<std::pair<std::string, std::string>> tasks;
  for (int i = 0; i < 6; ++i) tasks.emplace_back("t" + std::to_string(i), "payload " + std::to_string(i));
  const auto ids = e2e::add_entries(server, "jobs", tasks);
  // The first failure's retry waits (7.98 s) until the breaker holds it: had
  // it run before the next two were read, its second failure alike would
  // quarantine it (two in a row) before the breaker saw an outage.
  pillbox::FlowSettings settings = outage_after(4);
  settings.breaker.threshold = 0.75;
  // (Claim scans every 100 ms: the intake's wish to be asked again for one
  // goes stale while the breaker is open and nothing new is taken.)
  Worker worker(server, settings, 400ms);
  // The first one works; then the handler is down for the next 7 runs
  // (the probes among them fail too).
  int runs = 0;
  std::map<std::string, std::string> held_record;  // what Redis had for a task's delivery 1 when it ran again
  worker.drive([&](const Task& t) {
    ++runs;
    if (runs >= 2 && runs <= 8) return failure(Kind::kHandlerError, "fp-outage");
    if (runs > 8 && !t.probe_copy && held_record.count(t.key) == 0) {
      held_record[t.key] = recorded_text(server, ids[std::stoul(t.key.substr(1))], "1");
    }
    return ok();
  });
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());  // an outage is not poison
  CHECK(e2e::stream_entries(server, "jobs:results").size() == 6);
  bool some_held = false;
  for (const auto& [key, record] : held_record) {
    if (record.empty()) continue;
    const json d = json::parse(record, nullptr, false);
    REQUIRE_FALSE(d.is_discarded());
    // (A failure before the breaker opened, whose retry ran meanwhile,
    // stays charged: as for run, only those that wait are uncharged.)
    if (d.value("note", "") != "held: handler outage suspected") continue;
    CHECK(d["charged"] == false);
    some_held = true;
  }
  CHECK(some_held);
  for (const auto& [key, told] : worker.sink.told) {
    REQUIRE(told.size() == 1);
    CHECK(told[0].type == Verdict::Type::kOk);
  }
}

TEST_CASE("engine over Redis: an entry its own claim scan took back while its retry waited runs at that count, no delivery lost") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"x", "fails once"}, {"y", "fine"}});
  pillbox::FlowSettings settings = retries(3);
  // Its retry waits past the next claim scan (every 5 s with --claim-idle
  // 30s): with this seed the backoff's first draw (full jitter, up to 8 s)
  // is 7.98 s.
  settings.retry.backoff_base = 8s;
  settings.retry.backoff_max = 8s;
  settings.seed = 27;
  Worker worker(server, settings, 30s);
  std::map<std::string, int> runs;
  worker.drive(
      [&](const Task& t) {
        if (t.key == "x") return ++runs["x"] == 1 ? failure(Kind::kWallTimeout, "fp-timeout") : ok();
        // One slot: x failed before y runs, and its retry waits now. Made to
        // look idle on its own worker (as when a renewal came late), it is
        // taken back by the worker's next claim scan: the count rises.
        auto redis = e2e::connect(server);
        REQUIRE(redis.command({"XCLAIM", "jobs", "pillbox", "w1", "0", ids[0], "IDLE", "60000", "JUSTID"}).has_value());
        ++runs["y"];
        return ok();
      },
      1);
  CHECK(runs["x"] == 2);
  CHECK(worker.back_end->report().claimed_again == 1);
  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 2);
  for (const auto& r : results) {
    // The retry ran at the count the claim gave it (2), not delivered again
    // to 3 with 2 left unrecorded (a delivery that never reported back).
    if (r.fields.at("key") == "x") CHECK(r.fields.at("deliveries") == "2");
  }
}

TEST_CASE("engine over Redis: a failure recorded at the count a claim scan moved it to is the one an outage uncharges") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"w", "works"}, {"x", "fails in the outage"}});
  // x's retry waits until the breaker holds it.
  Worker worker(server, outage_after(3), 400ms);
  bool outage_over = false;
  std::string x_at_2;  // what Redis had for x's delivery 2 when x ran again
  std::map<std::string, int> runs;
  int copies = 0;
  worker.drive([&](const Task& t) {
    if (t.probe_copy) {
      // A copy of w, which worked: the first is the check the full window
      // asks for, and fails (the handler is down: the breaker opens); the
      // next is the breaker's probe, once the outage is over.
      if (++copies == 1) return failure(Kind::kHandlerError, "fp-outage");
      outage_over = true;
      return ok();
    }
    ++runs[t.key];
    if (t.key == "x" && runs["x"] == 1) {
      // While x runs (delivery 1), it is made to look idle on its own worker
      // (as when a renewal came late), and the worker's claim scan takes it
      // back: delivery 2, at which its end is recorded. The intake is
      // pumped here until it has (no other entry exists yet to be taken).
      auto redis = e2e::connect(server);
      REQUIRE(redis.command({"XCLAIM", "jobs", "pillbox", "w1", "0", ids[1], "IDLE", "60000", "JUSTID"}).has_value());
      const auto give_up_at = std::chrono::steady_clock::now() + 10s;
      while (worker.back_end->report().claimed_again == 0) {
        REQUIRE(std::chrono::steady_clock::now() < give_up_at);
        const TaskSource::Item item = worker.back_end->intake().next();
        REQUIRE(item.type == TaskSource::Item::Type::kWait);
        auto timeout = 100ms;
        if (item.wake_at) {
          timeout = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(*item.wake_at - std::chrono::steady_clock::now()),
                               0ms, 100ms);
        }
        Worker::wait_on(worker.back_end->intake().wait_fds(), timeout);
      }
      // Two more that fail the same way: the breaker (3 of 3) opens, and
      // x's failure, waiting for its retry, is the outage's.
      e2e::add_entries(server, "jobs", {{"y", "fails in the outage"}, {"z", "fails in the outage"}});
      return failure(Kind::kHandlerError, "fp-outage");
    }
    if (!outage_over && t.key != "w") return failure(Kind::kHandlerError, "fp-outage");
    if (t.key == "x") x_at_2 = recorded_text(server, ids[1], "2");
    return ok();
  });
  CHECK(copies == 2);
  CHECK(worker.back_end->report().claimed_again == 1);
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
  CHECK(e2e::stream_entries(server, "jobs:results").size() == 4);
  REQUIRE_FALSE(x_at_2.empty());
  const json d = json::parse(x_at_2, nullptr, false);
  REQUIRE_FALSE(d.is_discarded());
  CHECK(d["kind"] == "handler-error");
  CHECK(d["charged"] == false);
  CHECK(d.value("note", "") == "held: handler outage suspected");
}

TEST_CASE("engine over Redis: a worker whose handler is down takes back none of the entries it gave back to the fleet") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"a", "fails in the outage"}, {"b", "fails in the outage"}});
  // a's retry waits until the breaker holds it.
  pillbox::FlowSettings settings = outage_after(2);
  settings.breaker.max_wait = 300ms;
  // Claim scans every 100 ms; entries idle 400 ms are claimable.
  Worker worker(server, settings, 400ms);
  int runs = 0;
  // Both fail the same way: the breaker opens, nothing is known to work
  // here, and after --breaker-max-wait both are given back, probing going
  // on (on fresh entries: there are none). Nothing succeeds here, so the
  // worker claims nothing until it ends, idle.
  worker.drive([&](const Task&) {
    ++runs;
    return failure(Kind::kHandlerError, "fp-outage");
  });
  CHECK(runs == 2);
  CHECK(worker.back_end->report().claimed == 0);
  CHECK(std::any_of(worker.sink.notices.begin(), worker.sink.notices.end(),
                    [](const std::string& n) { return n.find("given back to the other workers") != std::string::npos; }));
  for (const std::string& id : ids) CHECK(e2e::pending_on(server, id) == std::pair<std::string, long long>{"w1", 1});
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
}

TEST_CASE("engine over Redis: a delivery recorded as released is no attempt: the next one does not run alone") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"released", "fine"}});
  {
    // A worker read it and released it as it stopped (recorded, not run).
    read_by(server, "gone");
    auto redis = e2e::connect(server);
    const std::string release = pillbox::broker::delivery_json(
        pillbox::broker::recorded_release(1, "gone", 1, "released: the worker is stopping"));
    REQUIRE(redis.command({"HSET", "jobs:attempts:" + ids[0], "1", release}).has_value());
  }
  Worker worker(server, retries(3));
  std::string marker_when_run = "not run";
  worker.drive([&](const Task&) {
    marker_when_run = recorded_text(server, ids[0], "2");
    return ok();
  });
  CHECK(marker_when_run.empty());  // no start marker: not a suspect's delivery
  REQUIRE(worker.sink.told["released"].size() == 1);
  CHECK(worker.sink.told["released"][0].type == Verdict::Type::kOk);
  CHECK(worker.sink.told["released"][0].attempts == 2);
}

TEST_CASE("engine over Redis: a settle that fails on a Redis error leaves the entry pending, its run recorded as released, and stops") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"fine", "runs fine"}});
  {
    // The results key is not a stream: the settle's XADD fails (WRONGTYPE),
    // an error Redis answers, not a lost connection.
    auto redis = e2e::connect(server);
    REQUIRE(redis.command({"SET", "jobs:results", "not a stream"}).has_value());
  }
  Worker worker(server, retries(3), 30s);
  worker.drive([](const Task&) { return ok(); });
  CHECK(worker.sink.told.count("fine") == 0);  // never told ok: nothing was settled
  REQUIRE(worker.sink.lost.count("fine") == 1);
  CHECK(worker.sink.lost["fine"].as == pillbox::LostAs::kLeftPending);
  CHECK(worker.back_end->report().error.find("holds a string, not a stream") != std::string::npos);
  CHECK(!worker.back_end->stopping().empty());
  // Still pending here at delivery 1, its run recorded (uncharged) as
  // released: the worker that takes it over counts no lost delivery.
  CHECK(e2e::pending_on(server, ids[0]) == std::pair<std::string, long long>{"w1", 1});
  const json d = recorded(server, ids[0], "1");
  CHECK(d["kind"] == "ok");
  CHECK(d["charged"] == false);
  CHECK(d["note"] == "released: left pending after a Redis error");
}

TEST_CASE("engine over Redis: failures that are not the payload's give up after max_attempts: released, pending, never dead-lettered") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"killed", "killed from outside every time"}});
  Worker worker(server, retries(3), 30s);
  int runs = 0;
  worker.drive([&](const Task&) {
    ++runs;
    return failure(Kind::kKilled, "");
  });
  CHECK(runs == 3);
  REQUIRE(worker.sink.told["killed"].size() == 1);
  CHECK(worker.sink.told["killed"][0].type == Verdict::Type::kGaveUp);
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
  CHECK(e2e::stream_entries(server, "jobs:results").empty());
  // Left for another worker at its third delivery, each failure recorded
  // uncharged (not the payload's fault).
  CHECK(e2e::pending_on(server, ids[0]).second == 3);
  for (const std::string n : {"1", "2", "3"}) {
    const json d = recorded(server, ids[0], n);
    CHECK(d["kind"] == "killed");
    CHECK(d["transient"] == true);
  }
}

TEST_CASE("engine over Redis: an entry whose deliveries never reported back max_attempts times is dead-lettered as supervisor-lost, unrun") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = e2e::add_entries(server, "jobs", {{"killer", "kills every worker"}});
  read_by(server, "dead");  // delivery 1: never reported back
  {
    // Deliveries 2 and 3 each began to run alone (their start markers) on
    // a worker that died.
    auto redis = e2e::connect(server);
    for (std::uint32_t n : {2u, 3u}) {
      REQUIRE(redis.command({"XCLAIM", "jobs", "pillbox", "dead", "0", ids[0]}).has_value());
      const std::string marker = pillbox::broker::delivery_json(pillbox::broker::recorded_start(n, "dead", 1));
      REQUIRE(redis.command({"HSET", "jobs:attempts:" + ids[0], std::to_string(n), marker}).has_value());
    }
  }
  Worker worker(server, retries(3));  // takes it over after 200 ms: delivery 4
  std::vector<std::string> ran;
  worker.drive([&](const Task& t) {
    ran.push_back(t.key);
    return ok();
  });
  CHECK(ran.empty());
  CHECK(worker.sink.told.count("killer") == 0);  // the engine never had it
  REQUIRE(worker.intake_sink.told["killer"].size() == 1);
  const WorkerVerdict& v = worker.intake_sink.told["killer"][0];
  CHECK(v.type == WorkerVerdict::Type::kDeadLettered);
  CHECK(v.deliveries == 4);
  CHECK(v.reason == "3 deliveries never reported back: it kills workers; not run again");
  CHECK(worker.intake_sink.kinds["killer"] == Kind::kSupervisorLost);
  const auto dlq = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(dlq.size() == 1);
  CHECK(dlq[0].fields.at("kind") == "supervisor-lost");
}

}  // namespace
