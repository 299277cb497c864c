// Issue 14, points 8 and 10, below the CLI: who holds a claim
// (store/process_claim.h), the ledger's claims on tasks (a live process's
// claim is respected, a gone one's taken over, a verdict or the run's end
// releases it), and the view of every task (store/task_view.h).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/process_claim.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/statement.h"
#include "supervisor/store/store.h"
#include "supervisor/store/task_view.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

// A child that lives until the test ends it: another live process of this host.
struct LiveChild {
  LiveChild() {
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::pause();
      ::_exit(0);
    }
  }
  ~LiveChild() { end(); }
  void end() {
    if (pid <= 0) return;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    pid = -1;
  }
  pid_t pid = -1;
};

std::vector<std::string> fields(const std::string& token) {
  std::vector<std::string> out;
  std::size_t from = 0;
  for (std::size_t at; (at = token.find(':', from)) != std::string::npos; from = at + 1) out.push_back(token.substr(from, at - from));
  out.push_back(token.substr(from));
  return out;
}

std::string join(const std::vector<std::string>& f, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < n && i < f.size(); ++i) out += (i ? ":" : "") + f[i];
  return out;
}

struct Ledgered {
  explicit Ledgered(const std::string& dir, const std::string& job = "test-handler") {
    auto s = store::Store::open(dir);
    REQUIRE_MESSAGE(s.has_value(), (s ? "" : s.error()));
    store.emplace(std::move(*s));
    auto l = store::Ledger::open(store->db(), job, "test-policy");
    REQUIRE_MESSAGE(l.has_value(), (l ? "" : l.error()));
    ledger.emplace(std::move(*l));
  }
  store::StartedAttempt start(const std::string& key) {
    REQUIRE(ledger->begin().is_ok());
    const std::string payload = "payload of " + key;
    auto started = ledger->start_attempt(key, sha256_hex(payload), static_cast<std::int64_t>(payload.size()), store::now_ms());
    REQUIRE_MESSAGE(started.has_value(), (started ? "" : started.error()));
    REQUIRE(ledger->commit().is_ok());
    return *started;
  }
  void write(const std::function<Status(store::Ledger&)>& w) {
    REQUIRE(ledger->begin().is_ok());
    REQUIRE(w(*ledger).is_ok());
    REQUIRE(ledger->commit().is_ok());
  }
  std::string claim_of(const std::string& key) {
    auto st = store::Statement::prepare(store->db().handle(), "SELECT coalesce(claim, '') FROM tasks WHERE key = ?1");
    REQUIRE(st.has_value());
    st->bind(1, std::string_view(key));
    auto row = st->step();
    REQUIRE(row.has_value());
    REQUIRE(*row);
    return st->column_text(0);
  }
  void set_claim(const std::string& key, const std::string& claim) {
    REQUIRE(store->db().exec("UPDATE tasks SET claim = '" + claim + "' WHERE key = '" + key + "'").is_ok());
  }
  std::map<std::string, store::TaskRow> view(const store::TaskFilter& filter = {}) {
    std::map<std::string, store::TaskRow> rows;
    REQUIRE(store::each_task(store->db(), filter, [&](const store::TaskRow& r) {
              rows[r.key] = r;
              return true;
            }).is_ok());
    return rows;
  }
  std::optional<store::Store> store;
  std::optional<store::Ledger> ledger;
};

}  // namespace

TEST_CASE("claims: a live process of this host holds its claim; a gone one, another boot or garbage does not") {
  using store::ClaimHolder;
  const std::string& mine = store::process_claim_token();
  CHECK(store::claim_holder(mine) == ClaimHolder::kLive);
  const auto f = fields(mine);
  REQUIRE(f.size() == 4);
  CHECK(f[1] == std::to_string(::getpid()));
  CHECK(!f[2].empty());
  CHECK(!f[3].empty());
  // The three-field tokens replay wrote before the boot id was added.
  CHECK(store::claim_holder(join(f, 3)) == ClaimHolder::kLive);

  LiveChild child;
  const std::string theirs = store::claim_token_of(child.pid);
  CHECK(store::claim_holder(theirs) == ClaimHolder::kLive);
  // The same pid with another start time: a process that reused the pid.
  auto reused = fields(theirs);
  reused[2] = std::to_string(std::stoll(reused[2]) + 1);
  CHECK(store::claim_holder(join(reused, 4)) == ClaimHolder::kGone);
  // Made before a reboot: whatever runs under that pid now is not it.
  auto before_reboot = fields(theirs);
  before_reboot[3] = "00000000-0000-0000-0000-000000000000";
  CHECK(store::claim_holder(join(before_reboot, 4)) == ClaimHolder::kGone);
  child.end();
  CHECK(store::claim_holder(theirs) == ClaimHolder::kGone);

  auto elsewhere = fields(mine);
  elsewhere[0] = "another-host.example";
  CHECK(store::claim_holder(join(elsewhere, 4)) == ClaimHolder::kOtherHost);
  // Hostile or broken text in the column never reads as a live claim.
  for (const std::string& bad : std::vector<std::string>{"", ":::", f[0] + ":abc:1", f[0] + ":-1:1", f[0] + ":0:1", f[0] + "::", f[0] + ":1",
                                f[0] + ":1:2:3:4", f[0] + ":99999999999999999999:1"}) {
    CHECK_MESSAGE(store::claim_holder(bad) == ClaimHolder::kGone, bad);
  }
}

TEST_CASE("claims: a task claimed by a live process is not started; one whose process is gone is taken over") {
  test::ScratchDir dir("claims");
  Ledgered l(dir.path);
  const auto first = l.start("a");
  REQUIRE(first.n == 1);
  CHECK(l.claim_of("a") == store::process_claim_token());

  LiveChild other;
  const std::string theirs = store::claim_token_of(other.pid);
  l.set_claim("a", theirs);
  // Found as running elsewhere, its history not read (the other run writes it).
  auto found = l.ledger->find("a", sha256_hex("payload of a"));
  REQUIRE(found.has_value());
  REQUIRE(found->has_value());
  CHECK((*found)->claimed_elsewhere == theirs);
  CHECK((*found)->history.empty());
  // And not started, even when asked (a run that read it before the claim).
  const auto refused = l.start("a");
  CHECK(refused.n == 0);
  CHECK(refused.claimed_elsewhere == theirs);
  CHECK(l.claim_of("a") == theirs);

  other.end();  // SIGKILLed: its claim is left behind
  auto again = l.ledger->find("a", sha256_hex("payload of a"));
  REQUIRE(again.has_value());
  CHECK((*again)->claimed_elsewhere.empty());
  const auto taken = l.start("a");
  CHECK(taken.n == 2);
  CHECK(taken.claimed_elsewhere.empty());
  CHECK(l.claim_of("a") == store::process_claim_token());

  // A verdict releases the claim; so does the end of the run.
  l.write([&](store::Ledger& ledger) { return ledger.set_state(taken.task_id, store::TaskState::kOk, store::now_ms()); });
  CHECK(l.claim_of("a").empty());
  l.start("b");
  l.start("c");
  CHECK(l.claim_of("b") == store::process_claim_token());
  l.write([](store::Ledger& ledger) { return ledger.release_claims(); });
  CHECK(l.claim_of("b").empty());
  CHECK(l.claim_of("c").empty());
}

TEST_CASE("task view: pending, retrying, held, ok and gave-up told apart, filtered by state, key and handler") {
  test::ScratchDir dir("taskview");
  Ledgered l(dir.path, "regex pattern=x");
  const auto pending = l.start("pending");
  const auto retrying = l.start("retrying");
  const auto held = l.start("held");
  const auto ok = l.start("ok");
  const auto gave_up = l.start("gave-up");
  const std::int64_t due = store::now_ms() + 60'000;
  l.write([&](store::Ledger& ledger) {
    Status s = ledger.end_attempt(retrying.task_id, retrying.n, store::now_ms(), "crash", "fp-crash", "boom", true);
    if (s) s = ledger.set_wait(retrying.task_id, due, false);
    if (s) s = ledger.end_attempt(held.task_id, held.n, store::now_ms(), "sandbox-error", "fp-outage", "down", false);
    if (s) s = ledger.set_wait(held.task_id, 0, true);
    if (s) s = ledger.end_attempt(ok.task_id, ok.n, store::now_ms(), "ok", "", "", true);
    if (s) s = ledger.set_state(ok.task_id, store::TaskState::kOk, store::now_ms());
    if (s) s = ledger.end_attempt(gave_up.task_id, gave_up.n, store::now_ms(), "killed", "fp-killed", "", false);
    if (s) s = ledger.set_state(gave_up.task_id, store::TaskState::kGaveUp, store::now_ms());
    return s;
  });
  auto rows = l.view();
  REQUIRE(rows.size() == 5);
  CHECK(rows["pending"].view == store::TaskView::kPending);
  CHECK(rows["pending"].last_kind == "unfinished");  // its attempt runs (or was lost)
  CHECK(rows["pending"].claim == store::process_claim_token());
  CHECK(rows["retrying"].view == store::TaskView::kRetrying);
  CHECK(rows["retrying"].next_retry_at == due);
  CHECK(rows["retrying"].last_kind == "crash");
  CHECK(rows["retrying"].last_fingerprint == "fp-crash");
  CHECK(rows["held"].view == store::TaskView::kHeld);
  CHECK(rows["ok"].view == store::TaskView::kOk);
  CHECK(rows["ok"].claim.empty());
  CHECK(rows["gave-up"].view == store::TaskView::kGaveUp);
  CHECK(rows["gave-up"].attempts == 1);

  // The next attempt starts: no longer retrying.
  const auto retried = l.start("retrying");
  CHECK(retried.n == 2);
  CHECK(l.view()["retrying"].view == store::TaskView::kPending);
  CHECK(l.view()["retrying"].next_retry_at == 0);

  store::TaskFilter only_held;
  only_held.view = store::TaskView::kHeld;
  CHECK(l.view(only_held).size() == 1);
  store::TaskFilter by_key;
  by_key.key = "ok";
  CHECK(l.view(by_key).size() == 1);
  store::TaskFilter regex;
  regex.handler = "regex";
  CHECK(l.view(regex).size() == 5);
  // A name that only starts like the job's is another handler.
  for (const char* other : {"rege", "regex pattern", "echo", "%", "_"}) {
    store::TaskFilter f;
    f.handler = other;
    CHECK_MESSAGE(l.view(f).empty(), other);
  }
  store::TaskFilter two;
  two.limit = 2;
  CHECK(l.view(two).size() == 2);
}

}  // namespace pillbox
