// pillbox minimize (issue 4): a 200 KB poison payload whose crash needs one
// 8-byte token shrinks to at most 64 bytes with the same fingerprint; the
// search keeps its progress, resumes after a budget runs out, and refuses a
// payload that no longer fails the same way.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "shared/base64.h"
#include "shared/sha256.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::task_line;
using e2e::sql_int;
using e2e::sql_rows;

namespace {

// 200 KiB of random bytes (never starting with a letter the fixture acts
// on) with "P0ISONED" somewhere in the middle.
std::string big_poison() {
  std::mt19937 rng(11);
  std::string bytes(200 * 1024, '\0');
  for (char& c : bytes) c = static_cast<char>(rng() & 0xff);
  bytes[0] = 'p';
  bytes.replace(123'457, 8, "P0ISONED");
  return bytes;
}

// Quarantines `payload` (one attempt) and returns the store path.
std::string quarantined(const e2e::TempDir& dir, const std::string& payload) {
  const std::string store = dir.path() + "/store";
  const auto run = run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--max-attempts", "1", "--json", "-"},
                               task_line("big", payload));
  INFO(run.describe());
  REQUIRE(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == 1);
  return store;
}

}  // namespace

TEST_CASE("minimize: 200 KB whose crash needs one 8-byte token ends at 64 bytes or fewer, same fingerprint") {
  e2e::TempDir dir;
  const std::string payload = big_poison();
  const std::string store = quarantined(dir, payload);
  const std::string db = store + "/pillbox.db";
  const std::string fingerprint = sql_rows(db, "SELECT fingerprint FROM quarantine")[0][0];

  const auto r = run_pillbox({"minimize", "1", "--jobs", "2", "--json", "--store", store, "--handler", e2e::poison_plugin()});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  REQUIRE(r.records.size() == 1);
  const auto& m = r.records[0];
  CHECK(m["original_size"] == payload.size());
  CHECK(m["minimized_size"].get<std::size_t>() <= 64);
  CHECK(m["finished"] == true);
  MESSAGE("minimize: " << m["original_size"] << " -> " << m["minimized_size"] << " bytes in " << m["runs"]
                       << " runs, " << m["elapsed_ms"] << " ms");

  // Kept beside the original, which is untouched.
  CHECK(sql_rows(db, "SELECT minimized_sha256, payload_sha256 FROM quarantine") ==
        std::vector<std::vector<std::string>>{{m["minimized_sha256"].get<std::string>(), pillbox::sha256_hex(payload)}});
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'minimized'") == 1);
  const std::string file = dir.path() + "/min.bin";
  REQUIRE(run_pillbox({"quarantine", "export", "1", "--minimized", "-o", file, "--store", store}).exit_code == 0);
  const std::string minimized = e2e::read_file(file);
  CHECK(minimized.size() == m["minimized_size"].get<std::size_t>());
  CHECK(minimized.find("P0ISONED") != std::string::npos);
  const auto original = run_pillbox({"quarantine", "export", "1", "-o", "-", "--store", store});
  CHECK(original.out == payload);

  // The minimized payload fails the same way when run on its own.
  const auto again = run_pillbox({"run", "--no-store", "--handler", e2e::poison_plugin(), "--json", file});
  INFO(again.describe());
  REQUIRE(again.records.size() == 1);
  CHECK(again.records[0]["fingerprint"] == fingerprint);

  // A finished minimization is not redone; --restart searches again.
  const auto done = run_pillbox({"minimize", "1", "--json", "--store", store, "--handler", e2e::poison_plugin()});
  REQUIRE(done.records.size() == 1);
  CHECK(done.records[0]["runs_this_session"] == 0);
  CHECK(done.records[0]["minimized_size"] == m["minimized_size"]);
}

TEST_CASE("minimize: a spent budget keeps the progress, and the next session resumes from it") {
  e2e::TempDir dir;
  const std::string payload = big_poison();
  const std::string store = quarantined(dir, payload);
  const std::string db = store + "/pillbox.db";

  const auto first = run_pillbox({"minimize", "1", "--jobs", "2", "--max-runs", "12", "--json", "--store", store, "--handler",
                                  e2e::poison_plugin()});
  INFO(first.describe());
  REQUIRE(first.exit_code == 0);
  REQUIRE(first.records.size() == 1);
  CHECK(first.records[0]["finished"] == false);
  CHECK(first.records[0]["stopped_by"] == "--max-runs");
  CHECK(first.records[0]["runs"].get<int>() <= 12);
  const auto part = first.records[0]["minimized_size"].get<std::size_t>();
  CHECK(part < payload.size());  // twelve runs take whole halves away
  CHECK(sql_int(db, "SELECT finished FROM minimize_state") == 0);

  const auto second = run_pillbox({"minimize", "1", "--jobs", "2", "--max-runs", "2000", "--json", "--store", store, "--handler",
                                   e2e::poison_plugin()});
  INFO(second.describe());
  REQUIRE(second.records.size() == 1);
  CHECK(second.records[0]["resumed"] == true);
  CHECK(second.records[0]["finished"] == true);
  CHECK(second.records[0]["minimized_size"].get<std::size_t>() <= 64);
  // Both sessions' runs count toward the budget.
  CHECK(second.records[0]["runs"].get<int>() ==
        first.records[0]["runs"].get<int>() + second.records[0]["runs_this_session"].get<int>());
  CHECK(sql_int(db, "SELECT finished FROM minimize_state") == 1);
}

TEST_CASE("minimize: a payload that does not fail the same way now is refused, nothing recorded") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  // Crashes on runs 1, 4, 7, ...: quarantined on run 1; run 2 (minimize's check) is ok.
  const auto run = run_pillbox({"run", "--store", store, "--max-attempts", "1", "--json", "-", "--writable", work.path(), "--",
                                e2e::fixture("poison_corpus"), work.path()},
                               task_line("sometimes", "P one in three"));
  REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine") == 1);
  const auto r = run_pillbox({"minimize", "1", "--store", store, "--writable", work.path()});
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("does not fail the same way now") != std::string::npos);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE minimized_sha256 IS NOT NULL") == 0);
  CHECK(run_pillbox({"minimize", "9", "--store", store}).exit_code == 2);
  CHECK(run_pillbox({"minimize", "1", "--max-time", "soon", "--store", store}).exit_code == 2);
}
