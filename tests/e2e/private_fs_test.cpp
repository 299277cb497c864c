// Exec tasks cannot write the host (issue 11, point 2): under the shipped
// exec policy the host is read-only, and each task gets its own empty /tmp
// (its working directory), /var/tmp and /dev/shm, size-limited, gone when it
// ends; a later task never sees what an earlier one wrote. Host paths are
// writable only when bound on purpose (--writable, or `writable =`).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

const char* const kModes[] = {"zygote", "spawn"};

// Each JSON line is one task; the command is a shell script over its payload.
e2e::RunResult run_script(const std::string& mode, const std::string& tasks, const std::string& script,
                          std::vector<std::string> options = {}) {
  std::vector<std::string> args{"run", "--json", "--no-store", "--jobs", "1", "--mode", mode};
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), {"-", "--", "/bin/sh", "-c", script});
  return run_pillbox(args, tasks);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("an exec task writes only its own /tmp, /var/tmp, /dev/shm and working directory, and they die with it") {
  const std::string marker = "pillbox-private-fs-" + std::to_string(::getpid());
  // Writable by anyone on the host, and seen by tasks (not under /tmp): still
  // not writable by a task.
  e2e::TempDir open_dir(0777, e2e::host_dir_tasks_see());
  // "write": leave files everywhere it may; "look": report which it sees.
  const std::string script =
      "case $(cat) in write) "
      "  for d in /tmp /var/tmp /dev/shm .; do echo x > $d/" + marker + " && echo wrote $d; done; "
      "  echo x > " + open_dir.path() + "/" + marker + " 2>/dev/null || echo refused host; "
      "  echo x > /etc/" + marker + " 2>/dev/null || echo refused etc; "
      "  head -c 80000000 /dev/zero > /tmp/big 2>/dev/null || echo tmp full; pwd;; "
      "look) for d in /tmp /var/tmp /dev/shm .; do [ -e $d/" + marker + " ] && echo sees $d; done; echo looked;; "
      "esac";
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_script(mode, e2e::task_line("write", "write") + e2e::task_line("look", "look"), script);
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    const std::string wrote = r.record("write")["output"];
    for (const char* d : {"/tmp", "/var/tmp", "/dev/shm", "."}) CHECK_MESSAGE(contains(wrote, "wrote " + std::string(d) + "\n"), wrote);
    CHECK(contains(wrote, "refused host\n"));
    CHECK(contains(wrote, "refused etc\n"));
    CHECK(contains(wrote, "tmp full\n"));  // 64M, the shipped exec policy's tmp
    CHECK(contains(wrote, "\n/tmp\n"));    // its working directory
    // The next task of the same slot sees none of it.
    CHECK(r.record("look")["output"] == "looked\n");
    // Nor does the host.
    for (const char* d : {"/tmp", "/var/tmp", "/dev/shm"}) {
      CHECK_FALSE(std::filesystem::exists(std::string(d) + "/" + marker));
    }
    CHECK(std::filesystem::is_empty(open_dir.path()));
  }
}

TEST_CASE("a host path bound with --writable is writable, nothing else is; files the command names in /tmp stay visible") {
  e2e::TempDir out(0777);
  e2e::TempDir scripts;  // under /tmp: the private /tmp would hide it
  const std::string tool = scripts.write("tool.sh", "#!/bin/sh\necho from-tool > \"$1/result\"\ncat\n");
  std::filesystem::permissions(tool, std::filesystem::perms(0755));
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    std::filesystem::remove(out.file("result"));
    const auto r = run_pillbox({"run", "--json", "--no-store", "--mode", mode, "--writable", out.path(), "-", "--", tool,
                                out.path()},
                               e2e::task_line("k", "payload\n"));
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    REQUIRE(r.records.size() == 1);
    CHECK(r.records[0]["output"] == "payload\n");
    CHECK(e2e::read_file(out.file("result")) == "from-tool\n");
  }
  // The binding is part of the policy's identity: a record says what the task could write.
  const auto shown = run_pillbox({"policy", "show", "exec"});
  CHECK(contains(shown.out, "tmp = 64M"));
  CHECK(contains(shown.out, "filesystem = read-only"));
  CHECK_FALSE(contains(shown.out, "writable"));
}

TEST_CASE("--writable and writable = refuse paths that are not absolute or say '..'") {
  e2e::TempDir dir;
  const std::string input = dir.write("in", "x");
  const auto rel = run_pillbox({"run", "--no-store", "--writable", "out", input, "--", "/bin/cat"});
  CHECK(rel.exit_code == 2);
  CHECK(contains(rel.err, "--writable: writable path 'out' is not absolute"));
  const auto dots = run_pillbox({"run", "--no-store", "--writable", "/srv/../etc", input, "--", "/bin/cat"});
  CHECK(dots.exit_code == 2);
  CHECK(contains(dots.err, "has a '..' component"));
  const auto root = run_pillbox({"run", "--no-store", "--writable", "/", input, "--", "/bin/cat"});
  CHECK(root.exit_code == 2);
}

TEST_CASE("emptying a slot's /tmp for its next task never removes what a writable host path holds, nor follows links") {
  e2e::TempDir shared(0777);  // under /tmp, bound read-write into each task's private /tmp
  const std::string keep = shared.write("host-file", "the host's\n");
  ::chmod(keep.c_str(), 0666);
  // The first task leaves junk, a symlink to the writable path and one to
  // the host file; the second looks at what is left.
  const std::string script =
      "case $(cat) in first) echo j > /tmp/junk; mkdir -p /tmp/d/e; echo j > /tmp/d/e/f; "
      "ln -s " + shared.path() + " /tmp/link-to-dir; ln -s " + keep + " /tmp/link-to-file; echo done;; "
      "second) find /tmp -mindepth 1 -maxdepth 1 -uid $(id -u) -printf '%f '; echo; cat " + keep + ";; esac";
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_script(mode, e2e::task_line("first", "first") + e2e::task_line("second", "second"), script,
                              {"--writable", shared.path()});
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    CHECK(r.record("first")["output"] == "done\n");
    CHECK(r.record("second")["output"] == "\nthe host's\n");  // nothing left in /tmp but the bound path
    CHECK(e2e::read_file(keep) == "the host's\n");
  }
}

namespace {

// Runs `script` as two tasks of one slot: "first" leaves things behind
// (and says done), "second" looks for them. Checks that the second task ran
// ok and saw nothing the first wrote; returns what it saw.
std::string leave_then_look(const char* mode, const std::string& script) {
  const auto r = run_script(mode, e2e::task_line("first", "first") + e2e::task_line("second", "second"), script);
  INFO(r.describe());
  CHECK(r.record("first")["output"] == "done\n");
  CHECK(r.record("second")["kind"] == "ok");
  const std::string seen = r.record("second")["output"];
  CHECK_MESSAGE(seen.find("LEFT-BY-FIRST") == std::string::npos, seen);
  return seen;
}

}  // namespace

TEST_CASE("a task cannot leave anything for the next task of its slot, not even in a directory it made unwritable") {
  // The first task hides a file in a directory it then makes read-only (the
  // next task's cleanup runs as the same uid); the second looks for it.
  const std::string script =
      "case $(cat) in first) mkdir /tmp/d /dev/shm/d; echo LEFT-BY-FIRST > /tmp/d/x; echo LEFT-BY-FIRST > /dev/shm/d/x; "
      "chmod 0555 /tmp/d /dev/shm/d; chmod 0444 /tmp/d/x; echo done;; "
      "second) cat /tmp/d/x /dev/shm/d/x 2>/dev/null; ls -A /tmp /dev/shm | grep -v pillbox-e2e; echo looked;; esac";
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    (void)leave_then_look(mode, script);
  }
}

TEST_CASE("leftovers named like . and .., hidden names and dangling or looping links are removed for the next task") {
  // The slot's next task first asks whether each directory holds anything at
  // all (most tasks leave nothing): a check that skipped names beginning with
  // a dot, or looked at what a link points to, would be fooled here. (No
  // fifo: the exec policy denies mknod.)
  const std::string script =
      "case $(cat) in first) echo LEFT-BY-FIRST > /var/tmp/.x; mkdir /dev/shm/...; echo LEFT-BY-FIRST > /dev/shm/.../y; "
      "mkdir /tmp/..x; ln -s /nowhere /tmp/.link; ln -s /dev/shm /dev/shm/.loop; echo done;; "
      "second) cat /var/tmp/.x /dev/shm/.../y 2>/dev/null; ls -A /tmp /var/tmp /dev/shm | grep -v pillbox-e2e; "
      "echo looked;; esac";
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const std::string seen = leave_then_look(mode, script);
    for (const char* name : {".x", "...", "..x", ".link", ".loop"}) {
      CHECK_MESSAGE(seen.find(std::string("\n") + name + "\n") == std::string::npos, name << " left: " << seen);
    }
  }
}
