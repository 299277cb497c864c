// A task never breaks its slot (issue 25, point 2). In zygote mode the tasks
// of one job slot share one mount namespace, each emptying what the one
// before it left in /tmp, /var/tmp and /dev/shm. A tree deeper than the
// walk went (64 levels) once stayed behind, and every later task of the
// slot was a sandbox-error, then gave up: 0 of 6 good payloads ran. Here
// each hostile task leaves its mess (the exec policy denies mknod: no
// FIFO; and socket: no socket file) and ends ok; the six good payloads after
// it in the same slot (--jobs 1) must each find none of it, which the
// command checks itself, and end ok. (Not "the directories are empty":
// what pillbox binds there for the task stays, e.g. the crash library's
// directories when the build lies under /tmp.) In both modes, in
// `run` and in `worker`.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

// Under ASan/UBSan only zygote mode, whose slots are emptied (each spawned
// task has a namespace of its own, nothing to empty): every spawned child
// starts an instrumented pillbox-sandbox, 0.4 s each.
#if defined(PILLBOX_SANITIZED)
const char* const kModes[] = {"zygote"};
#else
const char* const kModes[] = {"zygote", "spawn"};
#endif

// The payload says what to leave behind; "good" checks that nothing was
// left and prints the payload's number. Trees are made relative (cd, mkdir),
// so their depth is not bounded by PATH_MAX.
const char* const kScript =
    "p=$(cat); case $p in "
    "deep) i=0; while [ $i -lt 1000 ]; do mkdir d && cd d || exit 9; i=$((i+1)); done; touch leaf;; "
    "locked) mkdir -p a/b/c && touch a/b/c/f a/b/g && ln a/b/g a/b/h && ln -s / a/b/root && chmod 000 a/b/c a/b a;; "
    "many) mkdir many && cd many && seq 1 100000 | xargs touch && ls | wc -l;; "
    "held) (sleep 60 > /dev/shm/held &) ; echo x > /var/tmp/v;; "
    "stuck) touch /tmp/stuck;; "
    "good*) for f in /tmp/d /tmp/leaf /tmp/a /tmp/many /dev/shm/held /var/tmp/v /tmp/stuck; do "
    "  [ -e $f ] && { echo \"left: $f\" >&2; exit 3; }; done; echo \"$p clean\";; "
    "esac";

std::string tasks_after(const std::string& hostile) {
  std::string lines = e2e::task_line(hostile, hostile);
  for (int i = 1; i <= 6; ++i) lines += e2e::task_line(hostile + "-good" + std::to_string(i), "good" + std::to_string(i));
  return lines;
}

// The shipped exec policy with a /tmp large enough for 100 000 files
// (a private tmpfs has one inode per 4 KiB of its size).
std::string roomy_policy(const e2e::TempDir& dir) { return e2e::exec_policy_with(dir, "tmp = 64M", "tmp = 1G"); }

void check_all_ok(const e2e::RunResult& r, const std::string& hostile) {
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.record(hostile)["kind"] == "ok");
  for (int i = 1; i <= 6; ++i) {
    const auto& good = r.record(hostile + "-good" + std::to_string(i));
    CHECK(good["kind"] == "ok");
    CHECK(good["output"] == "good" + std::to_string(i) + " clean\n");
  }
}

}  // namespace

TEST_CASE("run: after a tree 1000 deep, a chmod 000 tree with links, 100 000 files or a survivor, the slot's next 6 payloads are ok") {
  e2e::TempDir dir;
  const std::string policy = roomy_policy(dir);
  for (const char* mode : kModes) {
    for (const std::string hostile : {"deep", "locked", "many", "held"}) {
      CAPTURE(std::string(mode));
      CAPTURE(hostile);
      const auto r = run_pillbox({"run", "--json", "--no-store", "--jobs", "1", "--mode", mode, "--policy", policy,
                                  "--max-attempts", "1", "-", "--", "/bin/sh", "-c", kScript},
                                 tasks_after(hostile));
      check_all_ok(r, hostile);
      if (hostile == "many") CHECK(r.record("many")["output"] == "100000\n");
    }
  }
}

// What no task can do on its own (its slot's uid owns all it makes), a
// fault makes here: a leftover named "stuck" that the next child cannot
// remove (shared/fault_injection.h). Broke: that child's setup failed, and
// so did every later one of the slot: sandbox-error, then gave-up. Now the
// zygote makes the slot a new namespace and the task runs again there, its
// attempt not counted (--max-attempts 1 still ends ok).
const std::map<std::string, std::string> kStuckFault = {{"PILLBOX_TEST_UNREMOVABLE", "stuck"}};

TEST_CASE("run: a slot that cannot be emptied is made anew, and the slot's next 6 payloads are ok") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: without root a task's /tmp is private only where user namespaces allow it, and the "
            "attempt counts below assume it is");
    return;
  }
  e2e::TempDir dir;
  for (const char* mode : kModes) {
    CAPTURE(std::string(mode));
    const auto r = run_pillbox({"run", "--json", "--no-store", "--jobs", "1", "--mode", mode, "--max-attempts", "1",
                                "-", "--", "/bin/sh", "-c", kScript},
                               tasks_after("stuck"), kStuckFault);
    check_all_ok(r, "stuck");
    // Only the first good payload met the stuck slot: once, in zygote mode
    // (in spawn mode each task's namespace is its own, nothing to empty).
    CHECK(r.record("stuck-good1")["attempts"] == (std::string(mode) == "zygote" ? 2 : 1));
    for (int i = 2; i <= 6; ++i) CHECK(r.record("stuck-good" + std::to_string(i))["attempts"] == 1);
  }
  // Whether the child's SETUP_FAILED frame is read before its exit report
  // or after, the renewal is not counted (broke, found by an attack review:
  // when the exit came first, the attempt counted, and with --max-attempts 1
  // the good payload gave up in about 1 run of 3). Twelve runs, twelve
  // chances at either order.
  for (int run = 0; run < 12; ++run) {
    CAPTURE(run);
    const auto r = run_pillbox({"run", "--json", "--no-store", "--jobs", "1", "--mode", "zygote", "--max-attempts", "1",
                                "-", "--", "/bin/sh", "-c", kScript},
                               e2e::task_line("stuck", "stuck") + e2e::task_line("good", "good"), kStuckFault);
    INFO(r.describe());
    CHECK(r.exit_code == 0);
    CHECK(r.record("good")["kind"] == "ok");
    CHECK(r.record("good")["attempts"] == 2);
  }
}

TEST_CASE("worker: after a tree 1000 deep, a chmod 000 tree, 100 000 files or an uncleanable slot, the slot's next 6 entries are ok, in both modes") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  e2e::TempDir dir;
  const std::string policy = roomy_policy(dir);
  int round = 0;
  for (const char* mode : kModes) {
    for (const std::string hostile : {"deep", "locked", "many", "stuck"}) {
      CAPTURE(std::string(mode));
      CAPTURE(hostile);
      const std::string stream = "slots" + std::to_string(++round);
      std::vector<std::pair<std::string, std::string>> entries = {{hostile, hostile}};
      for (int i = 1; i <= 6; ++i) entries.emplace_back(hostile + "-good" + std::to_string(i), "good" + std::to_string(i));
      e2e::add_entries(server, stream, entries);
      const auto worker = run_pillbox({"worker", "--redis", server.url(), "--stream", stream, "--json", "--jobs", "1",
                                       "--mode", mode, "--policy", policy, "--max-attempts", "1", "--exit-when-idle",
                                       "1s", "--", "/bin/sh", "-c", kScript},
                                      "", hostile == "stuck" ? kStuckFault : std::map<std::string, std::string>{});
      INFO(worker.describe());
      CHECK(worker.exit_code == 0);
      CHECK(e2e::redis_integer(server, {"XLEN", stream + ":dlq"}) == 0);
      const auto results = e2e::stream_entries(server, stream + ":results");
      REQUIRE(results.size() == 7);
      int clean = 0;
      for (const auto& result : results) {
        for (const auto& [name, value] : result.fields) clean += value.find(" clean\n") != std::string::npos;
      }
      CHECK(clean == 6);
    }
  }
}
