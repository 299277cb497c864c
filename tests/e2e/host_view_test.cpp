// What an exec task sees of the host's /tmp, and what pillbox does about a
// file a task needs but cannot see (issue 24, point 4): --share shows a
// directory read-only; a path the command line names that the task would
// not see is refused before anything runs (exit 3, naming --share); and
// payloads that all fail for a file of the host the task cannot see are
// held by the breaker, uncharged, never quarantined.
//
// Every directory here is made under /tmp on purpose: each task gets its own
// empty /tmp, so the host's is exactly what it cannot see unless told.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

const char* const kModes[] = {"zygote", "spawn"};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The tool: a script in a directory of /tmp that reads a data file
// beside it (found from $0, so the command line never names it).
struct ToolBesideData {
  e2e::TempDir dir;
  std::string tool;
  ToolBesideData() {
    dir.write("data.txt", "PREFIX\n");
    tool = dir.write("tool.sh", "#!/bin/sh\nd=$(dirname \"$0\")\nprefix=$(cat \"$d/data.txt\") || exit 1\n"
                                "printf '%s ' \"$prefix\"; cat\n");
    std::filesystem::permissions(tool, std::filesystem::perms(0755));
  }
};

std::string tasks(int n) {
  std::string lines;
  for (int i = 0; i < n; ++i) lines += e2e::task_line("doc-" + std::to_string(i), "payload " + std::to_string(i));
  return lines;
}

}  // namespace

TEST_CASE("a tool under /tmp that reads a file beside it: held, never poison, until --share shows the directory") {
  ToolBesideData t;
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    e2e::TempDir state;
    const std::string store = state.path() + "/store";
    const auto held = run_pillbox({"run", "--store", store, "--json", "--jobs", "2", "--mode", mode, "-", "--", t.tool},
                                  tasks(12));
    INFO(held.describe());
    CHECK(held.exit_code == 4);
    // Said once, with the file, why, and the option that fixes it.
    CHECK(contains(held.err, "could not see " + t.dir.file("data.txt") + ", which this host has"));
    CHECK(contains(held.err, "--share " + t.dir.path()));
    const std::string db = store + "/pillbox.db";
    CHECK(e2e::sql_int(db, "SELECT count(*) FROM quarantine") == 0);
    CHECK(e2e::sql_int(db, "SELECT count(*) FROM attempts WHERE charged = 1") == 0);
    for (const auto& r : held.records) {
      if (r.contains("verdict")) CHECK(r["verdict"] != "quarantined");
    }

    // The same run with the directory shared finishes the held tasks and the
    // ones never read, all ok, each with the data file's contents.
    const auto shared = run_pillbox(
        {"run", "--store", store, "--json", "--mode", mode, "--share", t.dir.path(), "-", "--", t.tool}, tasks(12));
    INFO(shared.describe());
    CHECK(shared.exit_code == 0);
    CHECK(shared.records.size() == 12);
    CHECK(shared.record("doc-3")["output"] == "PREFIX payload 3");
  }
}

TEST_CASE("--share is read-only, shows the host's directory live, and a policy file's share line is shown") {
  e2e::TempDir shared;
  // Task "a" reads the file and tries to write beside it; task "b" waits
  // until the host has written `go` into the shared directory after "a"
  // ended (a bind of the directory shows it; a copy or a bind of what was
  // there at the start would not, and "b" would run into its time limit),
  // then reads the file the host changed meanwhile.
  const std::string script = "case $(cat) in a) cat " + shared.file("seen.txt") + "; echo x > " + shared.file("new.txt") +
                             " 2>/dev/null && echo wrote || echo refused;; b) while [ ! -e " + shared.file("go") +
                             " ]; do sleep 0.02; done; cat " + shared.file("seen.txt") + ";; esac";
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    shared.write("seen.txt", "first");
    std::filesystem::remove(shared.file("go"));
    const auto r = run_pillbox({"run", "--json", "--no-store", "--jobs", "1", "--timeout", "20s", "--mode", mode,
                                "--share", shared.path(), "-", "--", "/bin/sh", "-c", script},
                               e2e::task_line("a", "a") + e2e::task_line("b", "b"), {},
                               [&](pid_t, std::size_t, std::string_view) {
                                 if (std::filesystem::exists(shared.file("go"))) return;
                                 shared.write("seen.txt", "second");
                                 shared.write("go", "");
                               });
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    CHECK(r.record("a")["output"] == "firstrefused\n");
    CHECK(r.record("b")["output"] == "second");
    CHECK_FALSE(std::filesystem::exists(shared.file("new.txt")));
  }
  const auto with = run_pillbox({"policy", "show", "exec", "--json"});
  // The shipped policy has no share line; a policy file with one shows it.
  e2e::TempDir dir;
  const std::string policy = e2e::exec_policy_with(dir, "[seccomp]", "share = " + shared.path() + "\n\n[seccomp]");
  const auto shown = run_pillbox({"policy", "show", policy, "--json"});
  INFO(shown.describe());
  CHECK(shown.exit_code == 0);
  CHECK(contains(shown.out, "\"share\":[\"" + shared.path() + "\"]"));
  CHECK_FALSE(contains(with.out, "\"share\""));
}

TEST_CASE("a path the command line names under /tmp that the task would not see is refused before anything runs") {
  e2e::TempDir host_dir;  // the host's, under /tmp: the task would write its own /tmp instead
  const std::string out = host_dir.file("out.txt");
  e2e::TempDir in;
  const std::string input = in.write("a.txt", "A");
  const auto refused = run_pillbox({"run", "--no-store", input, "--", "/bin/sh", "-c", "cat {} > " + out});
  INFO(refused.describe());
  CHECK(refused.exit_code == 3);
  CHECK(contains(refused.err, "names " + out));
  CHECK(contains(refused.err, "--share " + host_dir.path()));
  CHECK(contains(refused.err, "--writable " + host_dir.path()));
  CHECK(refused.err_lines().size() == 1);

  // A scratch path of the task's own (the host has no such directory) runs.
  const std::string scratch = "/tmp/pillbox-e2e-scratch-" + std::to_string(::getpid()) + "/x";
  const auto scratch_run = run_pillbox({"run", "--no-store", "--json", input, "--", "/bin/sh", "-c",
                                        "mkdir -p $(dirname " + scratch + ") && cat {} > " + scratch + " && cat " + scratch});
  INFO(scratch_run.describe());
  CHECK(scratch_run.exit_code == 0);
  CHECK(scratch_run.only_record()["output"] == "A");
  CHECK_FALSE(std::filesystem::exists(scratch));

  // --writable shows it, read-write where the host's permissions allow.
  ::chmod(host_dir.path().c_str(), 0777);
  const auto written = run_pillbox({"run", "--no-store", "--writable", host_dir.path(), input, "--", "/bin/sh", "-c",
                                    "cat {} > " + out});
  INFO(written.describe());
  CHECK(written.exit_code == 0);
  CHECK(e2e::read_file(out) == "A");
}

TEST_CASE("--share of a path this host does not have, or not absolute, is refused with what to do") {
  e2e::TempDir in;
  const std::string input = in.write("a.txt", "A");
  const std::string missing = in.path() + "/no-such-dir";
  const auto r = run_pillbox({"run", "--no-store", "--share", missing, input, "--", "/bin/cat"});
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK(contains(r.err, "the shared path " + missing));
  CHECK(contains(r.err, "does not exist"));
  e2e::check_usage_error({"run", "--no-store", "--share", "tmp/x", input, "--", "/bin/cat"}, "is not absolute");
  if (e2e::is_root()) {
    // A directory the tasks' uid may not enter is no use to them: said before the run.
    e2e::TempDir closed(0700);
    const auto c = run_pillbox({"run", "--no-store", "--share", closed.path(), input, "--", "/bin/cat"});
    INFO(c.describe());
    CHECK(c.exit_code == 3);
    CHECK(contains(c.err, "may not read and execute " + closed.path()));
  }
}
