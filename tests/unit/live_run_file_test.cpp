// The live file of a run with a store (supervisor/metrics/live_run_file.h):
// written with the run's counts, mode 0600, removed at the end; a file
// whose process is gone (a run killed with SIGKILL) is ignored and deleted.
#include "supervisor/metrics/live_run_file.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "supervisor/store/process_claim.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox;
using nlohmann::json;

TEST_CASE("live run file: written at once with the run's counts, 0600; read back as live; removed at the end") {
  test::ScratchDir dir("live-run");
  metrics::RunMetrics counts;
  counts.set_slots(4);
  counts.attempt_started();
  counts.attempt_ended(Kind::kOk, 3);
  counts.verdict(Kind::kOk, "ok", false);
  counts.attempt_started();
  counts.attempt_ended(Kind::kCrash, 3);
  counts.verdict(Kind::kCrash, "quarantined", true);
  std::string path;
  {
    metrics::LiveRunFile live(dir.path, 7, counts, std::chrono::seconds(60));
    path = live.path();
    CHECK(path == dir.path + "/live/7.json");
    // Written before the constructor returned.
    const json runs = metrics::read_live_runs(dir.path, false);
    REQUIRE(runs.size() == 1);
    const json& r = runs[0];
    CHECK(r["run_id"] == 7);
    CHECK(r["pid"] == ::getpid());
    CHECK(r["claim"] == store::process_claim_token());
    CHECK(r["holder"] == "live");
    CHECK(r["tasks_total"] == 2);
    CHECK(r["tasks"] == json::parse(R"([{"kind":"ok","verdict":"ok","count":1},
                                         {"kind":"crash","verdict":"quarantined","count":1}])"));
    CHECK(r["attempts"] == json::parse(R"({"ok":1,"crash":1})"));
    CHECK(r["slots"] == json::parse(R"({"busy":0,"total":4})"));
    CHECK(r["breaker"] == "closed");
    CHECK(r["tasks_per_second"].is_number());
    struct stat st{};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
  }
  CHECK(::access(path.c_str(), F_OK) != 0);
  CHECK(metrics::read_live_runs(dir.path, false).empty());
}

TEST_CASE("live run file: a file whose process is gone is ignored (and deleted when asked); junk is skipped") {
  test::ScratchDir dir("live-run");
  metrics::RunMetrics counts;
  // This process's claim with another start time: the pid's process is not the one that claimed.
  std::string token = store::process_claim_token();
  const auto first = token.find(':'), second = token.find(':', first + 1), third = token.find(':', second + 1);
  REQUIRE(third != std::string::npos);
  token = token.substr(0, second + 1) + "1" + token.substr(third);
  REQUIRE(store::claim_holder(token) == store::ClaimHolder::kGone);
  json gone = metrics::live_run_json(3, counts.snapshot(), "2026-01-01T00:00:00.000Z", 0);
  gone["claim"] = token;
  const std::string gone_path = dir.write("live/3.json", gone.dump());
  dir.write("live/4.json", "not json");
  dir.write("live/x.json", metrics::live_run_json(5, counts.snapshot(), "", 0).dump());  // not a run id
  json wrong_id = metrics::live_run_json(9, counts.snapshot(), "", 0);
  dir.write("live/6.json", wrong_id.dump());  // names another run than its file
  CHECK(metrics::read_live_runs(dir.path, false).empty());
  CHECK(::access(gone_path.c_str(), F_OK) == 0);
  CHECK(metrics::read_live_runs(dir.path, true).empty());
  CHECK(::access(gone_path.c_str(), F_OK) != 0);
  // No live directory: no runs.
  test::ScratchDir empty("live-run");
  CHECK(metrics::read_live_runs(empty.path, true).empty());
}

TEST_CASE("live run file: a live directory that is a symlink is not followed; past the limit, the newest runs are read") {
  metrics::RunMetrics counts;
  test::ScratchDir elsewhere("live-run");
  const std::string planted = elsewhere.write("7.json", metrics::live_run_json(7, counts.snapshot(), "", 0).dump());
  test::ScratchDir dir("live-run");
  REQUIRE(::symlink(elsewhere.path.c_str(), (dir.path + "/live").c_str()) == 0);
  CHECK(metrics::read_live_runs(dir.path, true).empty());
  CHECK(::access(planted.c_str(), F_OK) == 0);

  test::ScratchDir many("live-run");
  for (int id = 1; id <= 300; ++id) {
    many.write("live/" + std::to_string(id) + ".json", metrics::live_run_json(id, counts.snapshot(), "", 0).dump());
  }
  const json runs = metrics::read_live_runs(many.path, false);
  REQUIRE(runs.size() == 256);
  CHECK(runs.front()["run_id"] == 45);  // 300 - 256 + 1: the oldest were left out
  CHECK(runs.back()["run_id"] == 300);
}
