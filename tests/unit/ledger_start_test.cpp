// Ledger::start_new_task (store/ledger.h): a task the ledger did not know is
// created with its first attempt counted and claimed in one statement; the
// rows are those start_attempt writes, and a task that exists after all is
// left to start_attempt, untouched.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "shared/sha256.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/process_claim.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/statement.h"
#include "supervisor/store/store.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

struct Env {
  test::ScratchDir scratch{"ledger-start"};
  std::optional<store::Store> store;
  std::optional<store::Ledger> ledger;
  Env() {
    auto s = store::Store::open(scratch.path + "/store");
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error()));
    store.emplace(std::move(*s));
    auto l = store::Ledger::open(store->db(), "job", "policy");
    REQUIRE_MESSAGE(l.has_value(), (l ? "" : l.error()));
    ledger.emplace(std::move(*l));
  }
  // The task's row and its attempts, as text: what a reader of the store sees.
  std::string row(const std::string& key) {
    auto st = store::Statement::prepare(
        store->db().handle(),
        "SELECT t.state || ' attempts=' || t.attempts || ' claim=' || coalesce(t.claim = ?2, 'none') || "
        "' retry=' || coalesce(t.next_retry_at, 'none') || ' held=' || t.held || ' size=' || t.payload_size || "
        "coalesce((SELECT group_concat(' #' || a.n || ' run=' || (a.run_id = ?3) || ' solo=' || a.solo || "
        "' ended=' || (a.ended_at IS NOT NULL), '') FROM attempts a WHERE a.task_id = t.id), '') "
        "FROM tasks t WHERE t.key = ?1");
    REQUIRE(st.has_value());
    st->bind(1, std::string_view(key)).bind(2, std::string_view(store::process_claim_token())).bind(3, ledger->run_id());
    auto r = st->step();
    REQUIRE(r.has_value());
    return *r ? st->column_text(0) : "";
  }
};

TEST_CASE("ledger: a new task starts in one statement with the rows start_attempt writes") {
  Env env;
  REQUIRE(env.ledger->begin().is_ok());
  auto made = env.ledger->start_new_task("new", sha256_hex("new"), 3, store::now_ms(), /*solo=*/true);
  auto usual = env.ledger->start_attempt("usual", sha256_hex("usual"), 3, store::now_ms(), /*solo=*/true);
  REQUIRE(env.ledger->commit().is_ok());
  REQUIRE_MESSAGE(made.has_value(), (made ? "" : made.error()));
  REQUIRE(made->has_value());
  REQUIRE(usual.has_value());
  CHECK((*made)->n == 1);
  CHECK((*made)->state == store::TaskState::kPending);
  CHECK((*made)->claimed_elsewhere.empty());
  CHECK((*made)->task_id != usual->task_id);
  CHECK(env.row("new") == "pending attempts=1 claim=1 retry=none held=0 size=3 #1 run=1 solo=1 ended=0");
  CHECK(env.row("new") == env.row("usual"));
  auto found = env.ledger->find("new", sha256_hex("new"));
  REQUIRE(found.has_value());
  REQUIRE(found->has_value());
  CHECK((*found)->id == (*made)->task_id);
  REQUIRE((*found)->history.size() == 1);
  CHECK_FALSE((*found)->history[0].finished);
}

TEST_CASE("ledger: a task that exists after all is not started by start_new_task, and start_attempt counts on") {
  Env env;
  REQUIRE(env.ledger->begin().is_ok());
  auto first = env.ledger->start_attempt("t", sha256_hex("t"), 1, store::now_ms());
  REQUIRE(first.has_value());
  REQUIRE(env.ledger->end_attempt(first->task_id, first->n, store::now_ms(), "crash", "fp", "m", true).is_ok());
  REQUIRE(env.ledger->set_wait(first->task_id, store::now_ms() + 1000, false).is_ok());
  REQUIRE(env.ledger->commit().is_ok());
  const std::string before = env.row("t");

  REQUIRE(env.ledger->begin().is_ok());
  auto made = env.ledger->start_new_task("t", sha256_hex("t"), 1, store::now_ms());
  REQUIRE(made.has_value());
  CHECK_FALSE(made->has_value());
  CHECK(env.row("t") == before);  // nothing written
  auto next = env.ledger->start_attempt("t", sha256_hex("t"), 1, store::now_ms());
  REQUIRE(env.ledger->commit().is_ok());
  REQUIRE(next.has_value());
  CHECK(next->task_id == first->task_id);
  CHECK(next->n == 2);
  CHECK(env.row("t") == "pending attempts=2 claim=1 retry=none held=0 size=1 #1 run=1 solo=0 ended=1 #2 run=1 solo=0 ended=0");
}

TEST_CASE("ledger: end_attempt ends an attempt of its own run only") {
  // After a failed commit a run may still hold the (task id, n) of a start
  // that was rolled back, and SQLite gives the rowid to the next insert: the
  // same pair may then be another run's live attempt.
  Env env;
  auto other = store::Ledger::open(env.store->db(), "job", "policy");  // another run on the same store
  REQUIRE(other.has_value());
  REQUIRE(other->begin().is_ok());
  auto theirs = other->start_attempt("t", sha256_hex("t"), 1, store::now_ms());
  REQUIRE(other->commit().is_ok());
  REQUIRE(theirs.has_value());
  REQUIRE(env.ledger->begin().is_ok());
  REQUIRE(env.ledger->end_attempt(theirs->task_id, theirs->n, store::now_ms(), "interrupted", "", "m", false).is_ok());
  REQUIRE(env.ledger->commit().is_ok());
  CHECK(env.row("t").ends_with("#1 run=0 solo=0 ended=0"));  // still running, in the other run
  REQUIRE(other->begin().is_ok());
  REQUIRE(other->end_attempt(theirs->task_id, theirs->n, store::now_ms(), "ok", "", "", true).is_ok());
  REQUIRE(other->commit().is_ok());
  CHECK(env.row("t").ends_with("#1 run=0 solo=0 ended=1"));
}

TEST_CASE("ledger: a batch left open is rolled back when the ledger goes, and the store stays writable") {
  test::ScratchDir scratch("ledger-start");
  auto s = store::Store::open(scratch.path + "/store");
  REQUIRE(s.has_value());
  {
    auto l = store::Ledger::open(s->db(), "job", "policy");
    REQUIRE(l.has_value());
    store::Ledger moved(std::move(*l));  // the open batch moves with it
    REQUIRE(moved.begin().is_ok());
    REQUIRE(moved.start_attempt("lost", sha256_hex("lost"), 1, store::now_ms()).has_value());
  }
  auto count = s->db().query_int("SELECT count(*) FROM tasks");
  REQUIRE(count.has_value());
  CHECK(*count == 0);
  auto l = store::Ledger::open(s->db(), "job", "policy");
  REQUIRE(l.has_value());
  REQUIRE(l->begin().is_ok());
  REQUIRE(l->start_attempt("kept", sha256_hex("kept"), 1, store::now_ms()).has_value());
  REQUIRE(l->commit().is_ok());
  CHECK(*s->db().query_int("SELECT count(*) FROM tasks") == 1);
}

}  // namespace
}  // namespace pillbox
