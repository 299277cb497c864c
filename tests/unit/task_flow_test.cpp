// The task flow driven through its TaskSource and OutcomeSink interfaces the
// way the dispatcher drives it, with made-up outcomes, a real ledger and
// quarantine (SQLite in a scratch directory) and a clock the test moves: every
// rule of supervisor/flow/task_flow.h without a process.
#include <doctest/doctest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/flow/task_flow.h"
#include "supervisor/store/store.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The input: tasks in order, then the end.
class ListSource final : public TaskSource {
 public:
  explicit ListSource(std::vector<std::string> keys) {
    for (auto& k : keys) tasks_.push_back(Task{k, "payload of " + k, 0});
  }
  Item next() override {
    Item item;
    if (tasks_.empty()) return item;  // kEnd
    item.type = Item::Type::kTask;
    item.task = tasks_.front();
    tasks_.pop_front();
    return item;
  }

 private:
  std::deque<Task> tasks_;
};

struct Told {
  std::string key;
  Verdict verdict;
  Kind kind = Kind::kOk;
};

class Recorder final : public VerdictSink {
 public:
  void on_verdict(const Task& task, const Outcome& outcome, const Verdict& verdict) override {
    told.push_back({task.key, verdict, outcome.kind});
  }
  void on_input_error(const std::string& message) override { input_errors.push_back(message); }
  void on_notice(const std::string& message) override { notices.push_back(message); }
  void on_skipped(const Task& task, const std::string& why, std::int64_t) override {
    skipped.push_back(task.key + ": " + why);
  }
  void on_taken_back(const Task& task, const Outcome&, const std::string&, std::int64_t) override {
    taken_back.push_back(task.key);
  }

  // The one verdict of `key`; fails the test when there is not exactly one.
  const Told& of(const std::string& key) const {
    const Told* found = nullptr;
    int n = 0;
    for (const auto& t : told) {
      if (t.key == key) {
        found = &t;
        ++n;
      }
    }
    REQUIRE_MESSAGE(n == 1, key << " has " << n << " verdicts");
    return *found;
  }
  std::size_t count(Verdict::Type type) const {
    std::size_t n = 0;
    for (const auto& t : told) n += t.verdict.type == type ? 1 : 0;
    return n;
  }

  std::vector<Told> told;
  std::vector<std::string> input_errors;
  std::vector<std::string> notices;
  std::vector<std::string> skipped;
  std::vector<std::string> taken_back;
};

Outcome ok() { return Outcome{}; }

Outcome failure(Kind kind, const std::string& fingerprint) {
  Outcome o;
  o.kind = kind;
  o.fingerprint = fingerprint;
  o.message = std::string(to_string(kind));
  return o;
}

// A run: one flow over `keys`, with its own store (or none), driven turn by
// turn like the dispatcher: prepare, take tasks while slots are free, then
// one running task ends (the oldest) with what `handler` says; with nothing
// running, the clock moves to the flow's wake-up.
struct Run {
  Run(const std::string& store_dir, std::vector<std::string> keys, FlowSettings settings = {})
      : source(std::move(keys)) {
    settings.clock = [this] { return now; };
    settings.actor = "task_flow_test";
    settings.identity.handler_identity = "test-handler";
    settings.identity.handler = "test";
    if (!store_dir.empty()) {
      auto s = store::Store::open(store_dir);
      REQUIRE_MESSAGE(s.has_value(), s.error());
      store.emplace(std::move(*s));
      auto l = store::Ledger::open(store->db(), "test-handler", "test-policy");
      REQUIRE_MESSAGE(l.has_value(), l.error());
      ledger.emplace(std::move(*l));
      auto q = store::QuarantineStore::open(store->db(), store->dir(), 1000);
      REQUIRE_MESSAGE(q.has_value(), q.error());
      quarantine.emplace(std::move(*q));
    }
    flow.emplace(settings, source, sink, ledger ? &*ledger : nullptr, quarantine ? &*quarantine : nullptr);
  }

  // Runs to the end; returns false (and fails the test) on a stall.
  void drive(const std::function<Outcome(const Task&)>& handler, std::size_t slots = 2) {
    std::deque<Task> running;
    bool ended = false;
    for (int turn = 0; turn < 100000; ++turn) {
      REQUIRE(flow->prepare(ended ? 0 : slots - running.size()).is_ok());
      std::optional<Clock::time_point> wake;
      bool waiting = false;
      while (!ended && running.size() < slots) {
        TaskSource::Item item = flow->next();
        if (item.type == TaskSource::Item::Type::kEnd) {
          ended = true;
        } else if (item.type == TaskSource::Item::Type::kWait) {
          waiting = true;
          wake = item.wake_at;
          break;
        } else if (item.type == TaskSource::Item::Type::kTask) {
          handed.push_back(item.task.key);
          alongside.push_back(running.size());
          running.push_back(item.task);
        }
      }
      if (ended && running.empty()) {
        REQUIRE(flow->finish().is_ok());
        return;
      }
      if (!running.empty()) {
        const Task task = running.front();
        running.pop_front();
        flow->on_outcome(task, handler(task));
        continue;
      }
      // Nothing runs: only the flow's wake-up can move the run on.
      REQUIRE_MESSAGE(waiting, "the flow neither ended nor waited");
      REQUIRE_MESSAGE(wake.has_value(), "the flow waits with nothing running and no wake-up: the run would hang");
      now = std::max(now, *wake);
    }
    FAIL("the run did not end in 100000 turns");
  }

  // The ledger's state of a task.
  std::string state(const std::string& key) {
    auto found = ledger->find(key, sha256_hex("payload of " + key));
    REQUIRE(found.has_value());
    REQUIRE(found->has_value());
    return std::string(store::to_string((*found)->state));
  }

  Clock::time_point now = Clock::time_point{} + 1h;
  ListSource source;
  Recorder sink;
  std::optional<store::Store> store;
  std::optional<store::Ledger> ledger;
  std::optional<store::QuarantineStore> quarantine;
  std::optional<TaskFlow> flow;
  std::vector<std::string> handed;       // keys in the order the flow handed them out
  std::vector<std::size_t> alongside;    // how many others ran when each was handed out
};

FlowSettings retries(std::uint32_t max_attempts) {
  FlowSettings s;
  s.retry.max_attempts = max_attempts;
  s.retry.backoff_base = 100ms;
  s.retry.backoff_max = 1s;
  return s;
}

// A breaker that opens when 3 of the last 4 distinct payloads fail alike,
// probes once a second, and stops the run after `max_wait` (0: never).
FlowSettings outage_settings(std::chrono::milliseconds max_wait) {
  FlowSettings s = retries(3);
  s.breaker.window = 4;
  s.breaker.threshold = 0.75;
  s.breaker.probe_interval = 1s;
  s.breaker.max_wait = max_wait;
  return s;
}

std::vector<std::string> numbered_keys(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("t" + std::to_string(i));
  return keys;
}

TEST_CASE("task flow: good payloads are ok once, and a second run over the same store skips them") {
  test::ScratchDir dir("flow");
  {
    Run run(dir.path, {"a", "b", "c"});
    run.drive([](const Task&) { return ok(); });
    CHECK(run.sink.count(Verdict::Type::kOk) == 3);
    CHECK(run.sink.of("b").verdict.attempts == 1);
    CHECK(run.state("a") == "ok");
    CHECK(run.flow->report().retried == 0);
  }
  Run again(dir.path, {"a", "b", "c", "d"});
  again.drive([](const Task&) { return ok(); });
  CHECK(again.handed == std::vector<std::string>{"d"});
  CHECK(again.flow->report().skipped_done == 3);
  CHECK(again.sink.skipped.size() == 3);
}

TEST_CASE("task flow: a failure that is not deterministic is retried after its backoff, on the flow's clock") {
  test::ScratchDir dir("flow");
  Run run(dir.path, {"flaky", "fine"}, retries(3));
  std::map<std::string, int> seen;
  const auto start = run.now;
  run.drive([&](const Task& t) {
    return t.key == "flaky" && seen[t.key]++ == 0 ? failure(Kind::kWallTimeout, "fp-timeout") : ok();
  });
  CHECK(run.sink.of("flaky").verdict.type == Verdict::Type::kOk);
  CHECK(run.sink.of("flaky").verdict.attempts == 2);
  CHECK(run.flow->report().retried == 1);
  CHECK(run.handed == std::vector<std::string>{"flaky", "fine", "flaky"});
  // The retry waited on the flow's clock, at most backoff_base (full jitter).
  CHECK(run.now - start <= 100ms);
  CHECK(run.state("flaky") == "ok");
}

TEST_CASE("task flow: the same deterministic failure twice is quarantined at once, with a record") {
  test::ScratchDir dir("flow");
  Run run(dir.path, {"poison", "good"}, retries(5));
  run.drive([](const Task& t) { return t.key == "poison" ? failure(Kind::kCrash, "fp-crash") : ok(); });
  const Told& p = run.sink.of("poison");
  CHECK(p.verdict.type == Verdict::Type::kQuarantined);
  CHECK(p.verdict.attempts == 2);  // not 5: the second identical crash settles it
  CHECK(p.verdict.record_id > 0);
  CHECK(p.verdict.new_fingerprint);
  CHECK(run.sink.of("good").verdict.type == Verdict::Type::kOk);
  CHECK(run.state("poison") == "quarantined");
  CHECK(run.flow->report().quarantined == 1);
  CHECK(run.flow->report().new_fingerprints == 1);
  auto record = run.quarantine->get(p.verdict.record_id);
  REQUIRE(record.has_value());
  REQUIRE(record->has_value());
  CHECK((*record)->entry.key == "poison");
  CHECK((*record)->entry.fingerprint == "fp-crash");
  // A second run skips it, without running it.
  Run again(dir.path, {"poison"}, retries(5));
  again.drive([](const Task&) { return ok(); });
  CHECK(again.handed.empty());
  CHECK(again.flow->report().skipped_quarantined == 1);
}

TEST_CASE("task flow: failures that are not the payload's give up after max_attempts, never quarantined") {
  test::ScratchDir dir("flow");
  Run run(dir.path, {"unlucky"}, retries(3));
  run.drive([](const Task&) { return failure(Kind::kSandboxError, "fp-setup"); });
  const Told& t = run.sink.of("unlucky");
  CHECK(t.verdict.type == Verdict::Type::kGaveUp);
  CHECK(t.verdict.attempts == 3);
  CHECK(run.state("unlucky") == "gave-up");
  CHECK(run.flow->report().quarantined == 0);
  CHECK(run.flow->report().gave_up == 1);
}

TEST_CASE("task flow: without a store a poison payload is reported as poison, not kept") {
  Run run("", {"poison"}, retries(3));
  run.drive([](const Task&) { return failure(Kind::kCrash, "fp-crash"); });
  const Told& t = run.sink.of("poison");
  CHECK(t.verdict.type == Verdict::Type::kPoison);
  CHECK(t.verdict.record_id == 0);
  CHECK(run.flow->report().quarantined == 1);
}

TEST_CASE("task flow: an outage holds the tasks, a working handler releases them, nothing is quarantined") {
  test::ScratchDir dir("flow");
  const std::vector<std::string> keys = numbered_keys(12);
  Run run(dir.path, keys, outage_settings(0ms));
  // The first two payloads work; then the handler is broken for every
  // payload (a bad deploy) until the clock passes 10 s into the run (fixed).
  const auto fixed_at = run.now + 10s;
  std::size_t calls = 0;
  run.drive([&](const Task&) {
    return ++calls <= 2 || run.now >= fixed_at ? ok() : failure(Kind::kCrash, "fp-outage");
  });
  const FlowReport& r = run.flow->report();
  CHECK(r.outages == 1);
  CHECK(r.quarantined == 0);
  CHECK(r.gave_up == 0);
  CHECK(r.held == 0);
  CHECK(r.taken_back == 0);
  CHECK(run.sink.count(Verdict::Type::kOk) == 12);
  CHECK(run.sink.told.size() == 12);
  for (const auto& key : keys) CHECK(run.state(key) == "ok");
  // The breaker paused intake and probed with a payload known to work, once
  // a second on the flow's clock, until the fix: 3 failures open it (of the
  // window of 4, with the 2 successes), each probe is one attempt more.
  CHECK(run.now >= fixed_at);
  CHECK(run.now < fixed_at + 2s);
  CHECK(run.sink.notices.size() >= 2);  // suspected, then over
  // Every payload ran to ok; the failed attempts during the outage were not
  // charged: none of them needed max_attempts.
  for (const auto& key : keys) CHECK(run.sink.of(key).verdict.type == Verdict::Type::kOk);
}

TEST_CASE("task flow: tasks still held when the outage outlasts the input are reported held, not judged") {
  test::ScratchDir dir("flow");
  const std::vector<std::string> keys = numbered_keys(8);
  Run run(dir.path, keys, outage_settings(30s));
  // Two good payloads, then broken for good.
  std::size_t calls = 0;
  const auto start = run.now;
  run.drive([&](const Task&) { return ++calls <= 2 ? ok() : failure(Kind::kCrash, "fp-outage"); });
  const FlowReport& r = run.flow->report();
  CHECK(r.outages == 1);
  CHECK(r.stopped_by_breaker);
  // It stopped at --breaker-max-wait on the flow's clock, not before.
  CHECK(run.now - start >= 30s);
  CHECK(run.now - start < 32s);
  CHECK(r.quarantined == 0);
  CHECK(run.sink.count(Verdict::Type::kQuarantined) == 0);
  CHECK(run.sink.count(Verdict::Type::kHeld) == r.held);
  CHECK(r.held >= 4);
  for (const auto& t : run.sink.told) {
    if (t.verdict.type == Verdict::Type::kHeld) CHECK(run.state(t.key) == "pending");
  }
}

TEST_CASE("task flow: a task whose last attempt never finished runs alone, and is not charged for it") {
  test::ScratchDir dir("flow");
  {
    // A run that died while "suspect" ran: its attempt was started and
    // never ended.
    auto s = store::Store::open(dir.path);
    REQUIRE(s.has_value());
    auto l = store::Ledger::open(s->db(), "test-handler", "test-policy");
    REQUIRE(l.has_value());
    REQUIRE(l->begin().is_ok());
    const std::string payload = "payload of suspect";
    auto started = l->start_attempt("suspect", sha256_hex(payload), static_cast<std::int64_t>(payload.size()),
                                    store::now_ms());
    REQUIRE(started.has_value());
    REQUIRE(l->commit().is_ok());
  }
  Run run(dir.path, {"a", "b", "suspect", "c", "d"}, retries(3));
  run.drive([](const Task&) { return ok(); }, 3);
  CHECK(run.sink.count(Verdict::Type::kOk) == 5);
  CHECK(run.sink.of("suspect").verdict.attempts == 2);
  for (std::size_t i = 0; i < run.handed.size(); ++i) {
    CAPTURE(run.handed[i]);
    if (run.handed[i] == "suspect") CHECK(run.alongside[i] == 0);
  }
  // And nothing started while it ran: the task after it was handed out with
  // nothing beside it either.
  const auto at = std::find(run.handed.begin(), run.handed.end(), "suspect") - run.handed.begin();
  REQUIRE(static_cast<std::size_t>(at + 1) < run.handed.size());
  CHECK(run.alongside[static_cast<std::size_t>(at) + 1] == 0);
}

TEST_CASE("task flow: a ledger that fails stops the run before anything runs uncounted") {
  test::ScratchDir dir("flow");
  Run run(dir.path, {"a", "b"}, retries(3));
  REQUIRE(run.store->db().exec("DROP TABLE attempts").is_ok());
  const Status s = run.flow->prepare(2);
  CHECK_FALSE(s.is_ok());
  TaskSource::Item item = run.flow->next();
  CHECK(item.type != TaskSource::Item::Type::kTask);
  CHECK_FALSE(run.flow->prepare(2).is_ok());
}

}  // namespace
}  // namespace pillbox
