// The store's quarantine as a QuarantineSource (supervisor/ops/
// store_quarantine_source.h): what its adapter adds to the store's calls.
#include <doctest/doctest.h>

#include "supervisor/ops/store_quarantine_source.h"
#include "tests/unit/store_fixture.h"

using namespace pillbox;

TEST_CASE("store quarantine source: a replay's id that is not a record id is a usage error, never dropped") {
  // Dropped, no ids left would select by the filter: with none, every record.
  pillbox::test::StoreFixture env("store-source");
  StoreQuarantineSource source(*env.qs, env.db(), env.store->dir());
  ReplayRun run;
  run.ids = {"not-an-id"};
  std::vector<std::string> skipped;
  auto plan = source.replay_plan(run, skipped);
  REQUIRE_FALSE(plan.has_value());
  CHECK(plan.error_code() == ErrorCode::kUsage);
  CHECK(plan.error().find("not-an-id") != std::string::npos);
  auto replayed = source.replay(run);
  REQUIRE_FALSE(replayed.has_value());
  CHECK(replayed.error_code() == ErrorCode::kUsage);
}

namespace {

// A store with records in the statuses an operator's review meets.
struct ReviewEnv : pillbox::test::StoreFixture {
  StoreQuarantineSource source{*qs, db(), store->dir()};
  ReviewEnv() : StoreFixture("store-review") {}

  std::string add(const std::string& key, const std::string& status = "quarantined") {
    REQUIRE(ledger->begin().is_ok());
    auto r = qs->insert(entry(key, "payload of " + key, "fp-" + key, 1000), "payload of " + key, 1000, "test");
    REQUIRE_MESSAGE(r.has_value(), r.error());
    REQUIRE(ledger->commit().is_ok());
    REQUIRE(db().exec("UPDATE quarantine SET status = '" + status + "' WHERE id = " + std::to_string(r->id)).is_ok());
    return std::to_string(r->id);
  }
  std::string status_of(const std::string& id) {
    return *db().query_text("SELECT status FROM quarantine WHERE id = " + id);
  }
  std::string last_audit(const std::string& id) {
    return *db().query_text("SELECT actor || '|' || action || '|' || detail FROM audit WHERE record_id = " + id +
                            " ORDER BY id DESC LIMIT 1");
  }
  std::vector<std::string> planned(ReplayRun run, std::vector<std::string>& skipped) {
    auto plan = source.replay_plan(run, skipped);
    REQUIRE_MESSAGE(plan.has_value(), plan.error());
    std::vector<std::string> ids;
    for (const auto& p : *plan) ids.push_back(p.id.dump());
    return ids;
  }
};

}  // namespace

TEST_CASE("store quarantine source: allow moves records awaiting review to allowed, audited; revoke takes it back") {
  ReviewEnv env;
  const std::string q = env.add("q"), f = env.add("f", "failed-again");
  auto allowed = env.source.review(q, store::Review::kAllow, "alice", "read the trace");
  REQUIRE_MESSAGE(allowed.has_value(), allowed.error());
  CHECK_FALSE(allowed->already);
  CHECK(allowed->was == "quarantined");
  CHECK(env.status_of(q) == "allowed");
  CHECK(env.last_audit(q) == "alice|allowed|read the trace (was quarantined)");
  auto from_failed = env.source.review(f, store::Review::kAllow, "bob", "");
  REQUIRE(from_failed.has_value());
  CHECK(from_failed->was == "failed-again");
  CHECK(env.last_audit(f) == "bob|allowed|(was failed-again)");
  // Again: already allowed, nothing written.
  const std::int64_t trail = env.count("SELECT count(*) FROM audit");
  auto again = env.source.review(q, store::Review::kAllow, "alice", "");
  REQUIRE(again.has_value());
  CHECK(again->already);
  CHECK(env.count("SELECT count(*) FROM audit") == trail);
  // Revoked: awaiting review again.
  auto revoked = env.source.review(q, store::Review::kRevoke, "carol", "wrong one");
  REQUIRE(revoked.has_value());
  CHECK(revoked->was == "allowed");
  CHECK(env.status_of(q) == "quarantined");
  CHECK(env.last_audit(q) == "carol|allowance revoked|wrong one (was allowed)");
  auto not_allowed = env.source.review(q, store::Review::kRevoke, "carol", "");
  REQUIRE(not_allowed.has_value());
  CHECK(not_allowed->already);
}

TEST_CASE("store quarantine source: allow refuses resolved, discarded and replaying records with why, changing nothing") {
  ReviewEnv env;
  const std::string resolved = env.add("r", "resolved"), discarded = env.add("d", "discarded");
  const std::string claimed = env.add("c");
  REQUIRE(env.db().exec("UPDATE quarantine SET replay_claim = 'other-host:1:2' WHERE id = " + claimed).is_ok());
  const std::int64_t trail = env.count("SELECT count(*) FROM audit");
  const std::pair<std::string, std::string> cases[] = {
      {resolved, "record " + resolved + " is resolved: a replay ran it ok"},
      {discarded, "record " + discarded + " is discarded: an operator handled it without a fix"},
      {claimed, "record " + claimed + " is being replayed right now; allow it when the replay is over"},
  };
  for (const auto& refused : cases) {
    const std::string& id = refused.first;  // clang 14 cannot capture a structured binding
    const std::string& why = refused.second;
    CAPTURE(id);
    auto r = env.source.review(id, store::Review::kAllow, "alice", "");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error_code() == ErrorCode::kUsage);
    CHECK_MESSAGE(r.error().starts_with(why), r.error());
  }
  CHECK(env.status_of(resolved) == "resolved");
  CHECK(env.status_of(discarded) == "discarded");
  CHECK(env.status_of(claimed) == "quarantined");
  CHECK(env.count("SELECT count(*) FROM audit") == trail);
  // A claim taken between the check and the write: the compare-and-set refuses.
  store::Database& db = env.db();
  REQUIRE(db.exec("BEGIN IMMEDIATE").is_ok());
  auto raced = env.qs->change_status(std::stoll(claimed), store::RecordStatus::kQuarantined,
                                     store::RecordStatus::kAllowed, 5, "alice", "allowed", "");
  REQUIRE(db.exec("ROLLBACK").is_ok());
  REQUIRE(raced.has_value());
  CHECK_FALSE(*raced);
}

TEST_CASE("store quarantine source: replay --allowed plans only allowed records; a plain replay takes them too") {
  ReviewEnv env;
  const std::string q = env.add("q"), a = env.add("a", "allowed"), f = env.add("f", "failed-again");
  env.add("r", "resolved");
  std::vector<std::string> skipped;
  ReplayRun all;
  all.filter = {};
  CHECK(env.planned(all, skipped) == std::vector<std::string>{q, a, f});
  ReplayRun allowed;
  allowed.allowed_only = true;
  skipped.clear();
  CHECK(env.planned(allowed, skipped) == std::vector<std::string>{a});
  REQUIRE(skipped.size() == 1);
  CHECK(skipped[0] == "3 matching records are not allowed to replay (--allowed takes only those `pillbox quarantine "
                      "allow` allowed)");
  allowed.ids = {q, a};
  skipped.clear();
  CHECK(env.planned(allowed, skipped) == std::vector<std::string>{a});
  CHECK(skipped == std::vector<std::string>{"record " + q + " is quarantined, not allowed (pillbox quarantine allow " +
                                            q + " allows it)"});
}

TEST_CASE("store quarantine source: a patch of an allowed record sends it back to review") {
  ReviewEnv env;
  const std::string a = env.add("a", "allowed");
  PatchRequest request;
  request.payload = "a fixed payload";
  request.note = "fix the header";
  request.actor = "dave";
  auto revision = env.source.patch(a, request);
  REQUIRE_MESSAGE(revision.has_value(), revision.error());
  CHECK(env.status_of(a) == "quarantined");
  CHECK(env.last_audit(a).starts_with("dave|allowance revoked|patched: revision 1 awaits review"));
}
