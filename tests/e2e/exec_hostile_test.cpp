// Exec mode (`pillbox run --json INPUT -- PROGRAM ARGS`) against hostile
// programs, in both launch modes, and a hostile stand-in for the sandbox
// binary that breaks the wire protocol: every ending is classified, nothing
// the task started outlives it, and the supervisor itself never falls over.
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

const char* const kModes[] = {"zygote", "spawn"};

// One exec-mode task: `payload` as the input file, `program` after "--".
e2e::RunResult run_exec(const std::string& mode, const std::string& payload, std::vector<std::string> program,
                        std::vector<std::string> options = {}) {
  e2e::TempDir dir;
  const std::string input = dir.write("payload", payload);
  std::vector<std::string> args{"run", "--json", "--mode", mode};
  args.insert(args.end(), options.begin(), options.end());
  args.push_back(input);
  args.push_back("--");
  args.insert(args.end(), program.begin(), program.end());
  return run_pillbox(args);
}

void check_no_crash_of_pillbox(const e2e::RunResult& r) {
  CHECK(r.term_signal == 0);
  for (const char* bad : {"terminate called", "what():", "Aborted", "stack trace", "Segmentation fault"}) {
    CHECK_MESSAGE(r.err.find(bad) == std::string::npos, "stderr contains '" << std::string(bad) << "'");
  }
}

// Processes (live or zombie) of `program` still on the host.
void check_none_left(const std::string& program) {
  const auto left = e2e::processes_of(program);
  CHECK_MESSAGE(left.empty(), left.size() << " process(es) of " << program << " remain:\n" << e2e::describe(left));
}

// Cleanup after a failed check_none_left, so one bug does not fail every test
// after it: zombies reparented to init cannot be waited for by this process,
// so this polls /proc (bounded).
void wait_until_gone(const std::string& program) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!e2e::processes_of(program).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

TEST_CASE("a null write in the program is a crash at parse_header (SIGSEGV)") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_exec(mode, "AAAA header that trips site A", {e2e::fixture("crash_sites")});
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    check_no_crash_of_pillbox(r);
    const auto& rec = r.only_record();
    CHECK(rec["kind"] == "crash");
    CHECK(rec["status"] == "failed");
    CHECK(rec["signal"] == "SIGSEGV");
    REQUIRE(rec["crash_state"].is_array());
    REQUIRE(!rec["crash_state"].empty());
    CHECK(rec["crash_state"][0] == "parse_header");
    CHECK(rec["fingerprint"].get<std::string>().rfind("pb1-", 0) == 0);
  }
}

TEST_CASE("a benign payload through the same program is ok with its exact output") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_exec(mode, "hello, exec mode\n", {e2e::fixture("crash_sites")});
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    const auto& rec = r.only_record();
    CHECK(rec["kind"] == "ok");
    CHECK(rec["output"] == "hello, exec mode\n");
    CHECK(rec["exit_code"] == 0);
  }
}

TEST_CASE("abort() is a crash with SIGABRT at check_invariant") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_exec(mode, "anything", {e2e::fixture("abort_program")});
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    check_no_crash_of_pillbox(r);
    const auto& rec = r.only_record();
    CHECK(rec["kind"] == "crash");
    CHECK(rec["signal"] == "SIGABRT");
    REQUIRE(!rec["crash_state"].empty());
    CHECK(rec["crash_state"][0] == "check_invariant");
  }
}

TEST_CASE("a program that never ends is a wall-timeout at the wall limit") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_exec(mode, "x", {e2e::fixture("sleep_forever")}, {"--timeout", "1s"});
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    check_no_crash_of_pillbox(r);
    const auto& rec = r.only_record();
    CHECK(rec["kind"] == "wall-timeout");
    CHECK(rec["signal"] == "SIGKILL");
    const long wall = rec["wall_ms"].get<long>();
    CHECK(wall >= 1000);
    CHECK(wall <= 3000);
    check_none_left(e2e::fixture("sleep_forever"));
  }
}

TEST_CASE("socket() under the exec policy is a seccomp-violation naming socket") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_exec(mode, "x", {e2e::fixture("open_socket")});
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    check_no_crash_of_pillbox(r);
    const auto& rec = r.only_record();
    CHECK(rec["kind"] == "seccomp-violation");
    CHECK(rec["syscall"] == "socket");
    // The kernel's listener named it and the task was killed for it (SIGSYS
    // is what a task raises itself: shared/seccomp_notify.h).
    CHECK(rec["signal"] == "SIGKILL");
    CHECK(rec["message"] == "denied syscall socket (reported by the kernel)");
  }
}

TEST_CASE("flooding stdout is output-limit") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_exec(mode, "x", {e2e::fixture("flood_stdout")});
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    check_no_crash_of_pillbox(r);
    CHECK(r.only_record()["kind"] == "output-limit");
    // The flood is not relayed anywhere.
    CHECK(r.out.size() < 64 * 1024);
    CHECK(r.err.size() < 64 * 1024);
  }
}

TEST_CASE("SIGKILL from outside is killed") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    e2e::TempDir dir(0777);  // the program runs as the sandbox user and writes its pid here
    const std::string pid_file = dir.file("pid");

    const int in = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    REQUIRE(in >= 0);
    REQUIRE(::inotify_add_watch(in, dir.path().c_str(), IN_MOVED_TO | IN_CLOSE_WRITE) >= 0);

    // The watcher kills the program once its pid file appears (written with a
    // rename, so it is complete when it appears), while pillbox runs here.
    std::atomic<pid_t> killed_pid{0};
    std::string watcher_error;
    const int stop = ::eventfd(0, EFD_CLOEXEC);  // pillbox has exited: stop watching
    REQUIRE(stop >= 0);
    std::thread watcher([&] {
      while (!std::filesystem::exists(pid_file)) {
        pollfd p[2] = {{in, POLLIN, 0}, {stop, POLLIN, 0}};
        if (::poll(p, 2, -1) < 0 && errno != EINTR) break;
        if (p[1].revents) {
          watcher_error = "pillbox finished before the pid file appeared";
          return;
        }
        char buf[4096];
        while (::read(in, buf, sizeof buf) > 0) {
        }
      }
      // No doctest assertions on this thread: failures go to watcher_error.
      // The pid in the file is the program's own view: inside the zygote's
      // PID namespace it is not a host pid. The file only says "ready"; the
      // host pid is found by the program's executable, and must be unique.
      const auto procs = e2e::processes_of(e2e::fixture("wait_for_kill"));
      if (procs.size() != 1) {
        watcher_error = "expected one wait_for_kill process, found " + e2e::describe(procs);
        return;
      }
      const pid_t pid = procs.front().pid;
      if (::kill(pid, SIGKILL) == 0) killed_pid = pid;
    });
    const auto r = run_exec(mode, "x", {e2e::fixture("wait_for_kill"), pid_file}, {"--timeout", "20s", "--writable", dir.path()});
    const std::uint64_t one = 1;
    (void)!::write(stop, &one, sizeof one);
    watcher.join();
    ::close(stop);
    ::close(in);
    INFO(r.describe());
    REQUIRE_MESSAGE(watcher_error.empty(), watcher_error);
    CHECK(killed_pid.load() > 0);
    CHECK(r.exit_code == 1);
    check_no_crash_of_pillbox(r);
    const auto& rec = r.only_record();
    CHECK(rec["kind"] == "killed");
    CHECK(rec["signal"] == "SIGKILL");
    CHECK(rec["wall_ms"].get<long>() < 15000);  // not the wall limit
  }
}

TEST_CASE("a child that breaks the wire protocol is a protocol-error (a sandbox-error before its payload), never a supervisor failure") {
  const std::string hostile = e2e::fixture("hostile_child");
  e2e::TempDir dir;
  const std::string input = dir.write("payload", "payload for a hostile child");
  for (const char* m : {"garbage", "oversized", "forged", "wrong-task", "silent", "flood", "not-zmtp"}) {
    CAPTURE(std::string(m));
    const auto r = run_pillbox({"run", "--json", "--mode", "spawn", "--handler", "echo", "--arg", std::string("mode=") + m,
                                "--timeout", "3s", input},
                               "", {{"PILLBOX_SANDBOX", hostile}});
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    check_no_crash_of_pillbox(r);
    const auto& rec = r.only_record();
    // Before its payload only pillbox's own runtime runs in a child: a
    // breach then is the sandbox's failure (retried, never quarantined);
    // after it, the child's (protocol-error).
    // (flood's first HELLO is a good one: the payload goes out before the
    // rest of the flood arrives.)
    const std::string mode(m);
    const bool after_payload = mode == "forged" || mode == "oversized" || mode == "flood";
    CHECK(rec["kind"] == std::string(after_payload ? "protocol-error" : "sandbox-error"));
    CHECK(rec["status"] == "failed");
    CHECK(!rec["message"].get<std::string>().empty());
    check_none_left(hostile);
  }
}

TEST_CASE("a killed or stopped fork server costs only the tasks running then; the run goes on") {
  // SIGSTOP: the zygote stops waiting for the server's answer after 10 s.
  for (int sig : {SIGKILL, SIGSTOP}) {
    CAPTURE(sig);
    e2e::TempDir dir;
    std::vector<std::string> args{"run", "--json", "--jobs", "2", "--timeout", "20s"};
    for (int i = 0; i < 30; ++i) args.push_back(dir.write("t" + std::to_string(i), std::to_string(i)));
    args.insert(args.end(), {"--", "/bin/sh", "-c", "sleep 0.1; cat"});
    // After the first result: kill the fork server of this run (found by its
    // name among this pillbox's descendants; other tests run beside this one).
    std::string killer_error;
    pid_t killed = 0;
    const auto r = e2e::run_pillbox(args, "", {}, [&](pid_t pillbox, std::size_t line_no, std::string_view) {
      if (line_no != 1) return;
      const auto procs = e2e::list_processes();
      auto descends_from_pillbox = [&](pid_t pid) {
        for (int hops = 0; pid > 1 && hops < 16; ++hops) {
          if (pid == pillbox) return true;
          const auto it = std::find_if(procs.begin(), procs.end(), [&](const e2e::ProcInfo& p) { return p.pid == pid; });
          if (it == procs.end()) return false;
          pid = it->ppid;
        }
        return false;
      };
      for (const auto& p : procs) {
        if (p.comm == "pillbox-forksrv" && descends_from_pillbox(p.pid)) {
          if (killed != 0) killer_error = "two fork servers under one pillbox";
          killed = p.pid;
        }
      }
      if (killed == 0) killer_error = "no fork server found: " + e2e::describe(procs);
      else if (::kill(killed, sig) != 0) killer_error = "kill failed";
    });
    INFO(r.describe());
    REQUIRE_MESSAGE(killer_error.empty(), killer_error);
    CHECK(killed != 0);
    check_no_crash_of_pillbox(r);
    REQUIRE(r.records.size() == 30);
    std::set<std::string> keys;
    for (const auto& rec : r.records) keys.insert(rec["key"].get<std::string>());
    CHECK(keys.size() == 30);  // each task once
    // At most the two tasks in flight are lost to it, as sandbox errors (not the payload's fault).
    CHECK(r.count_kind("ok") >= 28);
    CHECK(r.count_kind("ok") + r.count_kind("sandbox-error") == 30);
    bool warned = false;
    for (const auto& line : r.err_lines()) warned |= line.find("restarted the sandbox launcher") != std::string::npos;
    CHECK(warned);
  }
}

// The fork-bomb tests come last in the file: when one fails, its leftovers
// would make the tests after it fail too.
TEST_CASE("a fork bomb is contained and nothing of it survives the run") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const std::string bomb = e2e::fixture("fork_bomb");
    {
      const auto r = run_exec(mode, "x", {bomb}, {"--timeout", "3s"});
      INFO(r.describe());
      CHECK(r.exit_code == 1);
      check_no_crash_of_pillbox(r);
      const auto& rec = r.only_record();
      CHECK(rec["status"] == "failed");
      CHECK(rec["kind"] != "ok");
      CHECK(rec["kind"] != "sandbox-error");
      // Checked the moment pillbox has exited: no live process and no zombie of
      // the bomb (orphans reparented to init count too).
      check_none_left(bomb);
    }
    // Leftovers would still count against the sandbox user's process limit:
    // the next task must start normally.
    const auto next = run_exec(mode, "after the bomb", {e2e::fixture("crash_sites")});
    INFO(next.describe());
    CHECK(next.only_record()["kind"] == "ok");
    check_none_left(bomb);
    wait_until_gone(bomb);
  }
}

TEST_CASE("a fork bomb does not starve the tasks running beside it") {
  // Two bombs among innocent tasks, two at a time: with the shipped policies
  // each job slot has its own uid (uid_pool), so the bomb exhausts only its
  // own slot's RLIMIT_NPROC and its neighbours keep forking and exec'ing.
  std::string lines;
  for (int i = 0; i < 12; ++i) {
    const bool bomb = i == 0 || i == 5;
    // Innocent tasks fork a process of their own: where all slots share one
    // uid, the bomb's processes would make that fork fail.
    lines += "{\"key\": \"t" + std::to_string(i) + "\", \"payload\": \"" + (bomb ? "F" : "work ") + std::to_string(i) + "\"}\n";
  }
  const std::string program = e2e::fixture("fork_neighbours");
  const auto r = run_pillbox({"run", "--json", "--jobs", "2", "--timeout", "3s", "-", "--", program}, lines);
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  check_no_crash_of_pillbox(r);
  REQUIRE(r.records.size() == 12);
  for (const auto& rec : r.records) {
    const std::string key = rec["key"];
    if (key == "t0" || key == "t5") {
      CHECK(rec["kind"] != "ok");
    } else {
      CHECK_MESSAGE(rec["kind"] == "ok", key << ": " << rec.dump());
    }
  }
  check_none_left(program);
}
