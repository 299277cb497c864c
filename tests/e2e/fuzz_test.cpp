// pillbox fuzz and pillbox quarantine import (issue 5): a mutation loop
// through the real sandbox finds poison pills in targets nothing instruments
// (a backtracking regex, a program with a crash behind a magic value) and
// quarantines them with their seed; fuzzer artifacts are imported with the
// fingerprints `run` gives the same bytes.
#include <doctest/doctest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "shared/sha256.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;
using e2e::sql_rows;

namespace {

// The summary line of `pillbox fuzz --json` (the last record).
const nlohmann::json& summary_of(const e2e::RunResult& r) {
  REQUIRE(!r.records.empty());
  REQUIRE(r.records.back()["type"] == "summary");
  return r.records.back();
}

// The fingerprint `pillbox run` gives `file` under `handler_args`, in a store of its own.
std::string run_fingerprint(const std::string& file, std::vector<std::string> handler_args) {
  e2e::TempDir dir;
  std::vector<std::string> args = {"run", "--store", dir.path() + "/store", "--json", "--max-attempts", "1", file};
  args.insert(args.end(), handler_args.begin(), handler_args.end());
  const auto r = run_pillbox(args);
  INFO(r.describe());
  REQUIRE(r.records.size() == 1);
  return r.records[0].value("fingerprint", "");
}

}  // namespace

TEST_CASE("fuzz: ^(a+)+$ seeded with aaaa yields a quarantined cpu-limit payload within 60 s") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string seed = dir.write("aaaa.txt", "aaaa");
  const auto r = run_pillbox({"fuzz", seed, "--handler", "regex", "--arg", "pattern=^(a+)+$", "--cpu", "1s",
                              "--max-time", "60s", "--stop-on-finding", "--jobs", "2", "--seed", "1", "--json",
                              "--store", store});
  INFO(r.describe());
  CHECK(r.exit_code == 1);  // failures found
  const auto& summary = summary_of(r);
  CHECK(summary["stopped_by"] == "--stop-on-finding");
  CHECK(summary["new_records"] == 1);  // before --max-time 60s ran out
  MESSAGE("cpu-limit found after " << summary["runs"] << " runs, " << summary["elapsed_ms"] << " ms");
  REQUIRE(r.records.front()["type"] == "finding");
  CHECK(r.records.front()["kind"] == "cpu-limit");
  CHECK(r.records.front()["seed"] == "input " + seed);

  const auto rows = sql_rows(db, "SELECT id, kind, source, json_extract(origin, '$.seed'), "
                                 "json_extract(origin, '$.seed_sha256'), payload_sha256 FROM quarantine");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0][1] == "cpu-limit");
  CHECK(rows[0][2] == "fuzz");
  CHECK(rows[0][3] == "input " + seed);
  CHECK(rows[0][4] == pillbox::sha256_hex("aaaa"));
  // The ledger has the task, quarantined, with the attempt that found it.
  CHECK(sql_int(db, "SELECT count(*) FROM tasks t JOIN quarantine q ON q.task_id = t.id WHERE t.state = 'quarantined'") == 1);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts a JOIN quarantine q ON q.task_id = a.task_id WHERE a.kind = 'cpu-limit'") == 1);

  // The payload really is a poison pill: run on its own, it hits the CPU limit again.
  const std::string payload = dir.file("found");
  const auto exported = run_pillbox({"quarantine", "export", rows[0][0], "-o", payload, "--store", store});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);
  const auto rerun = run_pillbox({"run", "--no-store", "--json", "--handler", "regex", "--arg", "pattern=^(a+)+$",
                                  "--cpu", "1s", payload});
  INFO(rerun.describe());
  REQUIRE(rerun.records.size() == 1);
  CHECK(rerun.records[0]["kind"] == "cpu-limit");
}

TEST_CASE("fuzz: a crash behind a 4-byte magic value is found with the dictionary; a second session only counts repeats") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string seed = dir.write("hello", "hello world");
  const std::string dict = dir.write("pbx.dict", "# the record header\nmagic=\"PBX!\"\n");
  const std::string program = e2e::fixture("magic_crash");
  const auto r = run_pillbox({"fuzz", seed, "--dict", dict, "--max-time", "60s", "--stop-on-finding", "--jobs", "2",
                              "--seed", "7", "--json", "--store", store, "--", program});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  const auto& summary = summary_of(r);
  CHECK(summary["stopped_by"] == "--stop-on-finding");
  MESSAGE("crash found after " << summary["runs"] << " runs, " << summary["elapsed_ms"] << " ms");
  const auto rows = sql_rows(db, "SELECT id, kind, fingerprint, crash_state, json_extract(origin, '$.mutations'), "
                                 "repeats FROM quarantine");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0][1] == "crash");
  CHECK(rows[0][3].find("parse_record") != std::string::npos);
  CHECK(rows[0][4].find("dict-") != std::string::npos);  // the magic came from the dictionary
  const std::string payload = dir.file("found");
  REQUIRE(run_pillbox({"quarantine", "export", rows[0][0], "-o", payload, "--store", store}).exit_code == 0);
  CHECK(e2e::read_file(payload).rfind("PBX!", 0) == 0);
  // `run` gives the found bytes the same fingerprint.
  CHECK(run_fingerprint(payload, {"--", program}) == rows[0][2]);

  // A second session, seeded with the crasher itself: the fingerprint is on
  // file, so its failures only count as repeats of the record.
  const auto again = run_pillbox({"fuzz", seed, payload, "--dict", dict, "--max-runs", "150", "--jobs", "2", "--seed",
                                  "8", "--json", "--store", store, "--", program});
  INFO(again.describe());
  CHECK(again.exit_code == 1);
  const auto& s2 = summary_of(again);
  CHECK(s2["new_records"] == 0);
  REQUIRE(s2["repeats"].contains(rows[0][2]));
  const long long counted = s2["repeats"][rows[0][2]].get<long long>();
  CHECK(counted >= 1);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 1);
  CHECK(sql_int(db, "SELECT repeats FROM quarantine") == std::stoll(rows[0][5]) + counted);
  // One audit entry for the session's repeats, not one per repeat.
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'repeat' AND detail LIKE '%(--seed 8)%'") == 1);
}

TEST_CASE("fuzz --from-quarantine: seeds and handler come from the record") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const auto run = run_pillbox({"run", "--store", store, "--handler", e2e::poison_plugin(), "--json", "-"},
                               e2e::task_line("crasher", "S segv here"));
  INFO(run.describe());
  REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine") == 1);
  // Its plugin said again (a record never chooses code to load: issue 25).
  const auto r = run_pillbox({"fuzz", "--from-quarantine", "1", "--max-runs", "100", "--jobs", "2", "--seed", "3",
                              "--json", "--store", store, "--handler", e2e::poison_plugin()});
  INFO(r.describe());
  const auto& summary = summary_of(r);
  CHECK(summary["runs"] == 100);
  CHECK(summary["stopped_by"] == "--max-runs");
  // The seed itself crashes under the recorded plugin: a repeat of record 1.
  const std::string fp = sql_rows(db, "SELECT fingerprint FROM quarantine WHERE id = 1")[0][0];
  REQUIRE(summary["repeats"].contains(fp));
  CHECK(sql_int(db, "SELECT repeats FROM quarantine WHERE id = 1") == summary["repeats"][fp].get<long long>());
  // The seed's own crash was no new record: whatever fuzz recorded is a
  // mutation (generation 1 or more) of record 1's payload.
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE source = 'fuzz' AND "
                    "(json_extract(origin, '$.seed') != 'quarantine record 1' OR "
                    "json_extract(origin, '$.generation') < 1)") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE source = 'fuzz'") == summary["new_records"].get<long long>());
}

TEST_CASE("fuzz: a bug whose record was resolved and that fails again is recorded anew") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string seed = dir.write("crasher", "S crashes at once");
  const std::vector<std::string> args = {"fuzz", seed, "--handler", e2e::poison_plugin(), "--max-runs", "20", "--jobs", "1",
                                         "--seed", "9", "--json", "--store", store};
  const auto first = run_pillbox(args);
  INFO(first.describe());
  REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine WHERE json_extract(origin, '$.generation') = 0") == 1);
  // As a replay that resolved it under the same handler leaves it: the
  // record resolved, its ledger task done.
  e2e::sql_write(db, "UPDATE quarantine SET status = 'resolved' WHERE json_extract(origin, '$.generation') = 0");
  e2e::sql_write(db, "UPDATE tasks SET state = 'ok' WHERE id = (SELECT task_id FROM quarantine WHERE "
                     "json_extract(origin, '$.generation') = 0)");
  const auto again = run_pillbox(args);
  INFO(again.describe());
  const auto rows = sql_rows(db, "SELECT status, t.state FROM quarantine q JOIN tasks t ON t.id = q.task_id WHERE "
                                 "json_extract(q.origin, '$.generation') = 0 ORDER BY q.id");
  // The seed's crash is a regression: a new open record beside the resolved one.
  CHECK(rows == std::vector<std::vector<std::string>>{{"resolved", "quarantined"}, {"quarantined", "quarantined"}});
  CHECK(summary_of(again)["new_records"].get<long long>() >= 1);
  CHECK(again.records.front()["type"] == "finding");
}

TEST_CASE("fuzz: usage errors say what to do") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::string bad_dict = dir.write("bad.dict", "magic=PBX!\n");
  const std::vector<Case> cases = {
      {{"fuzz", "--max-runs", "5"}, "--handler is required"},
      {{"fuzz", "--handler", "echo", "--dict", dir.file("missing.dict")}, "cannot read dictionary"},
      {{"fuzz", "--handler", "echo", "--dict", bad_dict}, "bad.dict:1:"},
      {{"fuzz", "--handler", "echo", "--max-runs", "0"}, "--max-runs"},
      {{"fuzz", "--handler", "echo", "--max-time", "soon"}, "--max-time"},
      {{"fuzz", "--from-quarantine", "7"}, "no quarantine record 7"},
      {{"fuzz", "--fingerprint", "pb1-0000000000000000"}, "no record has fingerprint"},
      {{"fuzz", "--handler", "echo", dir.file("no-such-seed")}, "no-such-seed"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args = c.args;
    args.insert(args.end(), {"--store", store});
    const auto r = run_pillbox(args);
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find(c.message) != std::string::npos);
  }
}

TEST_CASE("quarantine import: libFuzzer and AFL++ artifacts get the fingerprints run gives the same bytes") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string artifacts = dir.path() + "/artifacts";
  // libFuzzer: crash-<sha1 of the input>; AFL++: <out>/default/crashes/id:...
  // (libFuzzer names it by the input's SHA-1: 40 hex digits, which is what
  // is recognized; these are not checked against the bytes.)
  const std::string segv = "S from libFuzzer";
  const std::string hex = pillbox::sha256_hex(segv).substr(0, 40);
  REQUIRE(std::system(("mkdir -p " + artifacts + "/afl/default/crashes").c_str()) == 0);
  const std::string libfuzzer_file = dir.write("artifacts/crash-" + hex, segv);
  const std::string afl_file =
      dir.write("artifacts/afl/default/crashes/id:000000,sig:06,src:000000,time:412,execs:1000,op:havoc,rep:4",
                "A from AFL++");
  dir.write("artifacts/afl/default/crashes/README.txt", "Command line used to find this crash: ...\n");
  // A timeout artifact whose bytes run fine under this handler.
  const std::string fine = dir.write("artifacts/timeout-0123456789abcdef0123456789abcdef01234567", "fine");

  const auto r = run_pillbox({"quarantine", "import", artifacts, "--handler", e2e::poison_plugin(), "--json",
                              "--store", store});
  INFO(r.describe());
  CHECK(r.exit_code == 1);  // one artifact runs ok here
  REQUIRE(r.records.size() == 3);
  std::map<std::string, nlohmann::json> by_file;
  for (const auto& rec : r.records) by_file[rec["file"]] = rec;
  CHECK(by_file[libfuzzer_file]["status"] == "imported");
  CHECK(by_file[libfuzzer_file]["tool"] == "libfuzzer");
  CHECK(by_file[libfuzzer_file]["artifact"] == "crash");
  CHECK(by_file[afl_file]["status"] == "imported");
  CHECK(by_file[afl_file]["tool"] == "afl++");
  CHECK(by_file[fine]["status"] == "ok");
  CHECK(r.err.find("1 other file ignored") != std::string::npos);  // README.txt

  const auto rows = sql_rows(db, "SELECT key, kind, fingerprint, source, json_extract(origin, '$.tool'), "
                                 "json_extract(origin, '$.file'), payload_sha256 FROM quarantine ORDER BY key");
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    CHECK(row[1] == "crash");
    CHECK(row[3] == "import");
    CHECK((row[5] == libfuzzer_file || row[5] == afl_file));
    // Keyed by the bytes, not the file name.
    CHECK(row[0] == "import:" + row[6].substr(0, 16));
    // The same fingerprint `run` gives the same bytes under the same handler.
    CHECK(run_fingerprint(row[5], {"--handler", e2e::poison_plugin()}) == row[2]);
  }
  CHECK(rows[0][2] != rows[1][2]);  // SIGSEGV and SIGABRT: two bugs
  const auto listed = run_pillbox({"quarantine", "list", "--source", "import", "--limit", "5", "--json", "--store", store});
  CHECK(listed.records.size() == 2);
  CHECK(run_pillbox({"quarantine", "list", "--source", "fuzz", "--json", "--store", store}).records.empty());

  // Importing again adds nothing.
  const auto again = run_pillbox({"quarantine", "import", libfuzzer_file, afl_file, "--handler", e2e::poison_plugin(),
                                  "--json", "--store", store});
  INFO(again.describe());
  CHECK(again.exit_code == 0);
  REQUIRE(again.records.size() == 2);
  for (const auto& rec : again.records) CHECK(rec["status"] == "already");
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 2);

  // The same bytes under another name, as when a later CI run's artifacts
  // are downloaded into a directory of their own: on file already.
  REQUIRE(std::system(("mkdir -p " + dir.path() + "/download-2").c_str()) == 0);
  const std::string copy = dir.write("download-2/crash-" + hex, segv);
  const auto copied = run_pillbox({"quarantine", "import", copy, "--handler", e2e::poison_plugin(), "--json",
                                   "--store", store});
  INFO(copied.describe());
  CHECK(copied.exit_code == 0);
  REQUIRE(copied.records.size() == 1);
  CHECK(copied.records[0]["status"] == "already");
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 2);

  // No artifacts at all is a usage error naming what was looked for.
  e2e::TempDir empty;
  const auto none = run_pillbox({"quarantine", "import", empty.path(), "--handler", "echo", "--store", store});
  CHECK(none.exit_code == 2);
  CHECK(none.err.find("no crash artifacts found") != std::string::npos);
}

TEST_CASE("quarantine import: an artifact ended by a signal from outside is not run, not recorded (exit 3)") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  REQUIRE(std::system(("mkdir -p " + dir.path() + "/artifacts").c_str()) == 0);
  // The "parser" sends itself the signal its input names: SIGSEGV is a
  // crash; SIGTERM is what an operator or a host's shutdown sends, never a
  // payload's fault, so the import cannot judge that artifact.
  const std::string segv = dir.write("artifacts/crash-" + std::string(40, 'a'), "SEGV");
  const std::string term = dir.write("artifacts/crash-" + std::string(40, 'b'), "TERM");
  const auto r = run_pillbox({"quarantine", "import", dir.path() + "/artifacts", "--json", "--store", store, "--",
                              "/bin/sh", "-c", "read -r sig; kill -$sig $$"});
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  REQUIRE(r.records.size() == 2);
  std::map<std::string, nlohmann::json> by_file;
  for (const auto& rec : r.records) by_file[rec["file"]] = rec;
  CHECK(by_file[segv]["status"] == "imported");
  CHECK(by_file[term]["status"] == "not-run");
  CHECK(by_file[term]["kind"] == "killed");
  CHECK(by_file[term]["detail"].get<std::string>().find("import it again") != std::string::npos);
  CHECK(r.err.find("1 not run") != std::string::npos);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") == 1);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE json_extract(origin, '$.file') = '" + segv + "'") == 1);
  // Nothing of it in the ledger either: it can be imported again later.
  CHECK(sql_int(db, "SELECT count(*) FROM tasks") == 1);
}

TEST_CASE("fuzz: SIGINT ends a session with its repeats written; SIGKILL loses no record") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string seed = dir.write("crasher", "S crashes at once");
  const std::vector<std::string> args = {"fuzz", seed, "--handler", e2e::poison_plugin(), "--jobs", "2", "--seed", "5",
                                         "--max-time", "120s", "--json", "--store", store};
  // SIGINT once the seed's crash is on file.
  const auto r = e2e::run_pillbox(args, "", {}, [](pid_t pid, std::size_t line_no, std::string_view) {
    if (line_no == 1) ::kill(pid, SIGINT);
  });
  INFO(r.describe());
  CHECK(r.exit_code == 130);
  const auto& summary = summary_of(r);
  CHECK(summary["stopped_by"] == "SIGINT");
  CHECK(summary["new_records"].get<long long>() >= 1);
  long long repeats = 0;
  for (const auto& [fp, n] : summary["repeats"].items()) repeats += n.get<long long>();
  // Every repeat the summary reports is in the store.
  CHECK(sql_int(db, "SELECT sum(repeats) FROM quarantine") == repeats);
  const long long records = sql_int(db, "SELECT count(*) FROM quarantine");

  // SIGKILL in the middle of the next session: what was recorded stays, the
  // store is sound, and the next session goes on from it.
  // (Seeded with another crasher, whose new record prints the line that triggers the kill.)
  std::vector<std::string> args2 = args;
  args2[1] = dir.write("aborter", "A aborts at once");
  const auto killed = e2e::run_pillbox(args2, "", {}, [](pid_t pid, std::size_t, std::string_view) { ::kill(pid, SIGKILL); });
  CHECK(killed.term_signal == SIGKILL);
  CHECK(sql_rows(db, "PRAGMA integrity_check") == std::vector<std::vector<std::string>>{{"ok"}});
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine") >= records + 1);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine q JOIN tasks t ON t.id = q.task_id WHERE t.state != 'quarantined'") == 0);
  const auto next = e2e::run_pillbox({"fuzz", seed, "--handler", e2e::poison_plugin(), "--jobs", "2", "--max-runs", "50",
                                      "--json", "--store", store});
  INFO(next.describe());
  CHECK(next.exit_code == 1);
  CHECK(summary_of(next)["runs"] == 50);
}

namespace {

// The target of the in-flight tests: hangs on HANG, crashes on SEGV.
const std::vector<std::string> kHangOrSegv = {"--", "/bin/sh", "-c",
                                              "read -r x; case \"$x\" in HANG) sleep 60;; SEGV) kill -SEGV $$;; esac"};

// A fuzz session on `store` SIGKILLed while the seed `hang` is running.
void kill_a_session_running(const std::string& store, const std::string& hang, const std::string& segv) {
  std::vector<std::string> args = {"fuzz", hang, segv, "--jobs", "2", "--timeout", "3s", "--seed", "1",
                                   "--max-time", "120s", "--json", "--store", store};
  args.insert(args.end(), kHangOrSegv.begin(), kHangOrSegv.end());
  // Both seeds start at once (two jobs); SEGV's record is the first line,
  // by which time HANG is running. SIGKILL then.
  const auto killed = e2e::run_pillbox(args, "", {}, [](pid_t pid, std::size_t, std::string_view) { ::kill(pid, SIGKILL); });
  INFO(killed.describe());
  REQUIRE(killed.term_signal == SIGKILL);
  const std::string db = store + "/pillbox.db";
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE kind = 'crash'") == 1);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE kind = 'wall-timeout'") == 0);
}

std::size_t entries_in(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& d : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST_CASE("fuzz: a candidate running when a session is SIGKILLed runs first in the next session, and is recorded") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const auto& target = kHangOrSegv;
  const std::string hang = dir.write("hang", "HANG");
  kill_a_session_running(store, hang, dir.write("segv", "SEGV"));

  // The next session, with a harmless seed, runs HANG first and records it.
  const std::string fine = dir.write("fine", "fine");
  std::vector<std::string> next_args = {"fuzz", fine, "--jobs", "2", "--timeout", "3s", "--max-runs", "4",
                                        "--json", "--store", store};
  next_args.insert(next_args.end(), target.begin(), target.end());
  const auto next = e2e::run_pillbox(next_args);
  INFO(next.describe());
  CHECK(next.exit_code == 1);
  CHECK(next.err.find("running when an earlier session died") != std::string::npos);
  const auto rows = sql_rows(db, "SELECT json_extract(origin, '$.seed'), json_extract(origin, '$.recovered_from'), "
                                 "json_extract(origin, '$.generation') FROM quarantine WHERE kind = 'wall-timeout'");
  REQUIRE(rows.size() == 1);
  CHECK(rows[0][0] == "input " + hang);
  CHECK(rows[0][1].rfind("pillbox fuzz session ", 0) == 0);
  CHECK(rows[0][2] == "0");
  // Nothing is left in flight.
  CHECK(entries_in(store + "/fuzz-inflight") == 0);
}

TEST_CASE("fuzz: a recovered candidate that took pillbox down while running alone twice is recorded as supervisor-lost") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const std::string hang = dir.write("hang", "HANG");
  kill_a_session_running(store, hang, dir.write("segv", "SEGV"));
  // Make the dead session's HANG look as a session leaves a candidate it had
  // recovered once (one loss) and was running alone when it died: alone-1-*.
  // (Dying a second time on cue would need a line on stdout while it runs.)
  REQUIRE(entries_in(store + "/fuzz-inflight") == 1);
  const auto session = std::filesystem::directory_iterator(store + "/fuzz-inflight")->path();
  std::string journaled;
  for (const auto& f : std::filesystem::directory_iterator(session)) {
    const std::string name = f.path().filename().string();
    if (name.rfind("run-", 0) == 0 && e2e::read_file(f.path().string()).ends_with("\nHANG")) {
      journaled = e2e::read_file(f.path().string());
      std::filesystem::rename(f.path(), session / "alone-1-1");
    }
  }
  REQUIRE(!journaled.empty());
  // A second such payload, other bytes: its supervisor-lost fingerprint is
  // the same (the handler's), yet it must get a record of its own.
  {
    std::ofstream other((session / "alone-1-2").string(), std::ios::binary);
    other << journaled.substr(0, journaled.size() - 4) << "HANG, other bytes";
  }

  const std::string fine = dir.write("fine", "fine");
  // HANG is among the seeds again: recorded as supervisor-lost, it must not
  // run again in this session either.
  std::vector<std::string> args = {"fuzz", fine, hang, "--jobs", "1", "--timeout", "3s", "--max-runs", "3", "--json",
                                   "--store", store};
  args.insert(args.end(), kHangOrSegv.begin(), kHangOrSegv.end());
  const auto next = e2e::run_pillbox(args);
  INFO(next.describe());
  CHECK(next.exit_code == 1);
  const auto rows = sql_rows(db, "SELECT json_extract(origin, '$.seed'), json_extract(origin, '$.run'), message, "
                                 "fingerprint FROM quarantine WHERE kind = 'supervisor-lost' ORDER BY id");
  REQUIRE(rows.size() == 2);
  for (const auto& row : rows) {
    CHECK(row[0] == "input " + hang);
    CHECK(row[1] == "0");  // not run again
    CHECK(row[2].find("2 times") != std::string::npos);
  }
  CHECK(rows[0][3] == rows[1][3]);
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE kind = 'wall-timeout'") == 0);
  const auto& summary = summary_of(next);
  CHECK(summary["by_kind"]["supervisor-lost"] == 2);
  CHECK(summary["by_kind"].value("wall-timeout", 0) == 0);
  CHECK(entries_in(store + "/fuzz-inflight") == 0);
}
