// Ways out of the box that a hostile task tries, in both launch modes: each
// case is an attack a review found, kept as a test that failed before the
// fix (docs/security.md lists them).
#include <sys/eventfd.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <doctest/doctest.h>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "supervisor/io/shell_quote.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

const char* const kModes[] = {"zygote", "spawn"};

// One exec-mode task: `payload` as the input file, `program` after "--".
e2e::RunResult run_exec(const std::string& mode, std::vector<std::string> program,
                        std::vector<std::string> options = {}, const std::string& payload = "x",
                        const std::map<std::string, std::string>& env = {}) {
  e2e::TempDir dir;
  const std::string input = dir.write("payload", payload);
  std::vector<std::string> args{"run", "--json", "--no-store", "--mode", mode};
  args.insert(args.end(), options.begin(), options.end());
  args.push_back(input);
  args.push_back("--");
  args.insert(args.end(), program.begin(), program.end());
  return run_pillbox(args, "", env);
}

// Cleanup after a failed check, so one bug does not fail every test after it.
void kill_leftovers(const std::string& program) {
  for (const auto& p : e2e::processes_of(program)) ::kill(p.pid, SIGKILL);
}

}  // namespace

TEST_CASE("exec tasks cannot create namespaces: clone with namespace flags is denied, clone3 is ENOSYS") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    {
      const auto r = run_exec(mode, {e2e::fixture("new_namespaces"), "clone-ns"});
      INFO(r.describe());
      const auto& rec = r.only_record();
      CHECK(rec["kind"] == "seccomp-violation");
      CHECK(rec["syscall"] == "clone");
    }
    {
      const auto r = run_exec(mode, {e2e::fixture("new_namespaces"), "clone3-ns"});
      INFO(r.describe());
      const auto& rec = r.only_record();
      CHECK(rec["kind"] == "ok");
      CHECK(rec["output"] == "clone3-ns refused: ENOSYS\n");
    }
    {
      const auto r = run_exec(mode, {e2e::fixture("new_namespaces"), "unshare"});
      INFO(r.describe());
      const auto& rec = r.only_record();
      CHECK(rec["kind"] == "seccomp-violation");
      CHECK(rec["syscall"] == "unshare");
    }
    {
      // What ordinary programs do still works: glibc falls back from clone3 to clone.
      const auto r = run_exec(mode, {e2e::fixture("new_namespaces"), "ordinary"});
      INFO(r.describe());
      const auto& rec = r.only_record();
      CHECK(rec["kind"] == "ok");
      CHECK(rec["output"] == "fork, thread and posix_spawn work\n");
    }
    {
      // A real tool: util-linux unshare(1).
      const auto r = run_exec(mode, {"/usr/bin/unshare", "--user", "--map-root-user", "/bin/true"});
      INFO(r.describe());
      const auto& rec = r.only_record();
      CHECK(rec["kind"] == "seccomp-violation");
      CHECK(rec["syscall"] == "unshare");
    }
  }
}

TEST_CASE("nothing of the supervisor's environment reaches a child, in /proc/self/environ or on its stack") {
  const std::string secret = "pillbox-secret-5e1f0c2a9b";
  const std::string reversed(secret.rbegin(), secret.rend());
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    {
      // An in-process handler: the plugin looks for the secret where clearenv() left it.
      // (strict plus ioctl: in the sanitizer build the runtime's interceptors
      // of the plugin's libc calls make one.)
      e2e::TempDir dir;
      const std::string input = dir.write("payload", reversed);
      const auto shown = run_pillbox({"policy", "show", "strict"});
      REQUIRE(shown.exit_code == 0);
      const std::string policy = dir.write("probe.policy", shown.out + "allow = ioctl\n");
      const auto r = run_pillbox({"run", "--json", "--no-store", "--mode", mode, "--policy", policy, "--handler",
                                  "plugin:" + e2e::fixture("env_probe.so"), input},
                                 "", {{"SECRET_TOKEN", secret}});
      INFO(r.describe());
      const auto& rec = r.only_record();
      REQUIRE(rec["kind"] == "ok");
      const std::string out = rec["output"];
      CHECK_MESSAGE(out.find("environ: clean; stack: clean;") == 0, out);
      CHECK_MESSAGE(out.find("SECRET_TOKEN") == std::string::npos, out);
    }
    {
      // An exec program: a real tool prints what it was given.
      const auto r = run_exec(mode, {"/usr/bin/env"}, {}, "x", {{"SECRET_TOKEN", secret}});
      INFO(r.describe());
      const auto& rec = r.only_record();
      REQUIRE(rec["kind"] == "ok");
      const std::string out = rec["output"];
      CHECK_MESSAGE(out.find("SECRET_TOKEN") == std::string::npos, out);
      CHECK_MESSAGE(out.find("PATH=") != std::string::npos, out);
    }
  }
}

TEST_CASE("OOM anywhere in the task is oom: a subprocess killed by the cgroup's OOM killer") {
  if (!e2e::have_memory_cgroup()) {
    MESSAGE("skipped: no usable memory cgroup on this host (the OOM killer's count is a cgroup's)");
    return;
  }
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    // The fixture exits 137 after its worker was killed, as a shell would.
    const auto direct = run_exec(mode, {e2e::fixture("memory_hog"), "child"}, {"--memory", "64M"});
    // A real shell in between.
    const auto shell = run_exec(mode, {"/bin/sh", "-c", pillbox::shell_quote(e2e::fixture("memory_hog")) + " grow; exit $?"}, {"--memory", "64M"});
    for (const auto* r : {&direct, &shell}) {
      INFO(r->describe());
      const auto& rec = r->only_record();
      CHECK(rec["kind"] == "oom");
      CHECK(rec["exit_code"] == 137);
      const std::string message = rec["message"];
      CHECK_MESSAGE(message.find("killed by the cgroup OOM killer at the memory limit of 64 MiB") != std::string::npos, message);
    }
  }
}

TEST_CASE("no survivors: after kill -9 of pillbox, nothing its tasks started runs 2 s later") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    e2e::TempDir dir(0777);  // the task's spy (running as the slot's uid) marks itself here
    const int stop = ::eventfd(0, EFD_CLOEXEC);
    REQUIRE(stop >= 0);
    std::string watcher_error;
    std::vector<pid_t> task_pids;
    std::vector<pid_t> survivors;
    std::thread watcher([&] {
      // No doctest assertions on this thread: failures go to watcher_error.
      if (!e2e::wait_for_file(dir.path(), "spy.", stop)) {
        watcher_error = "pillbox finished before the task planted its spy";
        return;
      }
      // This run's pillbox: the one whose command line names our directory
      // (not its guardian, a fork of it named pillbox-guard).
      const pid_t pillbox = e2e::pillbox_naming(dir.path());
      for (const auto& p : e2e::processes_of(e2e::fixture("survivor"))) task_pids.push_back(p.pid);
      if (pillbox == 0 || task_pids.size() != 2) {
        watcher_error = "expected pillbox and two task processes (the task and its spy), found " +
                        e2e::describe(e2e::processes_of(e2e::fixture("survivor")));
        return;
      }
      ::kill(pillbox, SIGKILL);
      survivors = e2e::still_running_after(task_pids, std::chrono::seconds(2));
    });
    e2e::TempDir in;
    const std::string input = in.write("payload", "x");
    const auto r = run_pillbox({"run", "--json", "--no-store", "--max-attempts", "1", "--mode", mode, "--timeout", "20s",
                                "--writable", dir.path(), input, "--", e2e::fixture("survivor"), "plant-and-wait", dir.path()});
    const std::uint64_t one = 1;
    (void)!::write(stop, &one, sizeof one);
    watcher.join();
    ::close(stop);
    INFO(r.describe());
    REQUIRE_MESSAGE(watcher_error.empty(), watcher_error);
    CHECK(r.term_signal == SIGKILL);
    CHECK_MESSAGE(survivors.empty(), survivors.size() << " of the task's processes still ran 2 s after pillbox died");
    kill_leftovers(e2e::fixture("survivor"));
  }
}

TEST_CASE("no survivors: with cgroup = off, a task's setsid'd spy is gone before the next task of its slot gets its payload") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: without root there is no uid per job slot (tasks run as the caller, who can read them anyway)");
    return;
  }
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    e2e::TempDir dir(0777);
    const std::string policy = e2e::exec_policy_with(dir, "cgroup = auto", "cgroup = off");
    const std::string tasks = e2e::task_line("plant", "PLANT") + e2e::task_line("victim", "SECRET-B of the victim\n");
    const auto r = run_pillbox({"run", "--json", "--no-store", "--jobs", "1", "--mode", mode, "--policy", policy,
                                "--writable", dir.path(), "-", "--", e2e::fixture("survivor"), "task", dir.path()},
                               tasks);
    INFO(r.describe());
    CHECK(r.record("plant")["kind"] == "ok");
    CHECK(r.record("plant")["output"] == "planted\n");
    CHECK(r.record("victim")["kind"] == "ok");
    CHECK(e2e::has_file_starting(dir.path(), "spy."));
    std::string leaks;
    if (std::filesystem::exists(dir.file("leaks"))) leaks = e2e::read_file(dir.file("leaks"));
    CHECK_MESSAGE(leaks.find("SECRET-B") == std::string::npos, "the spy read the next task's payload: " << leaks);
    // And nothing of either task outlives the run.
    std::vector<pid_t> pids;
    for (const auto& p : e2e::processes_of(e2e::fixture("survivor"))) pids.push_back(p.pid);
    CHECK_MESSAGE(e2e::still_running_after(pids, std::chrono::seconds(2)).empty(),
                  "left running after the run: " << e2e::describe(e2e::processes_of(e2e::fixture("survivor"))));
    kill_leftovers(e2e::fixture("survivor"));
  }
}

TEST_CASE("plugin code never runs as root: constructors and init run as the slot's uid, in both modes") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: pillbox is not root here, so a plugin cannot run as root anyway");
    return;
  }
  e2e::TempDir root_only(0700);  // like /root: only root may create files here
  const std::string plugin = "plugin:" + e2e::fixture("root_probe.so");
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    e2e::TempDir in;
    const std::string input = in.write("payload", "x");
    const auto r = run_pillbox({"run", "--json", "--no-store", "--mode", mode, "--handler", plugin, "--arg",
                                "probe_dir=" + root_only.path(), input});
    INFO(r.describe());
    const auto& rec = r.only_record();
    REQUIRE(rec["kind"] == "ok");
    const std::string out = rec["output"];
    CHECK_MESSAGE(out.find("ctor_euid=0 ") == std::string::npos, out);
    CHECK_MESSAGE(out.find("init_euid=0") == std::string::npos, out);
    CHECK_MESSAGE(out.find("ctor_euid=-1") == std::string::npos, out);
  }
  std::vector<std::string> planted;
  for (const auto& e : std::filesystem::directory_iterator(root_only.path())) planted.push_back(e.path().string());
  CHECK_MESSAGE(planted.empty(), "the plugin wrote into a root-only directory: " << planted.front());

  // Not even where anyone may write: the load check sees the policy's
  // read-only view, like the children do.
  e2e::TempDir open_dir(0777);
  e2e::TempDir in;
  const auto r = run_pillbox({"run", "--json", "--no-store", "--handler", plugin, "--arg", "probe_dir=" + open_dir.path(),
                              in.write("payload", "x")});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(std::filesystem::is_empty(open_dir.path()));
}

TEST_CASE("a plugin loaded in the child still has named crash frames and a fingerprint stable across runs") {
  // As root the plugin is loaded after the crash handler's module snapshot
  // was first taken: it must be taken again, or its frames are raw addresses.
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    std::string fingerprints[2];
    for (auto& fingerprint : fingerprints) {
      e2e::TempDir in;
      const std::string input = in.write("payload", "S crashes in parse_poison");
      const auto r = run_pillbox({"run", "--json", "--no-store", "--max-attempts", "1", "--mode", mode, "--handler",
                                  e2e::poison_plugin(), input});
      INFO(r.describe());
      const auto& rec = r.only_record();
      CHECK(rec["kind"] == "crash");
      REQUIRE(!rec["crash_state"].empty());
      CHECK(rec["crash_state"][0] == "parse_poison");
      fingerprint = rec["fingerprint"];
    }
    CHECK(fingerprints[0] == fingerprints[1]);
  }
}

TEST_CASE("a plugin the task's uid cannot read is one clear error before anything runs (exit 2)") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: needs root (tasks then run under other uids than the plugin's owner)");
    return;
  }
  e2e::TempDir private_dir(0700);
  const std::string copy = private_dir.write("probe.so", e2e::read_file(e2e::fixture("root_probe.so")));
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    e2e::TempDir in;
    const std::string input = in.write("payload", "x");
    const auto r = run_pillbox({"run", "--json", "--no-store", "--mode", mode, "--handler", "plugin:" + copy, input});
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.records.empty());
    CHECK(r.err.find("cannot load plugin " + copy) != std::string::npos);
    CHECK(r.err.find("plugins are loaded only after a task dropped root") != std::string::npos);
  }
}

TEST_CASE("the kernel names the syscall: a forged crash report and a self-raised SIGSYS are a crash, not a violation") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    {
      const auto r = run_exec(mode, {e2e::fixture("forge_report")});
      INFO(r.describe());
      const auto& rec = r.only_record();
      CHECK(rec["kind"] == "crash");
      CHECK(rec["signal"] == "SIGSYS");
      CHECK(rec["syscall"].is_null());
      const std::string message = rec["message"];
      CHECK_MESSAGE(message.find("raised by the task itself") != std::string::npos, message);
      CHECK_MESSAGE(message.find("naming denied syscall reboot was discarded") != std::string::npos, message);
    }
    {
      // A real denied syscall after the forged report: the kernel's name wins.
      const auto r = run_exec(mode, {e2e::fixture("forge_report"), "real"});
      INFO(r.describe());
      const auto& rec = r.only_record();
      CHECK(rec["kind"] == "seccomp-violation");
      CHECK(rec["syscall"] == "socket");
      const std::string message = rec["message"];
      CHECK_MESSAGE(message.find("denied syscall socket (reported by the kernel)") == 0, message);
    }
  }
}
