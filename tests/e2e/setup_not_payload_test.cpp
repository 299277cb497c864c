// Setup failures are never the payload's fault: a command the task's uid
// cannot run (in a 0700 directory, behind a version-manager shim whose real
// program is under /root, an argument file it cannot read, an interpreter
// that is not in the task's PATH) stops the run before anything runs, with
// exit 3 and a message naming the missing permission, instead of failing
// every good payload the same way and quarantining them.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

const char* const kModes[] = {"zygote", "spawn"};

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Runs the command over one good payload with a store; checks the run was
// refused as a setup error, with nothing run and nothing recorded. Returns
// the error line.
std::string refused(const std::string& mode, const std::vector<std::string>& command,
                    const std::map<std::string, std::string>& env = {}) {
  e2e::TempDir dir;
  const std::string input = dir.write("good", "a perfectly good payload\n");
  const std::string store = dir.path() + "/store";
  std::vector<std::string> args{"run", "--json", "--mode", mode, "--store", store, input, "--"};
  args.insert(args.end(), command.begin(), command.end());
  const auto r = run_pillbox(args, "", env);
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK(r.records.empty());
  const auto lines = r.err_lines();
  REQUIRE(lines.size() == 1);
  CHECK(contains(lines[0], "pillbox run: setup error: "));
  if (std::filesystem::exists(store + "/pillbox.db")) {
    CHECK(e2e::sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == 0);
  }
  return lines[0];
}

}  // namespace

TEST_CASE("a command in a 0700 directory: exit 3 before anything runs, naming the directory") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: only root runs tasks as other uids");
    return;
  }
  e2e::TempDir hidden(0700);
  const std::string tool = hidden.write("tool", e2e::read_file("/bin/cat"));
  std::filesystem::permissions(tool, std::filesystem::perms(0755));
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const std::string line = refused(mode, {tool});
    CHECK_MESSAGE(contains(line, "may not execute " + tool + ", the command: directory " + hidden.path() +
                                     " is mode 0700, owner root"),
                  line);
    CHECK_MESSAGE(contains(line, "pillbox never runs a task as root"), line);
  }
}

TEST_CASE("a shim whose exec line runs a program in a 0700 directory: exit 3 naming that program") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: only root runs tasks as other uids");
    return;
  }
  e2e::TempDir hidden(0700);
  const std::string real = hidden.write("python3", e2e::read_file("/bin/cat"));
  std::filesystem::permissions(real, std::filesystem::perms(0755));
  e2e::TempDir shims;  // 0755, like /usr/local/bin: the shim itself is reachable
  const std::string shim = shims.write("python3", "#!/bin/sh\nset -e\nprogram=\"${0##*/}\"\nexec \"" + real +
                                                      "\" \"$@\"\n");
  std::filesystem::permissions(shim, std::filesystem::perms(0755));
  const std::string line = refused("zygote", {shim, "{}"});
  CHECK_MESSAGE(contains(line, "may not execute " + real + ", run by the script " + shim + " (its exec line)"), line);
}

TEST_CASE("the real pyenv shim under /root, as a user's PATH finds it: exit 3 naming /root") {
  const std::string shim = "/root/.pyenv/shims/python3";
  if (!e2e::is_root() || !std::filesystem::exists(shim)) {
    MESSAGE("skipped: needs root and pyenv's shims in /root/.pyenv (this host has "
            << (std::filesystem::exists(shim) ? "them" : "none") << ")");
    return;
  }
  const std::string line = refused("zygote", {"python3", "-c", "print(1)"}, {{"PATH", "/root/.pyenv/shims:/usr/bin:/bin"}});
  CHECK_MESSAGE(contains(line, shim + ", the command: directory /root is mode 07"), line);
}

TEST_CASE("an argument naming a file the task's uid cannot read: exit 3 naming it") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: only root runs tasks as other uids");
    return;
  }
  e2e::TempDir hidden(0700);
  const std::string script = hidden.write("parser.py", "print('parsed')\n");
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const std::string line = refused(mode, {"/bin/cat", script, "{}"});
    CHECK_MESSAGE(contains(line, "may not read " + script + ", argument 1 of the command: directory " + hidden.path()), line);
  }
}

TEST_CASE("a script whose #!/usr/bin/env interpreter is not in the task's PATH: exit 3, with or without root") {
  e2e::TempDir dir;
  const std::string script = dir.write("run.sh", "#!/usr/bin/env pillbox-no-such-interpreter\necho hi\n");
  std::filesystem::permissions(script, std::filesystem::perms(0755));
  const std::string line = refused("zygote", {script});
  CHECK_MESSAGE(contains(line, "pillbox-no-such-interpreter, the interpreter of " + script +
                                   ", run through env: it is not in the task's PATH"),
                line);
}

TEST_CASE("what a task's uid can run is not refused: a script with an env interpreter, a readable argument") {
  e2e::TempDir dir;
  const std::string script = dir.write("run.sh", "#!/usr/bin/env sh\ncat \"$1\"\n");
  std::filesystem::permissions(script, std::filesystem::perms(0755));
  const std::string input = dir.write("good", "fine\n");
  const auto r = run_pillbox({"run", "--json", "--no-store", input, "--", script, "{}"});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0]["output"] == "fine\n");
}
