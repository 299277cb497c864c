// pillbox quarantine patch (issue 16, human patch and resume): an operator's
// fixed payload or handler arguments stored as a revision beside the
// original; replay runs the newest revision and resolves the record, while
// the original payload, unchanged in the store, still fails. Refusals
// (bad input, a record being replayed) change nothing in the store.
#include <doctest/doctest.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;
using e2e::sql_rows;
using e2e::task_line;

namespace {

// Every row of the tables a patch may write, as text: equal dumps, an unchanged store.
std::string dump(const std::string& db) {
  std::string out;
  for (const char* table : {"quarantine", "revisions", "payloads", "audit", "tasks", "attempts"}) {
    out += std::string(table) + ":\n";
    for (const auto& row : sql_rows(db, std::string("SELECT * FROM ") + table + " ORDER BY 1, 2")) {
      for (const auto& cell : row) out += cell + "|";
      out += "\n";
    }
  }
  return out;
}

// An exec record of poison_corpus (a payload starting with 'S' crashes it),
// quarantined by a real run; returns the store.
std::string quarantine_exec(const e2e::TempDir& dir, const e2e::TempDir& work,
                            const std::vector<std::pair<std::string, std::string>>& tasks) {
  const std::string store = dir.path() + "/store";
  std::string input;
  for (const auto& [key, payload] : tasks) input += task_line(key, payload);
  const auto run = run_pillbox({"run", "--store", store, "--max-attempts", "1", "--json", "-", "--",
                                e2e::fixture("poison_corpus"), work.path()},
                               input);
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  REQUIRE(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") ==
          static_cast<long long>(tasks.size()));
  return store;
}

}  // namespace

TEST_CASE("patch then replay resolves a record whose original payload, unchanged in the store, still fails") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string original = "S order 7: qty=3";
  const std::string store = quarantine_exec(dir, work, {{"order-7", original}});
  const std::string db = store + "/pillbox.db";
  const std::string original_sha = pillbox::sha256_hex(original);
  REQUIRE(sql_rows(db, "SELECT payload_sha256 FROM quarantine WHERE id = 1")[0][0] == original_sha);

  const std::string fixed_payload = "O order 7: qty=3";  // no crash marker: poison_corpus echoes it
  const std::string file = dir.write("fixed", fixed_payload);
  const auto patch = run_pillbox({"quarantine", "patch", "1", "--payload-file", file, "--note",
                                  "the upstream exporter wrote S for O", "--json", "--store", store});
  INFO(patch.describe());
  REQUIRE(patch.exit_code == 0);
  REQUIRE(patch.records.size() == 1);
  CHECK(patch.records[0]["record_id"] == 1);
  CHECK(patch.records[0]["n"] == 1);
  CHECK(patch.records[0]["summary"] == "payload 16 -> 16 bytes, 1 byte range changed (offsets 0-1)");
  CHECK(patch.records[0]["payload_sha256"] == pillbox::sha256_hex(fixed_payload));

  // show lists the revision; the record's own payload is the original.
  const auto shown = run_pillbox({"quarantine", "show", "1", "--json", "--store", store});
  INFO(shown.describe());
  REQUIRE(shown.exit_code == 0);
  REQUIRE(shown.records.size() == 1);
  const auto& r = shown.records[0];
  CHECK(r["payload_sha256"] == original_sha);
  REQUIRE(r["revisions"].size() == 1);
  CHECK(r["revisions"][0]["n"] == 1);
  CHECK(r["revisions"][0]["note"] == "the upstream exporter wrote S for O");
  CHECK(r["revisions"][0]["payload_size"] == 16);
  CHECK(r["revisions"][0]["actor"].get<std::string>().find("via pillbox quarantine patch") != std::string::npos);
  CHECK(r["audit"].back()["action"] == "patched");
  const auto text = run_pillbox({"quarantine", "show", "1", "--store", store});
  CHECK(text.out.find("revisions (1, replay runs revision 1") != std::string::npos);
  CHECK(text.out.find("note:    the upstream exporter wrote S for O") != std::string::npos);

  // export --revision 1 gives the patched bytes; the original stays the default.
  const auto patched = run_pillbox({"quarantine", "export", "1", "--revision", "1", "-o", dir.file("rev1"), "--json",
                                    "--store", store});
  INFO(patched.describe());
  REQUIRE(patched.exit_code == 0);
  CHECK(e2e::read_file(dir.file("rev1")) == fixed_payload);
  CHECK(patched.records[0]["revision"] == 1);
  CHECK(patched.records[0]["sha256"] == pillbox::sha256_hex(fixed_payload));
  for (const auto& bad : std::vector<std::vector<std::string>>{{"--revision", "2"}, {"--revision", "0"},
                                                               {"--revision", "1", "--minimized"},
                                                               {"--revision", "1", "--bundle"}}) {
    std::vector<std::string> args = {"quarantine", "export", "1", "-o", dir.file("bad"), "--store", store};
    args.insert(args.end(), bad.begin(), bad.end());
    const auto r = run_pillbox(args);
    INFO(r.describe());
    CHECK(r.exit_code == 2);
  }

  // --dry-run says what would run: revision 1.
  const auto plan = run_pillbox({"quarantine", "replay", "1", "--dry-run", "--json", "--store", store});
  INFO(plan.describe());
  REQUIRE(plan.records.size() == 1);
  REQUIRE(plan.records[0]["records"].size() == 1);
  CHECK(plan.records[0]["records"][0]["revision"] == 1);

  // replay runs revision 1 under the record's key, and resolves it.
  const auto replay = run_pillbox({"quarantine", "replay", "1", "--json", "--store", store});
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  REQUIRE(replay.records.size() == 1);
  CHECK(replay.records[0]["replay"] == "resolved");
  CHECK(replay.records[0]["revision"] == 1);
  CHECK(replay.records[0]["key"] == "order-7");
  CHECK(sql_rows(db, "SELECT status, payload_sha256 FROM quarantine WHERE id = 1")[0] ==
        std::vector<std::string>{"resolved", original_sha});
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'replayed' AND detail LIKE "
                    "'resolved: ok under % from revision 1 (a patch; the original is unchanged)'") == 1);
  // The record is resolved, and so is its task (issue 26, point 1): ok, its
  // kept result the patched revision's output, marked as such; a run over
  // the same input skips it as done and writes that result to --out.
  CHECK(sql_rows(db, "SELECT state FROM tasks")[0][0] == "ok");
  const auto result = run_pillbox({"results", "--store", store, "--json", "order-7"});
  INFO(result.describe());
  CHECK(result.exit_code == 0);
  REQUIRE(result.records.size() == 1);
  CHECK(result.records[0]["output"] == fixed_payload);
  CHECK(result.records[0]["from"] == "patch");
  CHECK(result.records[0]["quarantine_id"] == 1);
  CHECK(result.records[0]["revision"] == 1);
  const auto rerun = run_pillbox({"run", "--store", store, "--max-attempts", "1", "-o", dir.file("final"), "-", "--",
                                  e2e::fixture("poison_corpus"), work.path()},
                                 task_line("order-7", original));
  INFO(rerun.describe());
  CHECK(rerun.exit_code == 0);
  CHECK(rerun.err.find("1 already ok and 0 already quarantined in this store") != std::string::npos);
  CHECK(rerun.err.find("1 of the tasks already ok were resolved by `pillbox quarantine replay`") != std::string::npos);
  CHECK(e2e::read_file(dir.file("final/order-7.out")) == fixed_payload);

  // The original bytes are still in the store, and still fail.
  const std::string exported = dir.file("original");
  const auto out = run_pillbox({"quarantine", "export", "1", "-o", exported, "--store", store});
  REQUIRE_MESSAGE(out.exit_code == 0, out.describe());
  CHECK(e2e::read_file(exported) == original);
  const auto again = run_pillbox({"reproduce", "1", "--runs", "2", "--json", "--store", store});
  INFO(again.describe());
  CHECK(again.exit_code == 0);
  REQUIRE(again.records.size() == 1);
  CHECK(again.records[0]["verdict"] == "reliable");
}

TEST_CASE("patch --set-arg: a handler record's arguments, revised; replay runs them and resolves it") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const auto run = run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--max-attempts", "1",
                                "-"},
                               task_line("segv-1", "S payload"));
  INFO(run.describe());
  REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine") == 1);
  const std::string args_before = sql_rows(db, "SELECT handler_args FROM quarantine")[0][0];

  const auto patch = run_pillbox({"quarantine", "patch", "1", "--set-arg", "fixed=yes", "--note", "the fixed parser",
                                  "--store", store});
  INFO(patch.describe());
  REQUIRE(patch.exit_code == 0);
  CHECK(patch.out.find("record 1: revision 1 stored (arg fixed: (unset) -> yes)") != std::string::npos);
  CHECK(sql_rows(db, "SELECT handler_args FROM quarantine")[0][0] == args_before);

  // The plugin said again (issue 25); its patched arguments still apply.
  const auto replay = run_pillbox({"quarantine", "replay", "1", "--store", store, "--handler", e2e::poison_plugin()});
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  CHECK(replay.out.find("-> resolved (revision 1, a patch)") != std::string::npos);
  CHECK(sql_rows(db, "SELECT status FROM quarantine")[0][0] == "resolved");
}

TEST_CASE("patch is refused while a replay holds the record; the store is unchanged") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string store = quarantine_exec(dir, work, {{"first", "S one"}, {"second", "S two"}});
  const std::string db = store + "/pillbox.db";
  const std::string file = dir.write("fixed", "fixed two");
  // One batch claims both records; --rate 0.1 starts the second 10 s after the
  // first, so when the first result is printed the second is claimed, not run.
  std::string before, after;
  e2e::RunResult refused;
  const auto replay = run_pillbox(
      {"quarantine", "replay", "1", "2", "--rate", "0.1", "--json", "--store", store}, "", {},
      [&](pid_t, std::size_t line_no, std::string_view) {
        if (line_no != 1) return;
        before = dump(db);
        refused = run_pillbox({"quarantine", "patch", "2", "--payload-file", file, "--note", "too late", "--store", store});
        after = dump(db);
      });
  INFO(replay.describe());
  CHECK(replay.records.size() == 2);
  INFO(refused.describe());
  CHECK(refused.exit_code == 2);
  CHECK(refused.err.find("record 2 is being replayed right now") != std::string::npos);
  CHECK(before.find("replaying") != std::string::npos);
  CHECK(after == before);
  CHECK(sql_int(db, "SELECT count(*) FROM revisions") == 0);
}

TEST_CASE("patch: bad input is refused with what to do, and leaves the store unchanged") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  const std::string store = quarantine_exec(dir, work, {{"open", "S open"}, {"gone", "S gone"}});
  const std::string db = store + "/pillbox.db";
  const auto discard = run_pillbox({"quarantine", "discard", "2", "--reason", "duplicate", "--store", store});
  REQUIRE_MESSAGE(discard.exit_code == 0, discard.describe());
  const std::string same = dir.write("same", "fixed once");
  REQUIRE(run_pillbox({"quarantine", "patch", "1", "--payload-file", same, "--note", "first fix", "--store", store})
              .exit_code == 0);
  // Larger than any payload may be; sparse, so it costs no disk.
  const std::string huge = dir.file("huge");
  REQUIRE(::truncate(dir.write("huge", "").c_str(), (1LL << 30) + 1) == 0);
  const std::string before = dump(db);

  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{"9", "--payload-file", same, "--note", "n"}, "no quarantine record 9 in this store"},
      {{"x1", "--payload-file", same, "--note", "n"}, "is not a record id"},
      {{"2", "--payload-file", same, "--note", "n"}, "record 2 is discarded: only an open record"},
      {{"1", "--set-arg", "mode=lenient", "--note", "n"}, "has a command line, not handler arguments"},
      {{"1", "--payload-file", same, "--note", "again"}, "is the same as revision 1 of record 1"},
      {{"1", "--payload-file", dir.file("missing"), "--note", "n"}, "cannot read --payload-file"},
      {{"1", "--payload-file", dir.path(), "--note", "n"}, "cannot read --payload-file"},
      {{"1", "--payload-file", huge, "--note", "n"}, "cannot read --payload-file"},
      {{"1", "--payload-file", same}, "needs --note TEXT"},
      {{"1", "--payload-file", same, "--note", " "}, "needs a note"},
      {{"1", "--note", "n"}, "one of the two"},
      {{"1", "--payload-file", same, "--set-arg", "a=b", "--note", "n"}, "one of the two"},
      {{"1", "--set-arg", "novalue", "--note", "n"}, "--set-arg takes K=V"},
      {{"--payload-file", same, "--note", "n"}, "exactly one record ID"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = {"quarantine", "patch"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--store", store});
    const auto r = e2e::check_usage_error(args, c.says);
    INFO(r.describe());
    CHECK(dump(db) == before);
  }
}
