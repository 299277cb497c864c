// Fix, replay, get the good results out (issue 26, point 1): when a replay
// resolves a record, from its own payload or from an operator's patch, the
// task is done: `tasks` says ok, `results` gives the replay's output (marked
// as coming from the replay or the patch), and a later `run --out` writes
// it, byte for byte what the fixed script prints. A user's project: a real
// Python parser in a directory tasks see, run from its parent directory.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/io/result_files.h"
#include "tests/e2e/support.h"

namespace {

const char* const kPython = "/usr/bin/python3";

// The parser, version 1: a month out of range raises ValueError in
// parse_date; a line without a comma raises in main.
const char* const kParserV1 = R"py(import json
import sys


def parse_date(text):
    year, month, day = text.split("-")
    if not 1 <= int(month) <= 12:
        raise ValueError("month out of range: " + text)
    return {"year": int(year), "month": int(month), "day": int(day)}


def main(path):
    people = []
    with open(path) as f:
        for line in f:
            name, born = line.rstrip("\n").split(",")
            people.append({"name": name, "born": parse_date(born)})
    print(json.dumps(people, sort_keys=True))


main(sys.argv[1])
)py";

// Version 2: the date bug fixed (an unknown month is kept as written).
std::string parser_v2() {
  std::string v2 = kParserV1;
  const std::string bug = "        raise ValueError(\"month out of range: \" + text)\n";
  v2.replace(v2.find(bug), bug.size(), "        return {\"as_written\": text}\n");
  return v2;
}

// What the script prints for `file`, run by the real interpreter outside pillbox.
std::string python_output(const std::string& script, const std::string& file) {
  const auto r = e2e::run_command(kPython, {script, file});
  INFO(r.describe());
  REQUIRE(r.exit_code == 0);
  return r.out;
}

}  // namespace

TEST_CASE("fix the script, replay, patch: tasks, results and run --out give the new outputs, byte for byte") {
  if (::access(kPython, X_OK) != 0) {
    MESSAGE("skipped: no /usr/bin/python3 (tools/setup.sh installs python3)");
    return;
  }
  e2e::TempDir store_dir;
  const std::string store = store_dir.path() + "/store";
  e2e::TempDir project(0755, e2e::host_dir_tasks_see());
  const std::string parent = project.path().substr(0, project.path().rfind('/'));
  const std::string name = project.path().substr(parent.size() + 1);
  const std::string script = project.write("parse_records.py", kParserV1);
  REQUIRE(::mkdir(project.file("data").c_str(), 0755) == 0);
  const std::map<std::string, std::string> inputs = {
      {"a.csv", "ann,1990-01-02\n"}, {"b.csv", "bob,1991-13-01\n"},   // b: the date bug
      {"c.csv", "cy,1992-03-04\n"},  {"d.csv", "dee,1993-00-09\n"},   // d: the date bug
      {"e.csv", "eve 1994-05-06\n"},                                 // e: a bad line, fixed by a patch
  };
  for (const auto& [file, text] : inputs) project.write("data/" + file, text);
  const std::vector<std::string> command = {"--", kPython, name + "/parse_records.py", "{}"};

  // 1. The first run, from the project's parent: three records.
  std::vector<std::string> first = {"run", "--store", store, "--max-attempts", "1", "--json", name + "/data"};
  first.insert(first.end(), command.begin(), command.end());
  const auto run = e2e::pillbox_in(parent, first);
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  // A task's input file (its key's last part), and who made its result in the end.
  const auto file_of = [](const std::string& key) { return key.substr(key.rfind('/') + 1); };
  const auto made_by = [](const std::string& file) -> std::string {
    return file == "e.csv" ? "patch" : file == "b.csv" || file == "d.csv" ? "replay" : "run";
  };
  std::map<std::string, std::string> key_of;  // input file -> its task's key
  for (const auto& j : run.records) key_of[file_of(j["key"])] = j["key"];
  REQUIRE(key_of.size() == 5);
  const std::string db = store + "/pillbox.db";
  REQUIRE(e2e::sql_int(db, "SELECT count(*) FROM quarantine") == 3);
  auto record_of = [&](const std::string& file) {
    return e2e::sql_rows(db, "SELECT id FROM quarantine WHERE key = '" + key_of.at(file) + "'").at(0).at(0);
  };

  // 2. The date bug fixed; every record replayed, from another directory: b
  // and d resolve, e fails again.
  project.write("parse_records.py", parser_v2());
  const auto replay = e2e::pillbox_in("/", {"quarantine", "replay", "--all", "--json", "--store", store});
  INFO(replay.describe());
  CHECK(replay.exit_code == 1);
  CHECK(e2e::sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'resolved'") == 2);

  // 3. e's line fixed by hand, and replayed: resolved from the patch.
  const std::string fixed_e = "eve,1994-05-06\n";
  const std::string patch_file = store_dir.write("e-fixed.csv", fixed_e);
  const auto patch = e2e::run_pillbox({"quarantine", "patch", record_of("e.csv"), "--payload-file", patch_file,
                                       "--note", "a comma lost by the exporter", "--store", store});
  INFO(patch.describe());
  REQUIRE(patch.exit_code == 0);
  const auto replay_e = e2e::run_pillbox({"quarantine", "replay", record_of("e.csv"), "--store", store});
  INFO(replay_e.describe());
  CHECK(replay_e.exit_code == 0);

  // What the fixed script prints, run by hand: the outputs to expect.
  const std::string v2 = project.file("parse_records.py");
  std::map<std::string, std::string> expected;
  for (const auto& [file, text] : inputs) {
    expected[file] = python_output(v2, file == "e.csv" ? patch_file : project.file("data/" + file));
  }
  CHECK(expected["b.csv"].find("\"as_written\": \"1991-13-01\"") != std::string::npos);

  // tasks: every task ok, and the resolved ones name their record.
  const auto tasks = e2e::run_pillbox({"tasks", "--json", "--store", store});
  INFO(tasks.describe());
  REQUIRE(tasks.records.size() == 5);
  for (const auto& t : tasks.records) {
    const std::string key = t["key"];
    INFO(key);
    CHECK(t["state"] == "ok");
    CHECK(t["result_from"] == made_by(file_of(key)));
  }
  CHECK(e2e::run_pillbox({"tasks", "--state", "quarantined", "--store", store}).err.find("0 tasks") == 0);
  const auto open = e2e::run_pillbox({"quarantine", "list", "--status", "quarantined", "--store", store});
  CHECK(open.err.find("0 records") != std::string::npos);

  // results: the replay's output, where it came from.
  const auto results = e2e::run_pillbox({"results", "--json", "--store", store});
  INFO(results.describe());
  REQUIRE(results.records.size() == 5);
  for (const auto& j : results.records) {
    const std::string key = j["key"];
    const std::string file = file_of(key);
    INFO(key);
    CHECK(j["output"] == expected.at(file));
    CHECK(j["from"] == made_by(file));
    if (made_by(file) != "run") CHECK(j["quarantine_id"] == std::stoll(record_of(file)));
  }
  const auto raw = e2e::run_pillbox({"results", "--store", store, key_of["b.csv"]});
  CHECK(raw.exit_code == 0);
  CHECK(raw.out == expected["b.csv"]);
  const auto listed = e2e::run_pillbox({"results", "--store", store});
  CHECK(listed.out.find("from patch 1 of record " + record_of("e.csv")) != std::string::npos);

  // run --out, from the parent again: every task done, every file the new output.
  const std::string final_dir = store_dir.file("final");
  std::vector<std::string> again = {"run", "--store", store, "-o", final_dir, name + "/data"};
  again.insert(again.end(), command.begin(), command.end());
  const auto rerun = e2e::pillbox_in(parent, again);
  INFO(rerun.describe());
  CHECK(rerun.exit_code == 0);
  CHECK(rerun.err.find("5 already ok and 0 already quarantined") != std::string::npos);
  CHECK(rerun.err.find("3 of the tasks already ok were resolved by `pillbox quarantine replay`") != std::string::npos);
  for (const auto& item : key_of) {
    const auto& file = item.first;  // clang 14 cannot capture a structured binding
    const auto& key = item.second;
    INFO(file);
    CHECK(e2e::read_file(final_dir + "/" + pillbox::result_file_name(key)) == expected[file]);
  }

  // A forced replay of b that fails again (the fix undone) takes it back:
  // its task is quarantined again, and the replay's result no longer stands.
  project.write("parse_records.py", kParserV1);
  const auto undo = e2e::run_pillbox({"quarantine", "replay", record_of("b.csv"), "--force", "--store", store});
  INFO(undo.describe());
  CHECK(undo.exit_code == 1);
  CHECK(e2e::sql_rows(db, "SELECT t.state FROM tasks t JOIN quarantine q ON q.task_id = t.id WHERE q.id = " +
                              record_of("b.csv")) == std::vector<std::vector<std::string>>{{"quarantined"}});
  const auto gone = e2e::run_pillbox({"results", "--store", store, key_of["b.csv"]});
  CHECK(gone.exit_code == 1);
  CHECK(gone.err.find("its task is quarantined") != std::string::npos);
  CHECK(e2e::sql_int(db, "SELECT count(*) FROM results") == 4);
}

TEST_CASE("replay -o names a result as run --out does: a key's second payload gets KEY~HASH.out, never the first's file") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);  // poison_corpus's markers, written by the sandbox user
  const std::string store = dir.path() + "/store";
  const std::string out = dir.file("out");
  // One key, two payloads: the first ok, the second crashes.
  const auto run = e2e::run_pillbox({"run", "--store", store, "--max-attempts", "1", "--no-breaker", "-o", out,
                                     "--writable", work.path(), "-", "--", e2e::fixture("poison_corpus"), work.path()},
                                    e2e::task_line("dup", "hello") + e2e::task_line("dup", "S bad"));
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  REQUIRE(e2e::read_file(out + "/dup.out") == "hello");
  const auto replay = e2e::run_pillbox(
      {"quarantine", "replay", "1", "--handler", "echo", "-o", out, "--store", store, "--writable", work.path()});
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  CHECK(e2e::read_file(out + "/dup.out") == "hello");  // the first payload's result, untouched
  const std::string second = out + "/dup~" + pillbox::sha256_hex("S bad").substr(0, 16) + ".out";
  CHECK(e2e::read_file(second) == "S bad");
  // A later run -o over both writes the same two files, the same bytes.
  const std::string again = dir.file("again");
  const auto rerun = e2e::run_pillbox({"run", "--store", store, "-o", again, "--writable", work.path(), "-", "--",
                                       e2e::fixture("poison_corpus"), work.path()},
                                      e2e::task_line("dup", "hello") + e2e::task_line("dup", "S bad"));
  INFO(rerun.describe());
  CHECK(rerun.exit_code == 0);
  CHECK(e2e::read_file(again + "/dup.out") == "hello");
  CHECK(e2e::read_file(again + "/dup~" + pillbox::sha256_hex("S bad").substr(0, 16) + ".out") == "S bad");
}
