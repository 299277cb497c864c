// pillbox quarantine patch's library (supervisor/ops/patch_record.h) and the
// revisions it stores (supervisor/store/revision_store.h): real SQLite files
// in a fresh scratch directory.
#include <doctest/doctest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/ops/patch_record.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/replay_store.h"
#include "supervisor/store/revision_store.h"
#include "supervisor/store/schema.h"
#include "supervisor/store/store.h"
#include "tests/unit/scratch_dir.h"
#include "tests/unit/store_fixture.h"

using namespace pillbox;
using namespace pillbox::store;

namespace {

struct Env : pillbox::test::StoreFixture {
  Env() : StoreFixture("patch-test") {}

  // A quarantined record of `payload` (handler "echo" with `args`, or an exec command).
  std::int64_t add(const std::string& key, const std::string& payload, bool exec = false,
                   const std::string& args = R"({"mode":"strict"})") {
    REQUIRE(ledger->begin().is_ok());
    QuarantineEntry e = entry(key, payload, "fp-" + key, 100);
    e.handler = exec ? "exec" : "echo";
    e.handler_args = exec ? "{}" : args;
    e.exec_argv = exec ? R"(["/bin/cat"])" : "[]";
    e.message.clear();  // this test's records have none
    auto r = qs->insert(e, payload, 100, "test");
    REQUIRE_MESSAGE(r.has_value(), r.error());
    const Status committed = ledger->commit();
    REQUIRE_MESSAGE(committed.is_ok(), committed.message());
    return r->id;
  }

  void sql(const std::string& statement) {
    const Status s = db().exec(statement);
    REQUIRE_MESSAGE(s.is_ok(), s.message());
  }

  // Every row of the tables a patch may write, as text: equal dumps, an unchanged store.
  std::string dump() {
    std::string out;
    for (const char* table : {"quarantine", "revisions", "payloads", "audit", "tasks", "attempts"}) {
      sqlite3_stmt* stmt = nullptr;
      REQUIRE(sqlite3_prepare_v2(db().handle(), (std::string("SELECT * FROM ") + table + " ORDER BY 1, 2").c_str(), -1,
                                 &stmt, nullptr) == SQLITE_OK);
      out += std::string(table) + ":\n";
      while (sqlite3_step(stmt) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
          const auto* text = reinterpret_cast<const char*>(sqlite3_column_blob(stmt, c));
          out += text == nullptr ? std::string("NULL") : std::string(text, static_cast<std::size_t>(sqlite3_column_bytes(stmt, c)));
          out += "|";
        }
        out += "\n";
      }
      sqlite3_finalize(stmt);
    }
    return out;
  }

  Expected<Revision> patch(PatchRequest request, std::int64_t now = 1000) {
    if (request.actor.empty()) request.actor = "alice via pillbox quarantine patch (pid 1)";
    return patch_record(db(), *qs, request, now);
  }
};

PatchRequest payload_patch(std::int64_t id, std::string payload, std::string note = "fix the header") {
  PatchRequest r;
  r.record_id = id;
  r.payload = std::move(payload);
  r.note = std::move(note);
  return r;
}

PatchRequest args_patch(std::int64_t id, std::vector<std::pair<std::string, std::string>> args,
                        std::string note = "lenient mode copes") {
  PatchRequest r;
  r.record_id = id;
  r.set_args = std::move(args);
  r.note = std::move(note);
  return r;
}

}  // namespace

TEST_CASE("patch: a new payload is revision 1 beside the original, with who, when, the note and a diff summary") {
  Env env;
  const std::string original = "S broken header";
  const std::int64_t id = env.add("k1", original);
  const std::string before_row = env.dump().substr(0, env.dump().find("revisions:"));

  auto revision = env.patch(payload_patch(id, "X broken header"), 1234);
  REQUIRE_MESSAGE(revision.has_value(), revision.error());
  CHECK(revision->n == 1);
  CHECK(revision->record_id == id);
  CHECK(revision->payload_sha256 == sha256_hex("X broken header"));
  CHECK(revision->payload_size == 15);
  CHECK(revision->handler_args == R"({"mode":"strict"})");  // arguments carried over
  CHECK(revision->summary == "payload 15 -> 15 bytes, 1 byte range changed (offsets 0-1)");

  // The original is untouched: the quarantine row is byte for byte what it was.
  CHECK(env.dump().substr(0, env.dump().find("revisions:")) == before_row);
  auto record = env.qs->get(id);
  REQUIRE(record.has_value());
  CHECK((*record)->entry.payload_sha256 == sha256_hex(original));
  CHECK(*env.qs->payloads().get(sha256_hex(original)) == original);
  CHECK(*env.qs->payloads().get(sha256_hex("X broken header")) == "X broken header");

  auto listed = RevisionStore(env.db()).list(id);
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].created_at == 1234);
  CHECK((*listed)[0].actor == "alice via pillbox quarantine patch (pid 1)");
  CHECK((*listed)[0].note == "fix the header");

  auto trail = env.qs->audit_trail(id);
  REQUIRE(trail.has_value());
  REQUIRE(trail->size() == 1);
  CHECK(trail->back().action == "patched");
  CHECK(trail->back().at == 1234);
  CHECK(trail->back().actor == "alice via pillbox quarantine patch (pid 1)");
  CHECK(trail->back().detail ==
        "revision 1 (from the original): payload 15 -> 15 bytes, 1 byte range changed (offsets 0-1); note: fix the header");
}

TEST_CASE("patch: revisions build on the newest one; arguments are merged and summarised") {
  Env env;
  const std::int64_t id = env.add("k1", "S payload");
  auto first = env.patch(args_patch(id, {{"mode", "lenient"}}));
  REQUIRE_MESSAGE(first.has_value(), first.error());
  CHECK(first->n == 1);
  CHECK(first->summary == "arg mode: strict -> lenient");
  CHECK(first->payload_sha256 == sha256_hex("S payload"));  // the original payload carried over

  auto second = env.patch(payload_patch(id, "ok payload!"));
  REQUIRE_MESSAGE(second.has_value(), second.error());
  CHECK(second->n == 2);
  CHECK(second->handler_args == R"({"mode":"lenient"})");  // revision 1's arguments, not the original's
  CHECK(second->summary == "payload 9 -> 11 bytes, bytes 0-9 replaced by 11 bytes");

  auto third = env.patch(args_patch(id, {{"depth", "3"}, {"mode", "strict"}}));
  REQUIRE_MESSAGE(third.has_value(), third.error());
  CHECK(third->n == 3);
  CHECK(third->summary == "arg depth: (unset) -> 3; arg mode: lenient -> strict");
  CHECK(third->payload_sha256 == sha256_hex("ok payload!"));

  auto latest = RevisionStore(env.db()).latest(id);
  REQUIRE(latest.has_value());
  REQUIRE(latest->has_value());
  CHECK((*latest)->n == 3);
  CHECK(env.count("SELECT count(*) FROM audit WHERE action = 'patched'") == 3);
}

TEST_CASE("patch: what is refused says so and changes nothing in the store") {
  Env env;
  const std::int64_t open = env.add("open", "S open");
  const std::int64_t exec = env.add("exec", "S exec", true);
  const std::int64_t resolved = env.add("resolved", "S resolved");
  const std::int64_t discarded = env.add("discarded", "S discarded");
  const std::int64_t replaying = env.add("replaying", "S replaying");
  const std::int64_t claimed = env.add("claimed", "S claimed");
  env.sql("UPDATE quarantine SET status = 'resolved' WHERE id = " + std::to_string(resolved));
  env.sql("UPDATE quarantine SET status = 'discarded' WHERE id = " + std::to_string(discarded));
  env.sql("UPDATE quarantine SET status = 'replaying', status_before_replay = 'quarantined', replay_claim = "
          "'host:1:2' WHERE id = " + std::to_string(replaying));
  // A claim on a record whose status says otherwise is still a replay's.
  env.sql("UPDATE quarantine SET replay_claim = 'host:3:4' WHERE id = " + std::to_string(claimed));
  REQUIRE(env.patch(payload_patch(open, "fixed once")).has_value());
  const std::string before = env.dump();

  struct Case {
    const char* what;
    PatchRequest request;
    const char* says;
  };
  PatchRequest both = payload_patch(open, "both");
  both.set_args = {{"mode", "lenient"}};
  PatchRequest neither;
  neither.record_id = open;
  neither.note = "nothing";
  PatchRequest long_note = payload_patch(open, "long note", std::string(kMaxPatchNoteBytes + 1, 'n'));
  const std::vector<Case> cases = {
      {"unknown id", payload_patch(999, "x"), "no quarantine record 999 in this store"},
      {"resolved", payload_patch(resolved, "x"), "is resolved: only an open record"},
      {"discarded", payload_patch(discarded, "x"), "is discarded: only an open record"},
      {"replaying", payload_patch(replaying, "x"), "is being replayed right now (by host:1:2)"},
      {"claimed", payload_patch(claimed, "x"), "is being replayed right now (by host:3:4)"},
      {"exec --set-arg", args_patch(exec, {{"mode", "lenient"}}), "has a command line, not handler arguments"},
      {"same payload", payload_patch(open, "fixed once"), "is the same as revision 1"},
      {"same arguments", args_patch(open, {{"mode", "strict"}}), "already has: nothing to patch"},
      {"no note", payload_patch(open, "y", " \n"), "needs a note"},
      {"long note", long_note, "more than the 4096"},
      {"both", both, "one of the two"},
      {"neither", neither, "one of the two"},
      {"empty key", args_patch(open, {{"", "v"}}), "a name of 1 to 128 bytes"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    auto r = env.patch(c.request);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error_code() == ErrorCode::kUsage);
    CHECK_MESSAGE(r.error().find(c.says) != std::string::npos, r.error());
    CHECK(env.dump() == before);
  }
  // An exec record's payload may be patched.
  auto exec_payload = env.patch(payload_patch(exec, "fixed exec"));
  REQUIRE_MESSAGE(exec_payload.has_value(), exec_payload.error());
  CHECK(exec_payload->n == 1);
  // failed-again is open: patched too.
  env.sql("UPDATE quarantine SET status = 'failed-again' WHERE id = " + std::to_string(resolved));
  CHECK(env.patch(payload_patch(resolved, "x")).has_value());
}

TEST_CASE("patch: purging the record takes its revisions and their payloads, files included") {
  Env env;
  const std::int64_t id = env.add("k1", "S payload");
  const std::int64_t other = env.add("k2", "S other");
  std::string big(kInlinePayloadBytes + 10, 'b');
  REQUIRE(env.patch(payload_patch(id, big)).has_value());
  REQUIRE(env.patch(args_patch(id, {{"mode", "lenient"}})).has_value());
  REQUIRE(env.patch(payload_patch(other, "shared fix")).has_value());
  const std::string file = env.qs->payloads().file_path(sha256_hex(big));
  REQUIRE(std::filesystem::exists(file));
  REQUIRE(env.count("SELECT count(*) FROM revisions") == 3);

  // Another record's payloads are still in use by its revision: a purge of
  // what nothing refers to keeps them.
  env.sql("UPDATE quarantine SET status = 'resolved' WHERE id = " + std::to_string(id));
  auto purged = env.qs->purge(1'000'000, {RecordStatus::kResolved});
  REQUIRE_MESSAGE(purged.has_value(), purged.error());
  CHECK(purged->records == 1);
  CHECK(purged->payloads == 2);  // the original and the big revision
  CHECK(env.count("SELECT count(*) FROM revisions WHERE record_id = " + std::to_string(id)) == 0);
  CHECK(env.count("SELECT count(*) FROM revisions") == 1);
  CHECK_FALSE(std::filesystem::exists(file));
  CHECK(*env.qs->payloads().get(sha256_hex("shared fix")) == "shared fix");
  CHECK(env.count("SELECT count(*) FROM pragma_foreign_key_check") == 0);
}

TEST_CASE("replay: a resolved record's task is ok with the replay's output, from a revision or the original") {
  Env env;
  const std::int64_t patched = env.add("patched", "S one");
  const std::int64_t plain = env.add("plain", "S two");
  const std::int64_t big = env.add("big", "S three");
  env.sql("UPDATE tasks SET state = 'quarantined'");
  ReplayStore replays(env.db(), *env.qs);
  auto claimed = replays.claim({patched, plain, big}, ReplayScope::kOpen, 2000);
  REQUIRE(claimed.has_value());
  // Claimed: a patch now is refused.
  CHECK_FALSE(env.patch(payload_patch(patched, "fixed")).has_value());
  auto run = replays.start_run("handler-id", "policy-id", 2000);
  REQUIRE(run.has_value());
  const ReplayAttempt attempt{2000, 2001, "ok", "", ""};
  for (const std::int64_t id : {patched, plain, big}) {
    auto record = env.qs->get(id);
    REQUIRE(record.has_value());
    const std::string output = id == big ? std::string(21, 'x') : "output of " + (*record)->entry.key;
    const Status s = replays.finish(**record, ReplayVerdict::kResolved, attempt, *run, "op", "resolved",
                                    id == patched ? 1 : 0, output, 20);
    REQUIRE_MESSAGE(s.is_ok(), s.message());
  }
  CHECK(env.count("SELECT count(*) FROM quarantine WHERE status = 'resolved'") == 3);
  CHECK(env.count("SELECT count(*) FROM tasks WHERE state = 'ok'") == 3);
  CHECK(env.count("SELECT count(*) FROM results r JOIN tasks t ON t.id = r.task_id WHERE t.key = 'patched' AND "
                  "r.record_id = " + std::to_string(patched) + " AND r.revision = 1 AND CAST(r.data AS TEXT) = 'output of patched'") == 1);
  CHECK(env.count("SELECT count(*) FROM results r JOIN tasks t ON t.id = r.task_id WHERE t.key = 'plain' AND "
                  "r.record_id = " + std::to_string(plain) + " AND r.revision = 0 AND CAST(r.data AS TEXT) = 'output of plain'") == 1);
  // Over the keep limit (20 bytes): recorded as too large, not kept.
  CHECK(env.count("SELECT count(*) FROM results r JOIN tasks t ON t.id = r.task_id WHERE t.key = 'big' AND "
                  "r.status = 'too-large' AND r.data IS NULL AND r.size = 21") == 1);

  // A forced replay of `plain` that fails again takes its resolution back:
  // quarantined again, its replay's result gone; the others keep theirs.
  REQUIRE(replays.claim({plain}, ReplayScope::kAny, 3000).has_value());
  auto record = env.qs->get(plain);
  REQUIRE(record.has_value());
  const ReplayAttempt failed{3000, 3001, "crash", "pb1-0123456789abcdef", "killed by SIGSEGV"};
  const Status s = replays.finish(**record, ReplayVerdict::kFailedAgain, failed, *run, "op", "failed again", 0, "", 20);
  REQUIRE_MESSAGE(s.is_ok(), s.message());
  CHECK(env.count("SELECT count(*) FROM tasks WHERE key = 'plain' AND state = 'quarantined'") == 1);
  CHECK(env.count("SELECT count(*) FROM results r JOIN tasks t ON t.id = r.task_id WHERE t.key = 'plain'") == 0);
  CHECK(env.count("SELECT count(*) FROM results") == 2);
  CHECK(env.count("SELECT bytes FROM results_total") == static_cast<long long>(std::string("output of patched").size()));
}

TEST_CASE("patch: change summaries") {
  CHECK(payload_change_summary("abc", "abc") == "payload 3 -> 3 bytes, 0 byte ranges changed");
  CHECK(payload_change_summary("abcdef", "xbcdxy") == "payload 6 -> 6 bytes, 2 byte ranges changed (offsets 0-6)");
  CHECK(payload_change_summary("hello world", "hello there world") ==
        "payload 11 -> 17 bytes, bytes 6-6 replaced by 6 bytes");
  CHECK(payload_change_summary("abcdef", "") == "payload 6 -> 0 bytes, bytes 0-6 replaced by 0 bytes");
  CHECK(payload_change_summary("", "ab") == "payload 0 -> 2 bytes, bytes 0-0 replaced by 2 bytes");
  CHECK(args_change_summary(R"({"a":"1"})", R"({"a":"1","b":"2"})") == "arg b: (unset) -> 2");
  const std::string long_value(100, 'v');
  CHECK(args_change_summary("{}", R"({"k":")" + long_value + R"("})") ==
        "arg k: (unset) -> " + std::string(60, 'v') + "...");
}

TEST_CASE("patch: a damaged original payload is a reason to patch, not to refuse; the summary says so") {
  Env env;
  const std::int64_t id = env.add("k1", "S payload");
  env.sql("UPDATE payloads SET data = x'00' WHERE sha256 = '" + sha256_hex("S payload") + "'");
  auto revision = env.patch(payload_patch(id, "fixed"));
  REQUIRE_MESSAGE(revision.has_value(), revision.error());
  CHECK(revision->summary.rfind("payload -> 5 bytes (the original's payload is unreadable: ", 0) == 0);
  CHECK(revision->summary.find("damaged") != std::string::npos);
}

TEST_CASE("patch: a version 9 store with a record migrates to revisions, and the record can be patched") {
  pillbox::test::ScratchDir s{"patch-migrate"};
  const std::string dir = s.path + "/store";
  std::filesystem::create_directory(dir);
  ::chmod(dir.c_str(), 0700);
  {
    auto db = Database::open(dir + "/pillbox.db");
    REQUIRE_MESSAGE(db.has_value(), db.error());
    REQUIRE(migrate(*db, 9).is_ok());
    const Status filled = db->exec(
        "INSERT INTO runs (id, started_at, pid, host, handler_identity, policy_identity) VALUES (1, 0, 1, 'h', 'echo', 'p');"
        "INSERT INTO tasks (id, job, key, payload_sha256, payload_size, state, attempts, updated_at) "
        "VALUES (1, 'echo', 'k', '" + sha256_hex("A") + "', 1, 'quarantined', 1, 0);"
        "INSERT INTO payloads VALUES ('" + sha256_hex("A") + "', 1, x'41', 0);"
        "INSERT INTO quarantine (id, task_id, key, source, handler, handler_identity, handler_args, exec_argv, "
        "policy_identity, policy, payload_sha256, payload_size, kind, fingerprint, crash_state, message, signal, "
        "syscall, exit_code, cpu_ms, wall_ms, max_rss_kb, status, created_at, updated_at) VALUES (1, 1, 'k', 'run', "
        "'echo', 'echo', '{}', '[]', 'p', '', '" + sha256_hex("A") + "', 1, 'crash', 'fp', '[]', 'm', 11, '', -1, 0, 0, 0, "
        "'quarantined', 0, 0);");
    REQUIRE_MESSAGE(filled.is_ok(), filled.message());
  }
  auto store = Store::open(dir);
  REQUIRE_MESSAGE(store.has_value(), store.error());
  CHECK(*store->db().query_int("PRAGMA user_version") == schema_version());
  CHECK(*store->db().query_int("SELECT count(*) FROM revisions") == 0);
  auto qs = QuarantineStore::open(store->db(), store->dir());
  REQUIRE(qs.has_value());
  PatchRequest request = payload_patch(1, "B");
  request.actor = "web: 127.0.0.1:5000";
  auto revision = patch_record(store->db(), *qs, request, 10);
  REQUIRE_MESSAGE(revision.has_value(), revision.error());
  CHECK(revision->n == 1);
  CHECK(revision->actor == "web: 127.0.0.1:5000");
  CHECK(*store->db().query_text("SELECT actor FROM audit WHERE action = 'patched'") == "web: 127.0.0.1:5000");
}
