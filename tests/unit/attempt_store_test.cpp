// The attempt engine's back ends (flow/attempt_store.h): what each promises
// the engine, checked on the real thing. SqliteAttemptStore over a real
// store, read through a connection of its own (what another process sees);
// MemoryAttemptStore (--no-store) numbering attempts as the engine counts
// them and keeping nothing.
#include <doctest/doctest.h>

#include <chrono>
#include <optional>
#include <string>

#include "shared/sha256.h"
#include "supervisor/flow/memory_attempt_store.h"
#include "supervisor/flow/sqlite_attempt_store.h"
#include "supervisor/store/result_store.h"
#include "tests/unit/ended_attempt.h"
#include "tests/unit/store_fixture.h"

namespace pillbox {
namespace {
using test::ended;

using namespace std::chrono_literals;
using Clock = AttemptStore::Clock;

StartAttempt start(std::uint64_t ref, const std::string& key, std::int64_t task_id = 0, std::uint32_t before = 0) {
  StartAttempt s;
  s.ref = ref;
  s.key = key;
  s.sha256 = sha256_hex(key);
  s.payload_size = 1;
  s.new_task = task_id == 0;
  s.task_id = task_id;
  s.attempts_before = before;
  return s;
}

struct Env : test::StoreFixture {
  std::optional<store::ResultStore> results;
  std::optional<SqliteAttemptStore> attempts;
  Clock::time_point now = Clock::time_point{} + 1h;

  explicit Env(std::uint64_t keep_results = 1 << 20) : StoreFixture("attempt-store") {
    auto r = store::ResultStore::open(db());
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error()));
    results.emplace(std::move(*r));
    attempts.emplace(*ledger, *qs, BatchContext{RunIdentity{}, "attempt_store_test", dir, &*results, keep_results});
  }
  // Whether another process sees `key` as ok.
  bool ok_seen(const std::string& key) {
    return seen("SELECT count(*) FROM tasks WHERE state = 'ok' AND key = '" + key + "'") == 1;
  }
  // `key` started and its start durable: its ledger id.
  std::int64_t started(const std::string& key) {
    auto r = attempts->apply({start(1, key)}, false, AttemptStore::Commit::kNow, now);
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error()));
    REQUIRE(r->started.size() == 1);
    CHECK(r->started[0].n == 1);
    return r->started[0].task_id;
  }
  // `key`'s attempt ended ok, its writes given as the engine gives them.
  void ended_ok(std::int64_t id, const std::string& output, bool may_hold) {
    attempts->add_ok(id, ended(id, 1, "ok"), may_hold, now);
    attempts->add_ok(id, SetTaskState{id, store::TaskState::kOk}, false, now);
    attempts->add_ok(id, KeepResult{id, output}, false, now);
  }
};

TEST_CASE("sqlite attempt store: an ok task's writes held back become durable together, by the release or the deadline") {
  Env env;
  const std::int64_t a = env.started("a");
  env.ended_ok(a, "result of a", /*may_hold=*/true);
  // Held: nothing of a's ok is written, not even its state and result,
  // which came without may_hold (they follow its attempt's end).
  REQUIRE(env.attempts->due_by().has_value());
  CHECK(*env.attempts->due_by() == env.now + 1s);
  CHECK_FALSE(env.attempts->idle());
  CHECK_FALSE(env.attempts->has_unapplied());
  auto r = env.attempts->apply({}, false, AttemptStore::Commit::kNow, env.now + 999ms);
  REQUIRE(r.has_value());
  CHECK_FALSE(env.ok_seen("a"));
  CHECK(env.seen("SELECT count(*) FROM results") == 0);
  // Due: the next apply writes them all, in one transaction.
  r = env.attempts->apply({}, false, AttemptStore::Commit::kNow, env.now + 1s);
  REQUIRE(r.has_value());
  CHECK(env.ok_seen("a"));
  CHECK(env.seen("SELECT count(*) FROM results WHERE status = 'kept'") == 1);
  CHECK(env.seen("SELECT count(*) FROM attempts WHERE ended_at IS NULL") == 0);
  CHECK(env.attempts->idle());
  CHECK_FALSE(env.attempts->due_by().has_value());

  const std::int64_t b = env.started("b");
  env.ended_ok(b, "result of b", /*may_hold=*/true);
  r = env.attempts->apply({}, /*release_held=*/true, AttemptStore::Commit::kNow, env.now);
  REQUIRE(r.has_value());
  CHECK(env.ok_seen("b"));
}

TEST_CASE("sqlite attempt store: the intake reading a task whose ok is held writes it first and reads it as ok") {
  Env env;
  const std::int64_t a = env.started("a");
  env.ended_ok(a, "result of a", /*may_hold=*/true);
  CHECK_FALSE(env.ok_seen("a"));
  auto found = env.attempts->find(Task{"a", "a"}, sha256_hex("a"));
  REQUIRE_MESSAGE(found.has_value(), (found ? "" : found.error()));
  REQUIRE(found->has_value());
  CHECK((*found)->state == store::TaskState::kOk);
  CHECK(env.ok_seen("a"));
  CHECK(env.attempts->idle());
  auto kept = env.attempts->kept_result(a);
  REQUIRE(kept.has_value());
  REQUIRE(kept->has_value());
  CHECK((*kept)->data == "result of a");
}

TEST_CASE("sqlite attempt store: an ok not to be held (the task ran alone) is written with the turn") {
  Env env;
  const std::int64_t a = env.started("a");
  env.ended_ok(a, "result of a", /*may_hold=*/false);
  CHECK(env.attempts->has_unapplied());
  CHECK_FALSE(env.attempts->due_by().has_value());
  auto r = env.attempts->apply({}, false, AttemptStore::Commit::kNow, env.now);
  REQUIRE(r.has_value());
  CHECK(env.ok_seen("a"));
}

TEST_CASE("sqlite attempt store: sixteen ok tasks held are written with the next turn, whatever the clock") {
  Env env;
  for (int i = 0; i < 16; ++i) {
    const std::string key = "t" + std::to_string(i);
    env.ended_ok(env.started(key), "result of " + key, /*may_hold=*/true);
  }
  CHECK(env.seen("SELECT count(*) FROM tasks WHERE state = 'ok'") == 0);
  auto r = env.attempts->apply({}, false, AttemptStore::Commit::kNow, env.now);
  REQUIRE(r.has_value());
  CHECK(env.seen("SELECT count(*) FROM tasks WHERE state = 'ok'") == 16);
}

TEST_CASE("sqlite attempt store: without results kept, an ok task's result is not written, its ok is") {
  Env env(/*keep_results=*/0);
  const std::int64_t a = env.started("a");
  env.ended_ok(a, "result of a", /*may_hold=*/false);
  auto r = env.attempts->apply({}, false, AttemptStore::Commit::kNow, env.now);
  REQUIRE(r.has_value());
  CHECK(env.ok_seen("a"));
  CHECK(env.seen("SELECT count(*) FROM results WHERE status = 'kept'") == 0);
}

TEST_CASE("sqlite attempt store: starts left open are durable only once the turn is committed") {
  Env env;
  auto r = env.attempts->apply({start(1, "a"), start(2, "b")}, false, AttemptStore::Commit::kLeaveOpen, env.now);
  REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error()));
  REQUIRE(r->started.size() == 2);
  CHECK(r->started[0].ref == 1);
  CHECK(r->started[1].ref == 2);
  CHECK(r->started[0].n == 1);
  CHECK(env.attempts->turn_open());
  CHECK(env.seen("SELECT count(*) FROM attempts") == 0);
  REQUIRE(env.attempts->commit_turn().is_ok());
  CHECK_FALSE(env.attempts->turn_open());
  CHECK(env.seen("SELECT count(*) FROM attempts") == 2);
  // A task's next start is numbered by the ledger, whatever the engine says.
  r = env.attempts->apply({start(3, "a", r->started[0].task_id, 7)}, false, AttemptStore::Commit::kNow, env.now);
  REQUIRE(r.has_value());
  REQUIRE(r->started.size() == 1);
  CHECK(r->started[0].n == 2);
}

TEST_CASE("memory attempt store: attempts numbered as the engine counts them, nothing else kept") {
  MemoryAttemptStore memory;
  const auto now = Clock::time_point{} + 1h;
  CHECK_FALSE(memory.capabilities().keeps_records);
  CHECK(memory.capabilities().can_stop);
  auto found = memory.find(Task{"a", "a"}, sha256_hex("a"));
  REQUIRE(found.has_value());
  CHECK_FALSE(found->has_value());
  memory.add(ended(0, 1, "crash", "f"));
  memory.add_ok(0, SetTaskState{0, store::TaskState::kOk}, true, now);
  CHECK(memory.idle());
  CHECK_FALSE(memory.has_unapplied());
  CHECK_FALSE(memory.due_by().has_value());
  auto r = memory.apply({start(1, "a", 0, 0), start(2, "b", 0, 2)}, true, AttemptStore::Commit::kLeaveOpen, now);
  REQUIRE(r.has_value());
  REQUIRE(r->started.size() == 2);
  CHECK(r->started[0].ref == 1);
  CHECK(r->started[0].n == 1);
  CHECK(r->started[1].ref == 2);
  CHECK(r->started[1].n == 3);
  CHECK(r->quarantined.empty());
  CHECK_FALSE(memory.turn_open());
  CHECK_FALSE(memory.record_payload(sha256_hex("a")).has_value());
}

}  // namespace
}  // namespace pillbox
