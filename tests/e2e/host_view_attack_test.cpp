// Attacks on --share and the hidden-path rule, kept from the review of
// issue 24's change (docs/security.md, 6.2.1). Each case is what a hostile
// payload or a hostile local user could do; each failed before its fix:
//   - a payload that prints "No such file or directory" for a path of the
//     host under /tmp is held once a run, then judged like any other (it
//     stopped every run and blocked the job behind it; with a new wording
//     each time it looped within a run);
//   - a shared path is bound without following symlinks, and a share that
//     goes through one is refused (a symlink swapped in after the start-up
//     check showed tasks what their uid may not reach).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A payload for `/bin/sh {}`: code the task runs. It prints what a missing
// file would make any tool print, naming a path every host has under /tmp
// ("/tmp/" itself), and fails. Nothing is hidden from it: it lies.
const char* const kLyingPoison = "echo 'cat: /tmp/: No such file or directory' >&2; exit 1\n";

}  // namespace

TEST_CASE("a payload that claims ENOENT on a host path is quarantined, not held forever, and does not stop the job") {
  // A file every host has under /tmp (/tmp/.X11-unix, a service's socket);
  // here one made for the purpose. And /tmp/ itself, which is always there.
  e2e::TempDir host;
  const std::string host_file = host.write("socket", "");
  for (const std::string& lie : {std::string(kLyingPoison),
                                 "echo 'open " + host_file + ": No such file or directory' >&2; exit 1\n"}) {
  CAPTURE(lie);
  e2e::TempDir state;
  const std::string store = state.path() + "/store";
  std::string input = e2e::task_line("poison", lie);
  for (int i = 0; i < 4; ++i) input += e2e::task_line("good-" + std::to_string(i), "echo ok" + std::to_string(i) + "\n");
  e2e::RunResult last;
  // A few runs over the same store, as an operator (or a cron job) would:
  // each run should make progress on the good payloads.
  for (int run = 0; run < 3; ++run) {
    last = run_pillbox({"run", "--store", store, "--json", "--jobs", "1", "--max-attempts", "2", "--mode", "spawn",
                        "-", "--", "/bin/sh", "{}"},
                       input, {}, {}, 120);
    INFO(last.describe());
    if (last.exit_code != 4) break;
  }
  INFO(last.describe());
  CHECK(last.exit_code != 4);
  const std::string db = store + "/pillbox.db";
  CHECK(e2e::sql_int(db, "SELECT count(*) FROM quarantine") == 1);
  }
}

TEST_CASE("a payload that claims ENOENT with a new wording each time cannot loop forever once a payload succeeded") {
  e2e::TempDir state;
  const std::string store = state.path() + "/store";
  // A good payload first: the run has a known-good probe. The poison's last
  // stderr line (its fingerprint) changes with every attempt.
  e2e::TempDir host;
  const std::string host_file = host.write("socket", "");
  const std::string poison = "w=$(tr -dc g-z < /dev/urandom | head -c 16); echo \"cat: " + host_file +
                             ": No such file or directory $w\" >&2; exit 1\n";
  const std::string input = e2e::task_line("good", "echo ok\n") + e2e::task_line("poison", poison);
  const auto r = run_pillbox({"run", "--store", store, "--json", "--jobs", "1", "--max-attempts", "2", "--mode",
                              "spawn", "-", "--", "/bin/sh", "{}"},
                             input, {}, {}, 90);
  INFO(r.describe());
  CHECK(r.seconds < 80);
  CHECK(e2e::sql_int(store + "/pillbox.db", "SELECT count(*) FROM quarantine") == 1);
}

TEST_CASE("--share: a symlink swapped in after the start-up check does not show tasks what their uid may not reach") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: without root, tasks run as our own uid: nothing to reach beyond it");
    return;
  }
  // The barrier: a 0700 directory of root's, holding a world-readable
  // directory and file (a service's private tmp, /root/..., a 0700 home).
  e2e::TempDir closed(0700);
  const std::string inner = closed.path() + "/inner";
  std::filesystem::create_directory(inner);
  ::chmod(inner.c_str(), 0755);
  const std::string secret = inner + "/secret.txt";
  {
    FILE* f = std::fopen(secret.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("TOPSECRET", f);
    std::fclose(f);
    ::chmod(secret.c_str(), 0644);
  }
  // Sharing it is refused at the start: the tasks' uid cannot enter `closed`.
  const auto refused = run_pillbox({"run", "--no-store", "--share", inner, "-", "--", "/bin/cat"}, e2e::task_line("a", "a"));
  INFO(refused.describe());
  REQUIRE(refused.exit_code == 3);

  // A local user's directory, which the operator shares with tasks.
  e2e::TempDir users(0755);
  const std::string data = users.path() + "/data";
  std::filesystem::create_directory(data);
  ::chmod(data.c_str(), 0755);
  {
    FILE* f = std::fopen((data + "/secret.txt").c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("public", f);
    std::fclose(f);
  }
  std::string input;
  for (int i = 0; i < 10; ++i) input += e2e::task_line("t" + std::to_string(i), "x");
  std::atomic<bool> swapped{false};
  // Once the run has started (its check passed), the user swaps the shared
  // directory for a symlink to the closed one's inside.
  const auto r = run_pillbox(
      {"run", "--no-store", "--json", "--jobs", "1", "--mode", "spawn", "--share", data, "-", "--", "/bin/sh", "-c",
       "cat " + data + "/secret.txt; sleep 0.2"},
      input, {},
      [&](pid_t, std::size_t, std::string_view) {
        if (swapped.exchange(true)) return;
        std::filesystem::rename(data, data + ".old");
        std::filesystem::create_directory_symlink(inner, data);
      });
  INFO(r.describe());
  CHECK(swapped.load());
  for (const auto& rec : r.records) {
    CHECK_FALSE(contains(rec.dump(), "TOPSECRET"));
  }
}
