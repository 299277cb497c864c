// FindingRecorder (supervisor/ops/finding_recorder.h): how fuzz and import
// findings become records, on real SQLite stores, with several connections
// to one store as several pillbox processes would have.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/ops/finding_recorder.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/store.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox;

namespace {

struct ScratchStore {
  test::ScratchDir scratch{"finding-recorder-test"};
  std::string dir = scratch.path + "/store";
};

// One connection to the store with a recorder on it: one "process".
struct Session {
  std::optional<store::Store> store;
  std::optional<store::QuarantineStore> quarantine;
  std::optional<FindingRecorder> recorder;

  explicit Session(const std::string& dir, const std::string& source = "fuzz") {
    auto opened = store::Store::open(dir);
    REQUIRE_MESSAGE(opened.has_value(), opened.error());
    store.emplace(std::move(*opened));
    auto q = store::QuarantineStore::open(store->db(), store->dir(), store::kDefaultMaxRecords);
    REQUIRE_MESSAGE(q.has_value(), q.error());
    quarantine.emplace(std::move(*q));
    RunIdentity id{"echo", "handler-id", "{}", "[]", "policy-id", "limits {}"};
    auto r = FindingRecorder::open(store->db(), *quarantine, id, source, "test (" + source + ")");
    REQUIRE_MESSAGE(r.has_value(), r.error());
    recorder.emplace(std::move(*r));
  }

  std::int64_t count(const std::string& sql) {
    auto n = store->db().query_int(sql);
    REQUIRE_MESSAGE(n.has_value(), n.error());
    return *n;
  }
};

Finding crash(const std::string& key, const std::string& fingerprint, bool repeat_if_open) {
  Finding f;
  f.key = key;
  f.payload = "payload of " + key;
  f.outcome.kind = Kind::kCrash;
  f.outcome.signal = 11;
  f.outcome.fingerprint = fingerprint;
  f.outcome.message = "SIGSEGV";
  f.origin = "{}";
  f.started_ms = 1;
  f.ended_ms = 2;
  f.repeat_if_fingerprint_open = repeat_if_open;
  return f;
}

}  // namespace

TEST_CASE("finding recorder: a fingerprint with an open record is a repeat, not a second record") {
  ScratchStore scratch;
  Session a(scratch.dir);
  Session b(scratch.dir);

  auto first = a.recorder->record(crash("fuzz:aaaa/pb1-x", "pb1-x", true), "found");
  REQUIRE_MESSAGE(first.has_value(), first.error());
  CHECK(first->record_id != 0);
  CHECK(first->repeat_of == 0);

  // Other bytes, same fingerprint, from another connection.
  auto second = b.recorder->record(crash("fuzz:bbbb/pb1-x", "pb1-x", true), "found");
  REQUIRE_MESSAGE(second.has_value(), second.error());
  CHECK(second->record_id == 0);
  CHECK(second->repeat_of == first->record_id);
  CHECK(a.count("SELECT COUNT(*) FROM quarantine") == 1);
  CHECK(a.count("SELECT repeats FROM quarantine") == 1);
  // Counted, not recorded: no ledger task is left behind for the repeat.
  CHECK(a.count("SELECT COUNT(*) FROM tasks WHERE key = 'fuzz:bbbb/pb1-x'") == 0);

  // A discarded record is still on file (the operator decided); a resolved
  // one is not, and the next sighting is a record again.
  REQUIRE(a.store->db().exec("UPDATE quarantine SET status = 'discarded'").is_ok());
  auto third = b.recorder->record(crash("fuzz:cccc/pb1-x", "pb1-x", true), "found");
  REQUIRE(third.has_value());
  CHECK(third->repeat_of == first->record_id);
  REQUIRE(a.store->db().exec("UPDATE quarantine SET status = 'resolved'").is_ok());
  auto fourth = b.recorder->record(crash("fuzz:dddd/pb1-x", "pb1-x", true), "found");
  REQUIRE(fourth.has_value());
  CHECK(fourth->repeat_of == 0);
  CHECK(fourth->record_id != 0);
  CHECK(fourth->record_id != first->record_id);
  CHECK(a.count("SELECT COUNT(*) FROM quarantine") == 2);

  // Without the option (import: every artifact is its own record), the same
  // fingerprint is another record.
  auto imported = b.recorder->record(crash("import:eeee", "pb1-x", false), "imported");
  REQUIRE(imported.has_value());
  CHECK(imported->repeat_of == 0);
  CHECK(a.count("SELECT COUNT(*) FROM quarantine") == 3);
}

TEST_CASE("finding recorder: two sessions meeting a new fingerprint at once record it once") {
  ScratchStore scratch;
  { Session create(scratch.dir); }  // created and migrated before the race
  constexpr int kPerSession = 25;
  std::vector<std::string> errors(2);
  std::vector<int> records(2, 0);
  std::vector<int> repeats(2, 0);
  auto session = [&](int n) {
    // No REQUIRE off the main thread: doctest's assertions are not for
    // other threads. Collect and check afterwards.
    auto opened = store::Store::open(scratch.dir);
    if (!opened) return void(errors[n] = opened.error());
    auto q = store::QuarantineStore::open(opened->db(), opened->dir(), store::kDefaultMaxRecords);
    if (!q) return void(errors[n] = q.error());
    RunIdentity id{"echo", "handler-id", "{}", "[]", "policy-id", "limits {}"};
    auto r = FindingRecorder::open(opened->db(), *q, id, "fuzz", "session " + std::to_string(n));
    if (!r) return void(errors[n] = r.error());
    for (int i = 0; i < kPerSession; ++i) {
      auto got = r->record(crash("fuzz:" + std::to_string(n) + "-" + std::to_string(i) + "/pb1-y", "pb1-y", true),
                           "found");
      if (!got) return void(errors[n] = got.error());
      if (got->repeat_of != 0) {
        ++repeats[n];
      } else if (got->record_id != 0) {
        ++records[n];
      }
    }
  };
  std::thread t0(session, 0);
  std::thread t1(session, 1);
  t0.join();
  t1.join();
  CHECK_MESSAGE(errors[0].empty(), errors[0]);
  CHECK_MESSAGE(errors[1].empty(), errors[1]);
  CHECK(records[0] + records[1] == 1);
  CHECK(repeats[0] + repeats[1] == 2 * kPerSession - 1);
  Session check(scratch.dir);
  CHECK(check.count("SELECT COUNT(*) FROM quarantine") == 1);
  CHECK(check.count("SELECT repeats FROM quarantine") == 2 * kPerSession - 1);
}
