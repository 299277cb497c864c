// SIGINT in the middle of a minimization or a replay (issue 4: interruptible
// and resumable). The signal is raised from the progress callbacks of the
// library calls behind the CLI, so it arrives at a known point, in a real
// process, through the real handler: no timing involved.
#include <doctest/doctest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <random>

#include "shared/base64.h"
#include "supervisor/ops/minimize.h"
#include "supervisor/ops/store_quarantine_source.h"
#include "supervisor/ops/replay.h"
#include "supervisor/store/store.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::task_line;
using e2e::sql_int;

namespace {

pillbox::store::Store open_store(const std::string& dir) {
  auto s = pillbox::store::Store::open_existing(dir);
  REQUIRE(s.has_value());
  return std::move(*s);
}

struct OpenStore {
  explicit OpenStore(const std::string& dir) : store(open_store(dir)) {
    auto q = pillbox::store::QuarantineStore::open(store.db(), store.dir());
    REQUIRE(q.has_value());
    quarantine.emplace(std::move(*q));
  }
  pillbox::store::Store store;
  std::optional<pillbox::store::QuarantineStore> quarantine;
};

}  // namespace

TEST_CASE("minimize: SIGINT mid-way keeps the best payload so far, and the next session resumes from it") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  std::mt19937 rng(5);
  std::string payload(64 * 1024, '\0');
  for (char& c : payload) c = static_cast<char>('a' + rng() % 26);
  payload.replace(40'000, 8, "P0ISONED");
  REQUIRE(run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--max-attempts", "1", "-"},
                      task_line("big", payload))
              .exit_code == 1);
  {
    OpenStore s(store);
    pillbox::MinimizeSettings settings;
    settings.jobs = 2;
    settings.sandbox_binary = std::string(PILLBOX_BUILD_DIR) + "/pillbox-sandbox";
    settings.actor = "test";
    settings.allowed.handler = e2e::poison_plugin();  // the record's plugin, said again (issue 25)
    std::size_t smallest_seen = payload.size();
    settings.on_progress = [&](std::int64_t runs, std::size_t best) {
      smallest_seen = best;
      if (runs == 6) ::raise(SIGINT);
    };
    pillbox::StoreQuarantineSource source(*s.quarantine, s.store.db(), s.store.dir());
    auto record = source.get("1");
    REQUIRE(record.has_value());
    auto r = pillbox::minimize_record(source, *record, settings);
    REQUIRE(r.has_value());
    CHECK(r->stop_signal == SIGINT);
    CHECK(r->finished == false);
    CHECK(r->stopped_by == "SIGINT");
    CHECK(r->runs <= 8);  // the 6th ended; at most the ones in flight ended after it
    CHECK(r->minimized_size < payload.size());
    CHECK(r->minimized_size == smallest_seen);
  }
  const std::string db = store + "/pillbox.db";
  CHECK(sql_int(db, "SELECT finished FROM minimize_state") == 0);
  const auto resumed = run_pillbox({"minimize", "1", "--json", "--store", store, "--handler", e2e::poison_plugin()});
  INFO(resumed.describe());
  REQUIRE(resumed.records.size() == 1);
  CHECK(resumed.records[0]["resumed"] == true);
  CHECK(resumed.records[0]["finished"] == true);
  CHECK(resumed.records[0]["minimized_size"] == 8);
}

TEST_CASE("replay: SIGINT mid-way puts what was not replayed back as it was") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  std::string input;
  for (int i = 0; i < 12; ++i) input += task_line("k" + std::to_string(i), "S crash " + std::to_string(i));
  REQUIRE(run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--max-attempts", "1", "--no-breaker", "-"}, input)
              .exit_code == 1);
  const std::string db = store + "/pillbox.db";
  {
    OpenStore s(store);
    pillbox::store::ReplayStore replays(s.store.db(), *s.quarantine);
    pillbox::ReplaySettings settings;
    settings.selection.filter = {};
    settings.batch = 6;
    settings.jobs = 2;
    settings.handler = pillbox::HandlerChoice{e2e::poison_plugin(), {{"fixed", "yes"}}, {}};
    settings.sandbox_binary = std::string(PILLBOX_BUILD_DIR) + "/pillbox-sandbox";
    settings.actor = "test";
    settings.on_result = [](const pillbox::store::QuarantineRecord&, const pillbox::Outcome&,
                            pillbox::store::ReplayVerdict, std::int64_t /*revision*/) { ::raise(SIGINT); };
    auto r = pillbox::replay(*s.quarantine, replays, settings);
    REQUIRE(r.has_value());
    CHECK(r->stop_signal == SIGINT);
    CHECK(r->replayed >= 1);
    CHECK(r->replayed <= 2);  // the first, and at most the one running beside it
    CHECK(r->resolved == r->replayed);
    CHECK(r->replayed + r->not_replayed == 12);
  }
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'replaying'") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") +
            sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'resolved'") ==
        12);
  // The rest is replayed by the next run.
  const auto rest = run_pillbox({"quarantine", "replay", "--all", "--handler", e2e::poison_plugin(), "--arg", "fixed=yes", "--store", store});
  CHECK(rest.exit_code == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'resolved'") == 12);
}
