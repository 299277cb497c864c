// The supervisor's wire sockets serve task after task (supervisor/exec/
// wire_socket.h). What a task leaves on its socket must never reach a later
// task: these runs have one slot, an attacking first task and an honest
// second one, which would be given the first one's socket if it were taken
// for settled (tests/fixtures/hostile_child.cpp, modes stale-*).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/e2e/support.h"

namespace {

e2e::RunResult run_attack_then_honest(const std::string& mode, e2e::TempDir& dir) {
  const std::string first = dir.write("first", "the attacker");
  const std::string second = dir.write("second", "the honest task");
  return e2e::run_pillbox({"run", "--json", "--mode", "spawn", "--jobs", "1", "--handler",
                           "echo", "--arg", "mode=" + mode, "--arg", "dir=" + dir.path(), "--timeout", "10s", first,
                           second},
                          "", {{"PILLBOX_SANDBOX", e2e::fixture("hostile_child")}});
}

}  // namespace

TEST_CASE("a connection a killed task left on its wire socket does not fail the next task") {
  // The attacker's connection ends while the next task waits for its RESULT:
  // on the same socket that end would read as the honest task's disconnect.
  e2e::TempDir dir;
  const auto r = run_attack_then_honest("stale-setup", dir);
  INFO(r.describe());
  REQUIRE(r.records.size() == 2);
  CHECK(r.count_kind("ok") == 1);  // the honest task; the attacker died of SIGKILL before its HELLO
  for (const auto& rec : r.records) {
    if (rec["kind"] == "ok") CHECK(rec["output"] == "honest");
  }
  CHECK(e2e::processes_of(e2e::fixture("hostile_child")).empty());
}

TEST_CASE("a second connection a task opened to its wire socket does not fail the next task") {
  // The first task answers honestly over one connection and leaves another
  // open: one connection more than the tasks the socket served.
  e2e::TempDir dir;
  const auto r = run_attack_then_honest("stale-second", dir);
  INFO(r.describe());
  REQUIRE(r.records.size() == 2);
  CHECK(r.count_kind("ok") == 2);
  CHECK(e2e::processes_of(e2e::fixture("hostile_child")).empty());
}

TEST_CASE("a child that closes its wire right after HELLO is a protocol-error, on a fresh or a reused socket alike") {
  // Odd tasks say HELLO and close; even ones answer. With one slot, the
  // third task runs on the second one's socket when that one settled in
  // time (the first one's was retired): its disconnect is still its own.
  e2e::TempDir dir;
  std::vector<std::string> args{"run", "--json", "--mode", "spawn", "--jobs", "1", "--handler", "echo",
                                "--arg", "mode=hello-close", "--timeout", "10s"};
  for (int i = 0; i < 4; ++i) args.push_back(dir.write("t" + std::to_string(i), "task " + std::to_string(i)));
  const auto r = e2e::run_pillbox(args, "", {{"PILLBOX_SANDBOX", e2e::fixture("hostile_child")}});
  INFO(r.describe());
  REQUIRE(r.records.size() == 4);
  CHECK(r.count_kind("ok") == 2);
  // (Its message says the wire closed, or that TASK could not be sent when
  // the HELLO was read after the connection had gone.)
  CHECK(r.count_kind("protocol-error") == 2);
  CHECK(e2e::processes_of(e2e::fixture("hostile_child")).empty());
}
