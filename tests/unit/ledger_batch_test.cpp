// LedgerBatch with Commit::kLeaveOpen (flow/ledger_batch.h): apply() writes
// the starts, and the earlier writes of the tasks they start, in order;
// commit_open() writes the rest and commits. What another connection sees,
// and what a failed commit leaves, are the same as for a batch applied at once.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "shared/sha256.h"
#include "supervisor/flow/ledger_batch.h"
#include "supervisor/store/statement.h"
#include "supervisor/store/store.h"
#include "tests/unit/ended_attempt.h"
#include "tests/unit/store_fixture.h"

namespace pillbox {
namespace {
using test::ended;

struct Env : test::StoreFixture {
  BatchContext context;
  Env() : StoreFixture("ledger-batch") { context.actor = "ledger_batch_test"; }
  StartAttempt start(std::uint64_t ref, const std::string& key, std::int64_t task_id = 0) const {
    StartAttempt s;
    s.ref = ref;
    s.key = key;
    s.sha256 = sha256_hex(key);
    s.payload_size = 1;
    s.new_task = task_id == 0;
    s.task_id = task_id;
    return s;
  }
  // A task started, and committed, in a batch of its own: its ledger id.
  std::int64_t started_task(const std::string& key) {
    LedgerBatch batch;
    batch.add(start(1, key));
    auto r = batch.apply(*ledger, *qs, context);
    REQUIRE_MESSAGE(r.has_value(), (r ? "" : r.error()));
    REQUIRE(r->started.size() == 1);
    return r->started[0].task_id;
  }
};

TEST_CASE("ledger batch: left open, the starts are written at once and the rest with the commit") {
  Env env;
  const std::int64_t a = env.started_task("a");
  const std::int64_t b = env.started_task("b");

  // a ended ok and b failed with a retry due at once: its wait, then its
  // next start, in one turn. c is new.
  LedgerBatch turn;
  turn.add(ended(a, 1, "ok"));
  turn.add(SetTaskState{a, store::TaskState::kOk});
  turn.add(ended(b, 1, "crash", "fp"));
  turn.add(SetTaskWait{b, 12345, false});
  turn.add(env.start(3, "c"));
  turn.add(env.start(4, "b", b));
  auto r2 = turn.apply(*env.ledger, *env.qs, env.context, LedgerBatch::Commit::kLeaveOpen);
  REQUIRE_MESSAGE(r2.has_value(), (r2 ? "" : r2.error()));
  REQUIRE(turn.open());
  REQUIRE(r2->started.size() == 2);
  CHECK(r2->started[1].n == 2);  // b's attempt number, known before the commit
  // Written in this connection: b's own writes and the starts; a's not yet.
  CHECK(env.store->db().query_int("SELECT count(*) FROM attempts WHERE task_id = " + std::to_string(b) +
                                  " AND n = 1 AND ended_at IS NOT NULL").value() == 1);
  CHECK(env.store->db().query_int("SELECT state = 'pending' FROM tasks WHERE id = " + std::to_string(a)).value() == 1);
  // Another connection sees nothing of the turn.
  CHECK(env.seen("SELECT count(*) FROM attempts") == 2);

  REQUIRE(turn.commit_open(*env.ledger, *env.qs, env.context).is_ok());
  CHECK_FALSE(turn.open());
  CHECK(env.seen("SELECT count(*) FROM attempts") == 4);
  CHECK(env.seen("SELECT state = 'ok' FROM tasks WHERE id = " + std::to_string(a)) == 1);
  // The wait went before b's start, which cleared it: b runs, it does not wait.
  CHECK(env.seen("SELECT next_retry_at IS NULL FROM tasks WHERE id = " + std::to_string(b)) == 1);
  CHECK(env.seen("SELECT attempts FROM tasks WHERE id = " + std::to_string(b)) == 2);
}

TEST_CASE("ledger batch: a commit left open that fails writes nothing, keeps all but the starts, and a later apply writes them") {
  Env env;
  const std::int64_t a = env.started_task("a");
  // Every statement succeeds; the COMMIT fails (a deferred foreign key).
  REQUIRE(env.store->db()
              .exec("CREATE TABLE trap (task_id INTEGER REFERENCES tasks(id) DEFERRABLE INITIALLY DEFERRED);"
                    "CREATE TRIGGER trap_attempts AFTER INSERT ON attempts BEGIN INSERT INTO trap VALUES (-1); END;")
              .is_ok());
  LedgerBatch turn;
  turn.add(ended(a, 1, "ok"));
  turn.add(SetTaskState{a, store::TaskState::kOk});
  turn.add(env.start(2, "b"));
  auto r2 = turn.apply(*env.ledger, *env.qs, env.context, LedgerBatch::Commit::kLeaveOpen);
  REQUIRE(r2.has_value());
  turn.add(ended(999, 1, "ok"));  // added after: stays after what comes back
  const Status s = turn.commit_open(*env.ledger, *env.qs, env.context);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.message().find("FOREIGN KEY") != std::string::npos);
  CHECK_FALSE(turn.open());
  CHECK(env.seen("SELECT count(*) FROM attempts") == 1);
  CHECK(env.seen("SELECT count(*) FROM tasks") == 1);
  REQUIRE(turn.size() == 3);  // a's end and state, then the one added after; not b's start
  CHECK(std::holds_alternative<EndAttempt>(turn.writes()[0]));
  CHECK(std::holds_alternative<SetTaskState>(turn.writes()[1]));
  CHECK(std::get<EndAttempt>(turn.writes()[2]).task_id == 999);
  REQUIRE(env.store->db().exec("DROP TRIGGER trap_attempts").is_ok());
  auto r3 = turn.apply(*env.ledger, *env.qs, env.context);
  REQUIRE_MESSAGE(r3.has_value(), (r3 ? "" : r3.error()));
  CHECK(env.seen("SELECT state = 'ok' FROM tasks WHERE id = " + std::to_string(a)) == 1);
}

TEST_CASE("ledger batch: a batch with a quarantine record commits at once even when asked to stay open") {
  Env env;
  const std::int64_t p = env.started_task("p");
  LedgerBatch turn;
  QuarantinePayload q;
  q.ref = 1;
  q.task_id = p;
  q.key = "p";
  q.sha256 = sha256_hex("p");
  q.payload = "p";
  q.attempts = 1;
  q.outcome.kind = Kind::kCrash;
  q.outcome.fingerprint = "fp";
  q.reason = "crashed";
  turn.add(ended(p, 1, "crash", "fp"));
  turn.add(q);
  turn.add(env.start(2, "next"));
  auto r2 = turn.apply(*env.ledger, *env.qs, env.context, LedgerBatch::Commit::kLeaveOpen);
  REQUIRE_MESSAGE(r2.has_value(), (r2 ? "" : r2.error()));
  CHECK_FALSE(turn.open());
  REQUIRE(r2->quarantined.size() == 1);  // told only once durable: it is
  CHECK(env.seen("SELECT count(*) FROM quarantine") == 1);
  CHECK(env.seen("SELECT count(*) FROM attempts") == 2);
}

}  // namespace
}  // namespace pillbox
