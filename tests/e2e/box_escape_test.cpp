// Ways out of the box that a hostile task tries, in both launch modes: each
// case is an attack a review found, kept as a test that failed before the
// fix (docs/security.md lists them).
#include <doctest/doctest.h>

#include <string>
#include <vector>

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

const nlohmann::json& only_record(const e2e::RunResult& r) {
  REQUIRE(r.records.size() == 1);
  return r.records[0];
}

}  // namespace

TEST_CASE("exec tasks cannot create namespaces: clone with namespace flags is denied, clone3 is ENOSYS") {
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    {
      const auto r = run_exec(mode, {e2e::fixture("new_namespaces"), "clone-ns"});
      INFO(r.describe());
      const auto& rec = only_record(r);
      CHECK(rec["kind"] == "seccomp-violation");
      CHECK(rec["syscall"] == "clone");
    }
    {
      const auto r = run_exec(mode, {e2e::fixture("new_namespaces"), "clone3-ns"});
      INFO(r.describe());
      const auto& rec = only_record(r);
      CHECK(rec["kind"] == "ok");
      CHECK(rec["output"] == "clone3-ns refused: ENOSYS\n");
    }
    {
      const auto r = run_exec(mode, {e2e::fixture("new_namespaces"), "unshare"});
      INFO(r.describe());
      const auto& rec = only_record(r);
      CHECK(rec["kind"] == "seccomp-violation");
      CHECK(rec["syscall"] == "unshare");
    }
    {
      // What ordinary programs do still works: glibc falls back from clone3 to clone.
      const auto r = run_exec(mode, {e2e::fixture("new_namespaces"), "ordinary"});
      INFO(r.describe());
      const auto& rec = only_record(r);
      CHECK(rec["kind"] == "ok");
      CHECK(rec["output"] == "fork, thread and posix_spawn work\n");
    }
    {
      // A real tool: util-linux unshare(1).
      const auto r = run_exec(mode, {"/usr/bin/unshare", "--user", "--map-root-user", "/bin/true"});
      INFO(r.describe());
      const auto& rec = only_record(r);
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
      e2e::TempDir dir;
      const std::string input = dir.write("payload", reversed);
      const auto r = run_pillbox({"run", "--json", "--no-store", "--mode", mode, "--handler",
                                  "plugin:" + e2e::fixture("env_probe.so"), input},
                                 "", {{"SECRET_TOKEN", secret}});
      INFO(r.describe());
      const auto& rec = only_record(r);
      REQUIRE(rec["kind"] == "ok");
      const std::string out = rec["output"];
      CHECK_MESSAGE(out.find("environ: clean; stack: clean;") == 0, out);
      CHECK_MESSAGE(out.find("SECRET_TOKEN") == std::string::npos, out);
    }
    {
      // An exec program: a real tool prints what it was given.
      const auto r = run_exec(mode, {"/usr/bin/env"}, {}, "x", {{"SECRET_TOKEN", secret}});
      INFO(r.describe());
      const auto& rec = only_record(r);
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
    const auto shell = run_exec(mode, {"/bin/sh", "-c", e2e::fixture("memory_hog") + " grow; exit $?"}, {"--memory", "64M"});
    for (const auto* r : {&direct, &shell}) {
      INFO(r->describe());
      const auto& rec = only_record(*r);
      CHECK(rec["kind"] == "oom");
      CHECK(rec["exit_code"] == 137);
      const std::string message = rec["message"];
      CHECK_MESSAGE(message.find("killed by the cgroup OOM killer at the memory limit of 64 MiB") != std::string::npos, message);
    }
  }
}
