// `{}` behaves like the file it stands for (issue 26, point 3): an exec
// command's payload is a file under the input's own name in the task's
// private /tmp (/tmp/pillbox-input/NAME), with GNU parallel's replacement
// strings and $PILLBOX_KEY (shared/task_input.h). Real Python scripts in a
// user's project, run from its parent directory as a user would; the box's
// side of it (one file, nothing of the slot's last task, hostile keys) on
// real tasks in both launch modes.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "shared/task_input.h"
#include "tests/e2e/support.h"

namespace {

const char* const kPython = e2e::kPython3;

// A contact-export parser that dispatches on the extension, as the issue's
// user wrote it: with /proc/self/fd/3 it saw none, and printed nothing.
const char* const kDispatcher = R"py(import json
import os
import pathlib
import sys

path, name, stem_path, stem, key = sys.argv[1:6]
suffix = pathlib.Path(path).resolve().suffix
with open(path) as f:
    text = f.read()
if suffix == ".csv":
    rows = [line.split(",") for line in text.splitlines()]
elif suffix == ".json":
    rows = json.loads(text)
elif suffix == ".rec":
    rows = [dict(kv.split("=", 1) for kv in text.split())]
else:
    sys.exit("unknown format: " + repr(suffix))
print(json.dumps({"rows": rows, "name": name, "stem": stem, "stem_path": stem_path,
                  "key": key, "env_key": os.environ.get("PILLBOX_KEY"),
                  "dir": sorted(os.listdir(os.path.dirname(path)))}, sort_keys=True))
)py";

// Whether tasks here get a private /tmp, where the payload's file lives
// under its own name: a host that refuses mount namespaces gives them none
// (then {} is fd 3, which the last test checks). Asked once, of pillbox.
bool private_tmp_here() {
  static const bool here = [] {
    const auto r = e2e::run_pillbox({"run", "--no-store", "--json", "-", "--", "/bin/sh", "-c", "printf %s \"$1\"", "sh",
                                     "{}"},
                                    e2e::task_line("probe.txt", "x"));
    return r.records.size() == 1 && r.records[0]["output"] == std::string(pillbox::kPayloadDir) + "/probe.txt";
  }();
  return here;
}

// The tests' preconditions, with "skipped: why" when the host lacks one.
bool have(bool python) {
  if (python && !e2e::have_python3()) return false;
  if (private_tmp_here()) return true;
  MESSAGE("skipped: tasks get no private /tmp on this host (no mount namespace), so no payload file by name");
  return false;
}

using e2e::Project;

}  // namespace

TEST_CASE("{} is a file under the input's own name: a script that dispatches on the extension works") {
  if (!have(true)) return;
  Project project;
  project.dir.write("parse_contacts.py", kDispatcher);
  REQUIRE(::mkdir(project.dir.file("exports").c_str(), 0755) == 0);
  project.dir.write("exports/contacts-011.csv", "ann,1990-01-02\nbob,1991-02-03\n");
  project.dir.write("exports/contacts-012.json", R"([{"name": "cy"}])");
  project.dir.write("exports/contacts-013.rec", "name=dee born=1993-04-05\n");
  const std::map<std::string, std::string> rows = {
      {"contacts-011.csv", R"([["ann", "1990-01-02"], ["bob", "1991-02-03"]])"},
      {"contacts-012.json", R"([{"name": "cy"}])"},
      {"contacts-013.rec", R"([{"born": "1993-04-05", "name": "dee"}])"},
  };
  for (const std::string mode : {"zygote", "spawn"}) {
    CAPTURE(mode);
    e2e::TempDir store;
    const auto run = e2e::pillbox_in(
        project.parent, {"run", "--store", store.path() + "/s", "--mode", mode, "--json", project.name + "/exports",
                         "--", kPython, project.name + "/parse_contacts.py", "{}", "{/}", "{.}", "{/.}", "{key}"});
    INFO(run.describe());
    REQUIRE(run.exit_code == 0);
    REQUIRE(run.records.size() == 3);
    for (const auto& [file, expected_rows] : rows) {
      const std::string key = project.name + "/exports/" + file;
      const auto& rec = run.record(key);
      REQUIRE(rec["kind"] == "ok");
      const auto out = nlohmann::json::parse(rec["output"].get<std::string>());
      const std::string stem = file.substr(0, file.rfind('.'));
      CHECK(out["rows"] == nlohmann::json::parse(expected_rows));
      CHECK(out["name"] == file);
      CHECK(out["stem"] == stem);
      CHECK(out["stem_path"] == std::string(pillbox::kPayloadDir) + "/" + stem);
      CHECK(out["key"] == key);
      CHECK(out["env_key"] == key);
      // The directory holds the task's own file and nothing else.
      CHECK(out["dir"] == nlohmann::json::array({file}));
    }
    CHECK(run.err.find("no private /tmp") == std::string::npos);
  }
}

TEST_CASE("a script that names its input in its message: one bug is one fingerprint, whatever file it met") {
  if (!have(true)) return;
  Project project;
  // The same raise site, told about the file in three ways.
  project.dir.write("parse_dates.py", R"py(import os
import sys


def parse_date(path, text):
    year, month, day = text.split("-")
    if not 1 <= int(month) <= 12:
        raise ValueError("%s: month out of range in %s (%s)" % (
            os.path.basename(path), path, os.environ["PILLBOX_KEY"]))
    return text


with open(sys.argv[1]) as f:
    print(parse_date(sys.argv[1], f.read().strip()))
)py");
  REQUIRE(::mkdir(project.dir.file("in").c_str(), 0755) == 0);
  for (const std::string name : {"alice.txt", "bob-2.txt", "exported data.txt"}) project.dir.write("in/" + name, "1990-13-01\n");
  project.dir.write("in/good.txt", "1990-01-01\n");
  e2e::TempDir store;
  const auto run = e2e::pillbox_in(project.parent, {"run", "--store", store.path() + "/s", "--max-attempts", "1", "--json",
                                                    project.name + "/in", "--", kPython,
                                                    project.name + "/parse_dates.py", "{}"});
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  std::set<std::string> fingerprints;
  for (const auto& rec : run.records) {
    if (rec["kind"] == "ok") continue;
    CHECK(rec["kind"] == "handler-error");
    fingerprints.insert(rec["fingerprint"].get<std::string>());
    // What is shown keeps the names: only the hashed text is masked.
    const std::string key = rec["key"];
    CHECK(rec["message"].get<std::string>().find(pillbox::payload_file_name(key) + ": month out of range") !=
          std::string::npos);
  }
  CHECK(run.count_kind("ok") == 1);
  CHECK(fingerprints.size() == 1);
}

TEST_CASE("the payload dir holds one file, the task's own, whatever the slot's previous task did there") {
  if (!have(false)) return;
  // jobs 1: every task runs in the one slot after the last. Each lists the
  // directory, tries to add a file (ENOSPC: it holds one inode), reads its
  // payload, replaces it with a file of another name, and leaves that.
  e2e::TempDir dir;
  const std::string script = R"sh(d=/tmp/pillbox-input
ls -A "$d" | tr '\n' ' '
echo; echo extra > "$d/second" 2>/dev/null && echo WROTE-SECOND
mkdir "$d/sub" 2>/dev/null && echo MADE-DIR
cat "$1"; echo
rm -f "$1" && echo other > "$d/leftover" && echo REPLACED
)sh";
  std::string lines;
  for (int i = 0; i < 6; ++i) lines += e2e::task_line("batch/task-" + std::to_string(i) + ".dat", "payload " + std::to_string(i));
  for (const std::string mode : {"zygote", "spawn"}) {
    CAPTURE(mode);
    const auto run = e2e::run_pillbox({"run", "--store", dir.path() + "/" + mode, "--mode", mode, "--jobs", "1",
                                       "--json", "-", "--", "/bin/sh", "-c", script, "sh", "{}"},
                                      lines);
    INFO(run.describe());
    REQUIRE(run.exit_code == 0);
    REQUIRE(run.records.size() == 6);
    for (int i = 0; i < 6; ++i) {
      const std::string n = std::to_string(i);
      const auto& rec = run.record("batch/task-" + n + ".dat");
      CHECK(rec["output"] == "task-" + n + ".dat \npayload " + n + "\nREPLACED\n");
    }
  }
}

TEST_CASE("a payload larger than the policy's tmp is still a file, byte for byte") {
  if (!have(false)) return;
  // tmp = 1M: /tmp holds 1 MiB, the payload's directory the payload.
  e2e::TempDir dir;
  const std::string policy = e2e::exec_policy_with(dir, "tmp = 64M", "tmp = 1M");
  std::string payload;
  for (std::size_t i = 0; payload.size() < (5u << 20); ++i) payload += "line " + std::to_string(i) + "\n";
  const std::string input = dir.write("big.log", payload);
  const auto run = e2e::run_pillbox({"run", "--store", dir.path() + "/s", "--policy", policy, "--json", input, "--",
                                     "/bin/sh", "-c", "sha256sum < \"$1\" | cut -d' ' -f1; head -c 2000000 /dev/zero > /tmp/fill 2>&1 || echo TMP-FULL", "sh", "{}"});
  INFO(run.describe());
  REQUIRE(run.exit_code == 0);
  CHECK(run.only_record()["output"] == pillbox::sha256_hex(payload) + "\nTMP-FULL\n");
}

TEST_CASE("hostile keys name an inert file inside the payload dir, or 'payload'; {key} is never expanded twice") {
  if (!have(false)) return;
  e2e::TempDir dir;
  const std::map<std::string, std::string> expected_name = {
      {"../../etc/passwd", "passwd"}, {".", "payload"}, {"dir/", "payload"}, {"{}", "__"}, {"...", "payload"},
      {"a b;$(id).csv", "a_b___id_.csv"}, {std::string(300, 'k'), "payload"}, {"-rf", "_rf"},
  };
  std::string lines;
  for (const auto& [key, name] : expected_name) lines += e2e::task_line(key, "x");
  const auto run = e2e::run_pillbox(
      {"run", "--store", dir.path() + "/s", "--json", "-", "--", "/bin/sh", "-c",
       "printf '%s|%s|%s|%s' \"$1\" \"$2\" \"$3\" \"$PILLBOX_KEY\"; ls -A /tmp/pillbox-input | wc -l", "sh", "{}", "{/}",
       "{key}"},
      lines);
  INFO(run.describe());
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.records.size() == expected_name.size());
  for (const auto& entry : expected_name) {
    const std::string& key = entry.first;
    const std::string& name = entry.second;
    CAPTURE(key);  // not a structured binding: clang 14 captures none
    const std::string path = std::string(pillbox::kPayloadDir) + "/" + name;
    CHECK(run.record(key)["output"] == path + "|" + name + "|" + key + "|" + key + "1\n");
  }
}

TEST_CASE("a key over the limit is an input error, not a task") {
  e2e::TempDir dir;
  const std::string long_key(pillbox::kMaxTaskKeyBytes + 1, 'k');
  const auto run = e2e::run_pillbox({"run", "--store", dir.path() + "/s", "--json", "-", "--", "/bin/cat", "{}"},
                                    e2e::task_line(long_key, "x") + e2e::task_line("short", "y"));
  INFO(run.describe());
  CHECK(run.record("short")["output"] == "y");
  CHECK(run.err.find("\"key\" is " + std::to_string(long_key.size()) + " bytes, over the limit of 65536") !=
        std::string::npos);
  CHECK(run.records.size() == 1);
}

TEST_CASE("without a private /tmp, {} is the memory file on fd 3, and the run says so") {
  e2e::TempDir dir;
  const std::string policy = e2e::exec_policy_with(dir, "tmp = 64M", "tmp = none");
  const auto run = e2e::run_pillbox({"run", "--store", dir.path() + "/s", "--policy", policy, "--json", "-", "--",
                                     "/bin/sh", "-c", "printf '%s|%s|' \"$1\" \"$2\"; cat \"$1\"", "sh", "{}", "{/}"},
                                    e2e::task_line("in/a.csv", "ann,1\n"));
  INFO(run.describe());
  REQUIRE(run.exit_code == 0);
  CHECK(run.only_record()["output"] == std::string(pillbox::kPayloadFdPath) + "|a.csv|ann,1\n");
  CHECK(run.err.find("tasks get no private /tmp here (the policy has `tmp = none`), so {} is /proc/self/fd/3") !=
        std::string::npos);
}

TEST_CASE("a key cannot run code through {} in a shell string, as the docs use it") {
  if (!have(false)) return;
  // {} was always one inert word; a file name from a hostile key must stay one.
  e2e::TempDir dir;
  const auto run = e2e::run_pillbox({"run", "--store", dir.path() + "/s", "--json", "-", "--", "/bin/sh", "-c",
                                     "wc -c < {}; echo {/} {.}"},
                                    e2e::task_line("a;echo INJECTED-$(id -u);#.csv", "abc") +
                                        e2e::task_line("x/`touch pwned`.csv", "de"));
  INFO(run.describe());
  REQUIRE(run.exit_code == 0);
  CHECK(run.record("a;echo INJECTED-$(id -u);#.csv")["output"] ==
        "3\na_echo_INJECTED-__id_-u___.csv /tmp/pillbox-input/a_echo_INJECTED-__id_-u___\n");
  CHECK(run.record("x/`touch pwned`.csv")["output"] == "2\n_touch_pwned_.csv /tmp/pillbox-input/_touch_pwned_\n");
}

TEST_CASE("a key with a NUL byte is an input error: no argument or variable can carry it") {
  e2e::TempDir dir;
  const auto run = e2e::run_pillbox({"run", "--store", dir.path() + "/s", "--json", "-", "--", "/bin/cat"},
                                    "{\"key\":\"x\\u0000y\",\"payload\":\"a\"}\n" + e2e::task_line("ok", "b"));
  INFO(run.describe());
  CHECK(run.exit_code == 2);
  CHECK(run.records.size() == 1);
  CHECK(run.err.find("holds a NUL byte") != std::string::npos);
}

TEST_CASE("a Python script that is itself the payload: one bug, one fingerprint, with or without a private /tmp") {
  if (!have(true)) return;
  e2e::TempDir dir;
  REQUIRE(::mkdir(dir.file("pyin").c_str(), 0755) == 0);
  for (const char* name : {"alpha.py", "beta.py", "gamma.txt"}) dir.write(std::string("pyin/") + name, "def f():\n    return 1 / 0\n\n\nf()\n");
  const std::string no_tmp = e2e::exec_policy_with(dir, "tmp = 64M", "tmp = none");
  std::set<std::string> fingerprints;
  for (const std::string& policy : {std::string("exec"), no_tmp}) {
    CAPTURE(policy);
    const auto run = e2e::run_pillbox({"run", "--store", dir.path() + "/s-" + std::to_string(fingerprints.size()),
                                       "--policy", policy, "--max-attempts", "1", "--json", dir.file("pyin"), "--",
                                       kPython, "{}"});
    INFO(run.describe());
    REQUIRE(run.exit_code == 1);
    REQUIRE(run.records.size() == 3);
    for (const auto& rec : run.records) {
      fingerprints.insert(rec["fingerprint"].get<std::string>());
      CHECK(rec["crash_state"] == nlohmann::json::array({"ZeroDivisionError", "f (<payload>)", "<module> (<payload>)"}));
    }
  }
  CHECK(fingerprints.size() == 1);
}

TEST_CASE("a shared path in the payload dir is refused before anything runs") {
  if (!have(false)) return;
  e2e::TempDir dir;
  const auto run = e2e::run_pillbox({"run", "--store", dir.path() + "/s", "--share", "/tmp/pillbox-input/tools", "-",
                                     "--", "/bin/cat", "{}"},
                                    e2e::task_line("k", "x"));
  INFO(run.describe());
  CHECK(run.exit_code == 3);
  CHECK(run.records.empty());
  CHECK(run.err.find("lies in /tmp/pillbox-input, where each task finds its payload's file") != std::string::npos);
}

// The same fingerprint too: the handler's identity does not depend on where
// the command was started (issue 26, point 2), and the bundle runs the
// script by its absolute path, from the bundle's directory.
TEST_CASE("a bundle's reproduce.sh gives its script the record's key and file name: the same failure and fingerprint") {
  if (!have(true)) return;
  Project project;
  // Reads its input, then fails on .csv inputs only, naming the file.
  project.dir.write("by_ext.py", R"py(import os
import sys

open(sys.argv[1]).read()
if sys.argv[1].endswith(".csv"):
    raise ValueError("cannot read %s yet" % os.path.basename(sys.argv[1]))
print("ok")
)py");
  REQUIRE(::mkdir(project.dir.file("in").c_str(), 0755) == 0);
  project.dir.write("in/contacts-011.csv", "ann,1\n");
  e2e::TempDir store;
  const std::string s = store.path() + "/s";
  const auto run = e2e::pillbox_in(project.parent, {"run", "--store", s, "--max-attempts", "1", "--json",
                                                    project.name + "/in", "--", kPython, project.name + "/by_ext.py", "{}"});
  INFO(run.describe());
  REQUIRE(run.exit_code == 1);
  REQUIRE(run.only_record()["kind"] == "handler-error");
  const std::string bundle = store.path() + "/bundle";
  const auto exported = e2e::run_pillbox({"quarantine", "export", "1", "--bundle", "-o", bundle, "--store", s});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);
  const auto again = e2e::run_command(bundle + "/reproduce.sh", {}, "", {{"PILLBOX", e2e::pillbox_binary()}});
  INFO(again.describe());
  const auto line = nlohmann::json::parse(again.out.substr(0, again.out.find('\n')));
  CHECK(line["kind"] == "handler-error");
  CHECK(line["message"] == "exit code 1: ValueError: cannot read contacts-011.csv yet");
  CHECK(line["key"] == project.name + "/in/contacts-011.csv");
  CHECK(line["fingerprint"] == run.only_record()["fingerprint"]);
}
