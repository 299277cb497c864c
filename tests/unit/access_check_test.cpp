// What an exec command needs from the task's uid (supervisor/exec/access_check.h):
// found as root sees the file system, explained from the modes on the path.
#include "supervisor/exec/access_check.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

std::string write(const std::string& path, const std::string& text, mode_t mode) {
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
  return path;
}

const AccessNeed* find(const std::vector<AccessNeed>& needs, const std::string& path) {
  for (const auto& n : needs) {
    if (n.path == path) return &n;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("access needs: the command, its interpreter chain, a shim's exec line and argument files") {
  test::ScratchDir dir("access");
  const std::string real = write(dir.path + "/real", "#!/bin/sh\necho real\n", 0755);
  const std::string shim = write(dir.path + "/shim",
                                 "#!/usr/bin/env -S sh -e\n# a comment: exec /nowhere is not a line that runs\n"
                                 "  exec \"" + real + "\" \"$@\"\n",
                                 0755);
  const std::string data = write(dir.path + "/data.conf", "x", 0644);
  const auto needs = command_access_needs({shim, "--config=" + data, "{}", "--verbose", dir.path}, "/usr/bin:/bin");

  const AccessNeed* command = find(needs, shim);
  REQUIRE(command != nullptr);
  CHECK(command->mode == (R_OK | X_OK));  // a script is read by its interpreter
  CHECK(command->what == "the command");
  const AccessNeed* env = find(needs, "/usr/bin/env");
  REQUIRE(env != nullptr);
  CHECK(env->mode == X_OK);
  const AccessNeed* sh = find(needs, "/usr/bin/sh");
  REQUIRE(sh != nullptr);  // "-S" skipped, "sh" looked up in the task's PATH
  CHECK(sh->what.find("via env") != std::string::npos);
  const AccessNeed* exec_line = find(needs, real);
  REQUIRE(exec_line != nullptr);
  CHECK(exec_line->what == "run by the script " + shim + " (its exec line)");
  CHECK(find(needs, "/nowhere") == nullptr);
  const AccessNeed* conf = find(needs, data);
  REQUIRE(conf != nullptr);
  CHECK(conf->mode == R_OK);
  CHECK(conf->what == "argument 1 of the command");
  const AccessNeed* directory = find(needs, dir.path);
  REQUIRE(directory != nullptr);
  CHECK(directory->mode == (R_OK | X_OK));
}

TEST_CASE("access needs: an interpreter that does not exist is a need no uid meets") {
  test::ScratchDir dir("access");
  const std::string script = write(dir.path + "/s", "#!/opt/none/bin/python9\n", 0755);
  const auto needs = command_access_needs({script}, "/usr/bin:/bin");
  const AccessNeed* missing = find(needs, "/opt/none/bin/python9");
  REQUIRE(missing != nullptr);
  CHECK(missing->mode == 0);
  const Status s = check_access_as(needs, 65534, 65534);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.message() == "cannot run the command: /opt/none/bin/python9, the interpreter of " + script + ": it does not exist");
}

TEST_CASE("access needs: a script that names itself on thousands of exec lines is read once") {
  test::ScratchDir dir("access");
  const std::string self = dir.path + "/self";
  std::string text = "#!/bin/sh\nexit 0\n";
  for (int i = 0; i < 5000; ++i) text += "exec " + self + " \"$@\"\n";
  write(self, text, 0755);
  const auto started = std::chrono::steady_clock::now();
  const auto needs = command_access_needs({self}, "/usr/bin:/bin");
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));
  CHECK(needs.size() == 2);  // the script and /bin/sh
}

TEST_CASE("access needs: files on an exec line, FIFOs and interpreters that are not regular files") {
  test::ScratchDir dir("access");
  const std::string data = write(dir.path + "/data", "x", 0600);
  const std::string wrapper = write(dir.path + "/wrapper", "#!/bin/sh\nexec /bin/cat '" + data + "' \"$@\"\n", 0755);
  auto needs = command_access_needs({wrapper}, "/usr/bin:/bin");
  const AccessNeed* file = find(needs, data);
  REQUIRE(file != nullptr);
  CHECK(file->mode == R_OK);
  CHECK(file->what == "named by the exec line of the script " + wrapper);

  const std::string fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0666) == 0);
  needs = command_access_needs({"/bin/cat", fifo}, "/usr/bin:/bin");
  const Status s = check_access_as(needs, 65534, 65534);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.message() == "cannot run the command: " + fifo +
                           ", argument 1 of the command, is a FIFO: every task that opens it would wait for a writer");

  const std::string by_fifo = write(dir.path + "/by-fifo", "#!" + fifo + "\n", 0755);
  const Status t = check_access_as(command_access_needs({by_fifo}, "/usr/bin:/bin"), 65534, 65534);
  REQUIRE_FALSE(t.is_ok());
  CHECK(t.message() == "cannot run the command: " + fifo + ", the interpreter of " + by_fifo +
                           ": it is not a regular file, so it cannot be executed");
}

TEST_CASE("explain_denial names the first directory the uid cannot enter, else the file's mode") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: needs root (files owned by root, a chown to another group)");
    return;
  }
  test::ScratchDir dir("access");
  ::chmod(dir.path.c_str(), 0755);
  const std::string inner = dir.path + "/inner";
  ::mkdir(inner.c_str(), 0710);
  const std::string file = write(inner + "/tool", "x", 0700);
  CHECK(explain_denial(file, X_OK, 4242, 4242) == "directory " + inner + " is mode 0710, owner root: uid 4242 cannot enter it");
  // In the directory's group, the uid may enter; the file itself is 0700.
  ::chown(inner.c_str(), 0, 4242);
  CHECK(explain_denial(file, X_OK, 4242, 4242) == "file " + file + " is mode 0700, owner root: uid 4242 may not execute it");
  ::chmod(file.c_str(), 0755);
  CHECK(explain_denial(file, R_OK, 4242, 4242).find("access(2) refuses it") == 0);
}

}  // namespace pillbox
