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
