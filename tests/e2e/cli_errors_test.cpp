// Usage and input errors: exit code 2 and exactly one line on stderr that
// says what is wrong; never a C++ exception, an abort or a stack trace.
#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

// Exit code 2, nothing on stdout, one line on stderr; returns that line.
std::string one_error_line(const e2e::RunResult& r) {
  INFO(r.describe());
  CHECK(r.term_signal == 0);
  CHECK(r.exit_code == 2);
  CHECK(r.out.empty());
  for (const char* bad : {"terminate called", "what():", "Aborted", "stack trace"}) {
    CHECK_MESSAGE(r.err.find(bad) == std::string::npos, "stderr contains '" << std::string(bad) << "'");
  }
  const auto lines = r.err_lines();
  CHECK(lines.size() == 1);
  CHECK((!r.err.empty() && r.err.back() == '\n'));
  return lines.empty() ? std::string() : lines.front();
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a malformed policy file: exit 2, one line naming the file and the line") {
  e2e::TempDir dir;
  const std::string input = dir.write("input", "hello");
  const std::string policy = dir.write("bad.policy", "[limits]\nwall = 10s\ncpu = fast\nmemory = 64M\n");

  SUBCASE("pillbox run --policy") {
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "echo", "--policy", policy, input}));
    CHECK_MESSAGE(contains(line, policy + ":3:"), line);
    CHECK_MESSAGE(contains(line, "fast"), line);
  }
  SUBCASE("pillbox policy check") {
    const std::string line = one_error_line(run_pillbox({"policy", "check", policy}));
    CHECK_MESSAGE(contains(line, policy + ":3:"), line);
  }
  SUBCASE("pillbox run --policy with a file that does not exist") {
    const std::string missing = dir.file("missing.policy");
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "echo", "--policy", missing, input}));
    CHECK_MESSAGE(contains(line, missing), line);
  }
}

TEST_CASE("a FIFO or a device named as a policy: exit 2 at once, one line, never a hang") {
  e2e::TempDir dir;
  const std::string input = dir.write("in", "x");
  const std::string fifo = dir.file("fifo.policy");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& policy : {fifo, std::string("/dev/zero")}) {
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "echo", "--policy", policy, input}, "", {}, {}, 60));
    CHECK_MESSAGE(contains(line, "not a regular file"), line);
  }
}

TEST_CASE("an unknown handler: exit 2, one line naming it and listing the built-ins") {
  e2e::TempDir dir;
  const std::string input = dir.write("input", "hello");
  for (const char* mode : {"zygote", "spawn"}) {
    CAPTURE(std::string(mode));
    const std::string line = one_error_line(run_pillbox({"run", "--mode", mode, "--handler", "nope", input}));
    CHECK_MESSAGE(contains(line, "'nope'"), line);
    for (const char* builtin : {"echo", "regex", "pdf-text", "inflate"}) CHECK_MESSAGE(contains(line, builtin), line);
  }
}

TEST_CASE("an input that cannot be read: exit 2, one line naming it") {
  e2e::TempDir dir;
  SUBCASE("a file that does not exist") {
    const std::string missing = dir.file("no-such-input");
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "echo", missing}));
    CHECK_MESSAGE(contains(line, missing), line);
  }
  SUBCASE("a path through a directory that does not exist") {
    const std::string missing = dir.file("no-such-dir/input");
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "echo", missing}));
    CHECK_MESSAGE(contains(line, missing), line);
  }
  SUBCASE("a file without read permission") {
    if (e2e::is_root()) {
      MESSAGE("skipped: unreadable-file case (root reads a mode-000 file anyway)");
      return;
    }
    const std::string locked = dir.write("locked", "secret");
    REQUIRE(::chmod(locked.c_str(), 0) == 0);
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "echo", locked}));
    CHECK_MESSAGE(contains(line, locked), line);
  }
}

TEST_CASE("bad option values: exit 2, one line") {
  e2e::TempDir dir;
  const std::string input = dir.write("input", "hello");
  SUBCASE("--jobs 0") {
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "echo", "--jobs", "0", input}));
    CHECK_MESSAGE(contains(line, "--jobs"), line);
  }
  SUBCASE("--timeout banana") {
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "echo", "--timeout", "banana", input}));
    CHECK_MESSAGE(contains(line, "banana"), line);
  }
  SUBCASE("--arg without '='") {
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "regex", "--arg", "pattern", input}));
    CHECK_MESSAGE(contains(line, "pattern"), line);
  }
  SUBCASE("an invalid regex pattern") {
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "regex", "--arg", "pattern=(", input}));
    CHECK_MESSAGE(contains(line, "pattern"), line);
  }
  SUBCASE("an unknown option") {
    const std::string line = one_error_line(run_pillbox({"run", "--handler", "echo", "--frobnicate", input}));
    CHECK_MESSAGE(contains(line, "--frobnicate"), line);
  }
}

// Issue 26, point 4: a typo'd script name waited the breaker's 5 minutes
// twice and left held tasks; now nothing runs.
TEST_CASE("an interpreter's script that does not exist: exit 2 before anything runs, with the nearest name") {
  const char* const python = e2e::kPython3;
  if (!e2e::have_python3()) return;
  const e2e::Project p;
  const e2e::TempDir& project = p.dir;
  const std::string& parent = p.parent;
  const std::string& name = p.name;
  project.write("parse_records.py", "import sys\nprint(open(sys.argv[1]).read().upper())\n");
  project.write("in.csv", "ann,1990-01-02\n");
  e2e::TempDir store;
  const std::string s = store.path() + "/s";
  const auto typo = e2e::pillbox_in(parent, {"run", "--store", s, name + "/in.csv", "--", python,
                                             name + "/parse_record.py", "{}"});
  const std::string line = one_error_line(typo);
  CHECK_MESSAGE(contains(line, "the script " + name + "/parse_record.py does not exist in " + parent +
                                   ", where the command line is read: did you mean " + name + "/parse_records.py?"),
                line);
  CHECK(::access((s + "/pillbox.db").c_str(), F_OK) != 0);  // nothing ran, nothing was kept
  const auto far = one_error_line(e2e::pillbox_in(parent, {"run", "--store", s, name + "/in.csv", "--", python,
                                                           name + "/totally_other.py", "{}"}));
  CHECK_MESSAGE(contains(far, "holds no file of a similar name"), far);
  // Not scripts: an inline program, a module, an option's value, the payload itself.
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{python, "-c", "import sys; print(open(sys.argv[1]).read())", "{}"},
        std::vector<std::string>{python, "-m", "json.tool", "--help"},
        std::vector<std::string>{python, "-W", "ignore", name + "/parse_records.py", "{}"}}) {
    std::vector<std::string> args = {"run", "--store", s, "--json", name + "/in.csv", "--"};
    args.insert(args.end(), command.begin(), command.end());
    const auto ok = e2e::pillbox_in(parent, args);
    INFO(ok.describe());
    CHECK(ok.exit_code == 0);
  }
}

TEST_CASE("an exec command that does not exist: exit 2, one line naming it") {
  e2e::TempDir dir;
  const std::string input = dir.write("input", "hello");
  SUBCASE("looked up in PATH") {
    const std::string line = one_error_line(run_pillbox({"run", input, "--", "no-such-command-pillbox-e2e"}));
    CHECK_MESSAGE(contains(line, "no-such-command-pillbox-e2e"), line);
  }
  SUBCASE("given as a path") {
    const std::string missing = dir.file("no-such-program");
    const std::string line = one_error_line(run_pillbox({"run", input, "--", missing}));
    CHECK_MESSAGE(contains(line, missing), line);
  }
}
