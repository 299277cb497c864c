// Records reproduce from any directory (issue 14, point 1): an exec record
// keeps the directory its command line was typed in; reproduce and minimize
// run it there (or, with a private /tmp, as `run` did) wherever the operator
// is; a recorded directory that is gone is a setup error, not "flaky"; and a
// run that fails differently says what it got: kind, fingerprint, message.
//
// The commands are `python3 parser.py {}` as a user types them, with python3
// looked up in PATH. As root the tasks run as pool uids, which cannot run a
// version manager's shim under /root (pillbox refuses it before anything
// runs: setup_not_payload_test), so these runs look python3 up in the PATH
// tasks get; as another user the test's own PATH, shims included.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/e2e/support.h"

using e2e::sql_int;
using e2e::sql_rows;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The PATH pillbox is given: one whose python3 the task's uid can run.
std::string python_search_path() {
  const char* own = std::getenv("PATH");
  return e2e::is_root() || own == nullptr ? "/usr/local/bin:/usr/bin:/bin" : own;
}

bool have_python() {
  const std::string path = python_search_path();
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = path.find(':', start);
    const std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && ::access((dir + "/python3").c_str(), X_OK) == 0) return true;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return false;
}

// `pillbox ARGS` run from `dir`, with the PATH above.
e2e::RunResult pillbox_in(const std::string& dir, const std::vector<std::string>& args) {
  std::vector<std::string> full{"-C", dir, e2e::pillbox_binary()};
  full.insert(full.end(), args.begin(), args.end());
  return e2e::run_command("/usr/bin/env", full, "", {{"PATH", python_search_path()}});
}

// Aborts (SIGABRT, a crash) on a payload holding BOOM; with `grammar`, only
// when the file grammar.txt, opened relative to its working directory, says
// so: a script that reads what lies beside it the way scripts do.
std::string parser_script(bool grammar) {
  std::string s = "import os, sys\n";
  if (grammar) s += "word = open('grammar.txt').read().strip()\n";
  else s += "word = 'BOOM'\n";
  s += "data = open(sys.argv[1], 'rb').read()\n"
       "if word.encode() in data:\n"
       "    os.abort()\n"
       "print('parsed', len(data))\n";
  return s;
}

// The shipped exec policy without the private /tmp: the command then runs in
// its working directory, as it would outside pillbox.
std::string policy_without_private_tmp(const e2e::TempDir& dir) {
  return e2e::exec_policy_with(dir, "tmp = 64M", "tmp = none");
}

// Runs `python3 parser.py {}` from `work` over `payload` into `store`;
// requires one record, id 1.
void record_crash(const std::string& work, const std::string& store, const std::string& payload_file,
                  const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"run", "--store", store, "--max-attempts", "1", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {payload_file, "--", "python3", "parser.py", "{}"});
  const auto run = pillbox_in(work, args);
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  REQUIRE(run.records.size() == 1);
  REQUIRE(run.records[0]["kind"] == "crash");
  REQUIRE(sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == 1);
}

// The common start of these tests: a parser.py in `work` (with grammar.txt
// saying BOOM when `grammar`), a payload in `state`, and its crash recorded
// into `store` from `work` (record 1). Tests take the members by structured
// binding.
struct RecordedCrash {
  e2e::TempDir work;
  e2e::TempDir state;
  std::string store = state.path() + "/store";
  std::string db = store + "/pillbox.db";
  std::string payload;

  void record(const std::string& payload_text, bool grammar, const std::vector<std::string>& extra = {}) {
    work.write("parser.py", parser_script(grammar));
    if (grammar) work.write("grammar.txt", "BOOM\n");
    payload = state.write("input", payload_text);
    record_crash(work.path(), store, payload, extra);
  }
};

// True, after saying the test is skipped, when no python3 can be run.
bool python_missing() {
  if (have_python()) return false;
  MESSAGE("skipped: no python3 in " << python_search_path());
  return true;
}

}  // namespace

TEST_CASE("python3 parser.py {} recorded in its directory: reproduce and minimize from / find the same crash") {
  if (python_missing()) return;
  RecordedCrash scene;
  scene.record("header..BOOM..trailer\n", false);
  auto& [work, state, store, db, payload] = scene;
  // The record keeps where it was made, and the command line made absolute
  // against it; the bare python3 as PATH found it.
  CHECK(sql_rows(db, "SELECT working_dir FROM quarantine") == std::vector<std::vector<std::string>>{{work.path()}});
  const auto argv = nlohmann::json::parse(sql_rows(db, "SELECT exec_argv FROM quarantine")[0][0]);
  REQUIRE(argv.size() == 3);
  CHECK(argv[0].get<std::string>().front() == '/');
  CHECK(argv[1] == work.path() + "/parser.py");
  CHECK(argv[2] == "{}");

  const auto r = pillbox_in("/", {"reproduce", "1", "--runs", "3", "--json", "--store", store});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0]["verdict"] == "reliable");
  CHECK(r.records[0]["matches"] == 3);

  const auto m = pillbox_in("/", {"minimize", "1", "--jobs", "2", "--json", "--store", store});
  INFO(m.describe());
  CHECK(m.exit_code == 0);
  REQUIRE(m.records.size() == 1);
  CHECK(m.records[0]["finished"] == true);
  CHECK(m.records[0]["minimized_size"] == 4);  // BOOM

  // show, --json and the bundle say where it ran.
  const auto shown = pillbox_in("/", {"quarantine", "show", "1", "--store", store});
  CHECK_MESSAGE(contains(shown.out, "  working dir  " + work.path() + "\n"), shown.out);
  const auto j = pillbox_in("/", {"quarantine", "show", "1", "--json", "--store", store});
  REQUIRE(j.records.size() == 1);
  CHECK(j.records[0]["working_dir"] == work.path());
  const auto listed = pillbox_in("/", {"quarantine", "list", "--json", "--store", store});
  REQUIRE(listed.records.size() == 1);
  CHECK(listed.records[0]["working_dir"] == work.path());
  const std::string bundle = state.path() + "/bundle";
  REQUIRE(pillbox_in("/", {"quarantine", "export", "1", "--bundle", "-o", bundle, "--store", store}).exit_code == 0);
  CHECK(nlohmann::json::parse(e2e::read_file(bundle + "/record.json"))["working_dir"] == work.path());
}

TEST_CASE("a script that opens a file relative to its directory, without a private /tmp: reproduce from / runs it there") {
  if (python_missing()) return;
  RecordedCrash scene;
  // The record's policy is a file of the operator's: reproduce and minimize
  // are told it again (a record never chooses its own policy: issue 25).
  const std::string policy = policy_without_private_tmp(scene.state);
  scene.record("xxBOOMyy", true, {"--policy", policy});
  auto& [work, state, store, db, payload] = scene;

  for (const std::string& from : {std::string("/"), state.path()}) {
    CAPTURE(from);
    const auto r = pillbox_in(from, {"reproduce", "1", "--runs", "2", "--json", "--store", store, "--policy", policy});
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    REQUIRE(r.records.size() == 1);
    CHECK(r.records[0]["verdict"] == "reliable");
    CHECK(r.records[0]["other_outcomes"].empty());
  }
  const auto m = pillbox_in("/", {"minimize", "1", "--json", "--store", store, "--policy", policy});
  INFO(m.describe());
  CHECK(m.exit_code == 0);
  REQUIRE(m.records.size() == 1);
  CHECK(m.records[0]["minimized_size"] == 4);
}

TEST_CASE("a reproduction that fails differently says what it got: kind, fingerprint and message; minimize too") {
  if (python_missing()) return;
  RecordedCrash scene;
  scene.record("xxBOOMyy", false);
  auto& [work, state, store, db, payload] = scene;
  const std::string fp = sql_rows(db, "SELECT fingerprint FROM quarantine")[0][0];
  // The parser changed since: it now refuses the input instead of crashing.
  work.write("parser.py", "import sys\nsys.exit('parser.py: unknown token near BOOM')\n");

  const auto r = pillbox_in("/", {"reproduce", "1", "--runs", "2", "--store", store});
  INFO(r.describe());
  CHECK(r.exit_code == 1);  // not reproduced in any run
  CHECK(contains(r.out, "record 1: flaky: 0 of 2 runs ended with " + fp));
  CHECK_MESSAGE(contains(r.out, "run 1: crash " + fp + " expected; got handler-error pb1-"), r.out);
  CHECK_MESSAGE(contains(r.out, ": exit code 1: parser.py: unknown token near BOOM (2 runs ended so)\n"), r.out);
  // The record has its working directory: no note about a missing one.
  CHECK(!contains(r.out, "no working directory"));
  // The audit trail keeps what it got, not only "flaky".
  const auto detail = sql_rows(db, "SELECT detail FROM audit WHERE action = 'reproduced'");
  REQUIRE(detail.size() == 1);
  CHECK_MESSAGE(contains(detail[0][0], "handler-error pb1-"), detail[0][0]);
  CHECK_MESSAGE(contains(detail[0][0], "x2 (run 1: exit code 1: parser.py: unknown token near BOOM)"), detail[0][0]);

  const auto j = pillbox_in("/", {"reproduce", "1", "--runs", "1", "--json", "--store", store});
  REQUIRE(j.records.size() == 1);
  REQUIRE(j.records[0]["other_outcomes"].size() == 1);
  const auto& other = j.records[0]["other_outcomes"][0];
  CHECK(other["kind"] == "handler-error");
  CHECK(other["first_run"] == 1);
  CHECK(other["message"] == "exit code 1: parser.py: unknown token near BOOM");

  const auto m = pillbox_in("/", {"minimize", "1", "--store", store});
  INFO(m.describe());
  CHECK(m.exit_code == 2);
  CHECK_MESSAGE(contains(m.err, "does not fail the same way now: crash " + fp +
                                    " expected; got handler-error pb1-"),
                m.err);
  CHECK_MESSAGE(contains(m.err, ": parser.py: unknown token near BOOM; see `pillbox reproduce`"), m.err);
}

TEST_CASE("a recorded working directory that is gone: reproduce and minimize stop with exit 3, nothing recorded") {
  if (python_missing()) return;
  e2e::TempDir scripts;
  e2e::TempDir state;
  const std::string store = state.path() + "/store";
  const std::string db = store + "/pillbox.db";
  scripts.write("parser.py", parser_script(false));
  const std::string work = scripts.path() + "/work";
  std::filesystem::create_directory(work);
  const std::string payload = state.write("input", "xxBOOMyy");
  {
    std::vector<std::string> args{"run", "--store", store, "--max-attempts", "1", payload, "--", "python3",
                                  "../parser.py", "{}"};
    const auto run = pillbox_in(work, args);
    INFO(run.describe());
    REQUIRE(run.exit_code == 1);
  }
  CHECK(sql_rows(db, "SELECT working_dir FROM quarantine") == std::vector<std::vector<std::string>>{{work}});
  std::filesystem::remove(work);

  const auto r = pillbox_in("/", {"reproduce", "1", "--runs", "2", "--store", store});
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK_MESSAGE(contains(r.err, "record 1: it cannot run here: its working directory " + work + " is gone"), r.err);
  CHECK(r.out.empty());
  // Not charged to the record: no verdict, no audit entry.
  CHECK(sql_int(db, "SELECT reproduce_runs FROM quarantine") == 0);
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE action = 'reproduced'") == 0);

  const auto m = pillbox_in("/", {"minimize", "1", "--store", store});
  INFO(m.describe());
  CHECK(m.exit_code == 3);
  CHECK_MESSAGE(contains(m.err, "its working directory " + work + " is gone"), m.err);
  CHECK(sql_int(db, "SELECT count(*) FROM minimize_state") == 0);
}

TEST_CASE("a record made before pillbox kept the working directory: as before from its directory; elsewhere a note says why") {
  if (python_missing()) return;
  RecordedCrash scene;
  // The record's policy is a file of the operator's: reproduce and minimize
  // are told it again (a record never chooses its own policy: issue 25).
  const std::string policy = policy_without_private_tmp(scene.state);
  scene.record("xxBOOMyy", true, {"--policy", policy});
  auto& [work, state, store, db, payload] = scene;
  // What the migration leaves in records made before it.
  e2e::sql_write(db, "UPDATE quarantine SET working_dir = ''");
  const auto shown = pillbox_in("/", {"quarantine", "show", "1", "--store", store});
  CHECK_MESSAGE(contains(shown.out, "  working dir  not recorded"), shown.out);

  const auto here = pillbox_in(work.path(), {"reproduce", "1", "--runs", "2", "--store", store, "--policy", policy});
  INFO(here.describe());
  CHECK(here.exit_code == 0);
  CHECK(contains(here.out, "reliable: 2 of 2 runs"));
  CHECK(!contains(here.out, "no working directory"));

  const auto elsewhere = pillbox_in(state.path(), {"reproduce", "1", "--runs", "2", "--store", store, "--policy", policy});
  INFO(elsewhere.describe());
  CHECK(elsewhere.exit_code == 1);
  CHECK_MESSAGE(contains(elsewhere.out, "got handler-error"), elsewhere.out);
  CHECK_MESSAGE(contains(elsewhere.out, "FileNotFoundError"), elsewhere.out);
  CHECK_MESSAGE(contains(elsewhere.out, "note: the record has no working directory (it was made by an older pillbox): "
                                        "its command ran here, in " + state.path()),
                elsewhere.out);
  CHECK_MESSAGE(contains(elsewhere.out, "run it again from the directory the record was made in"), elsewhere.out);
  const auto detail = sql_rows(db, "SELECT detail FROM audit WHERE action = 'reproduced' ORDER BY id DESC LIMIT 1");
  REQUIRE(detail.size() == 1);
  CHECK_MESSAGE(contains(detail[0][0], "the record has no working directory"), detail[0][0]);

  const auto m = pillbox_in(state.path(), {"minimize", "1", "--store", store, "--policy", policy});
  CHECK(m.exit_code == 2);
  CHECK_MESSAGE(contains(m.err, "the record has no working directory"), m.err);
}

TEST_CASE("the same script in two checkouts crashes with one fingerprint; the identity names it from the checkout's root") {
  if (python_missing()) return;
  e2e::TempDir a;
  e2e::TempDir b;
  e2e::TempDir state;
  // Two clones of one repository (issue 26, point 2: a checkout is a
  // directory with .git, .hg, .svn or .jj; elsewhere a script is named by
  // its absolute path).
  for (const e2e::TempDir* clone : {&a, &b}) REQUIRE(::mkdir(clone->file(".git").c_str(), 0755) == 0);
  a.write("parser.py", parser_script(false));
  b.write("parser.py", parser_script(false));
  const std::string payload = state.write("input", "header..BOOM..trailer\n");
  record_crash(a.path(), state.path() + "/store-a", payload);
  record_crash(b.path(), state.path() + "/store-b", payload);
  const auto fp_a = sql_rows(state.path() + "/store-a/pillbox.db", "SELECT fingerprint, handler_identity FROM quarantine");
  const auto fp_b = sql_rows(state.path() + "/store-b/pillbox.db", "SELECT fingerprint, handler_identity FROM quarantine");
  REQUIRE(fp_a.size() == 1);
  REQUIRE(fp_b.size() == 1);
  CHECK(fp_a[0][0] == fp_b[0][0]);
  // parser.py at the checkout's root is named from there, not as /tmp/...
  CHECK(contains(fp_a[0][1], " parser.py {}"));
  CHECK_FALSE(contains(fp_a[0][1], a.path()));
}

TEST_CASE("hostile record: a working directory only root may enter gives the task nothing of it, though it starts there") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: needs root (tasks run as pool uids only when pillbox is root)");
    return;
  }
  if (python_missing()) return;
  RecordedCrash scene;
  // The record's policy is a file of the operator's: reproduce and minimize
  // are told it again (a record never chooses its own policy: issue 25).
  const std::string policy = policy_without_private_tmp(scene.state);
  scene.record("header..BOOM..trailer\n", false, {"--policy", policy});
  auto& [work, state, store, db, payload] = scene;
  // A root-only directory with a secret, named by a forged record (a store
  // or a fleet's Redis is only text): the child chdirs there as root, then
  // drops to the task's uid, which may not search it.
  e2e::TempDir vault;
  vault.write("secret", "TOP-SECRET-42\n");
  REQUIRE(::chmod(vault.path().c_str(), 0700) == 0);
  // Named on the command line: refused before anything runs (the access check).
  const nlohmann::json named = {"/bin/cat", "secret", "{}"};
  e2e::sql_write(db, "UPDATE quarantine SET exec_argv = '" + named.dump() + "', working_dir = '" + vault.path() + "'");
  const auto refused = pillbox_in("/", {"reproduce", "1", "--runs", "1", "--json", "--store", store, "--policy", policy});
  INFO(refused.describe());
  CHECK(refused.exit_code == 3);
  CHECK_FALSE(contains(refused.out + refused.err, "TOP-SECRET-42"));
  // Not named: the task starts in the vault and tries relative paths itself.
  const nlohmann::json hidden = {"/bin/sh", "-c", "cat secret || cat ./secret", "sh", "{}"};
  e2e::sql_write(db, "UPDATE quarantine SET exec_argv = '" + hidden.dump() + "'");
  const auto r = pillbox_in("/", {"reproduce", "1", "--runs", "1", "--json", "--store", store, "--policy", policy});
  INFO(r.describe());
  CHECK(r.exit_code == 1);  // flaky: it failed differently, not ok
  REQUIRE(r.records.size() == 1);
  const auto& other = r.records[0]["other_outcomes"];
  REQUIRE(other.size() == 1);
  CHECK(other[0]["kind"] == "handler-error");  // cat could not read it: an ok run would have
  CHECK(contains(other[0]["message"].get<std::string>(), "Permission denied"));
  CHECK_FALSE(contains(r.out + r.err, "TOP-SECRET-42"));
  const auto shown = pillbox_in("/", {"quarantine", "show", "1", "--store", store});
  CHECK_FALSE(contains(shown.out, "TOP-SECRET-42"));
  CHECK(sql_int(db, "SELECT count(*) FROM audit WHERE detail LIKE '%TOP-SECRET%'") == 0);
}
