// 10 000 tasks in one run (2 000 under ASan), 10 % poison of mixed kinds, from JSON lines on
// stdin: every key is reported exactly once with the kind that was planted,
// the supervisor neither leaks descriptors nor grows while it runs, and no
// process of the task program outlives the run.
#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <map>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

// 10 000 tasks in the normal build (issue 1's figure). The ASan/UBSan build
// runs 2 000: its job is finding memory errors, which the first thousands
// show as well as the last, and 10 000 took 5.5 of CI's 20 minutes there.
#if defined(PILLBOX_SANITIZED)
constexpr int kTasks = 2000;
#else
constexpr int kTasks = 10000;
#endif
// The supervisor is measured after every record of two windows: from record
// kTasks/10 and from record 9*kTasks/10, 100 records each. Its descriptor count moves by a
// few with the tasks in flight (each holds a socket and eventfds for a
// moment), so a window's minimum is compared: a leak raises it, the in-flight
// noise does not. The wire sockets the supervisor keeps for later tasks
// (supervisor/exec/wire_socket.h: at most 2 x jobs + 2, each holding its
// listener and 3 eventfds) are counted apart: their number may rise between
// the windows without a leak. For memory, the windows' maxima are compared.
constexpr int kEarlySample = kTasks / 10;
constexpr int kLateSample = kTasks - kTasks / 10;
constexpr int kWindow = 100;

struct Planted {
  std::string key;
  std::string payload;
  std::string kind;    // expected kind
  std::string signal;  // expected signal ("" for none)
};

// Every 10th task is poison; of every 500 poison tasks 10 spin until the CPU
// limit (each costs ~1 s of CPU), the rest are split between SIGSEGV, abort()
// and a clean rejection (exit code 3).
std::vector<Planted> plan() {
  std::vector<Planted> tasks;
  tasks.reserve(kTasks);
  for (int i = 0; i < kTasks; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "task-%05d", i);
    Planted t{key, {}, "ok", {}};
    if (i % 10 == 7) {
      const int j = i / 10;
      if (j % 50 == 25) {
        t = {key, "L spin " + std::to_string(i), "cpu-limit", "SIGXCPU"};
      } else if (j % 3 == 0) {
        t = {key, "S segfault " + std::to_string(i), "crash", "SIGSEGV"};
      } else if (j % 3 == 1) {
        t = {key, "A abort " + std::to_string(i), "crash", "SIGABRT"};
      } else {
        t = {key, "E reject " + std::to_string(i), "handler-error", ""};
      }
    } else {
      t.payload = "record " + std::to_string(i) + ": " + std::string(static_cast<std::size_t>(i % 97), 'x') + " end";
    }
    tasks.push_back(std::move(t));
  }
  return tasks;
}

}  // namespace

TEST_CASE("10 000 tasks (2 000 under ASan) with 10 % mixed poison: every key once, planted kinds, no leaks") {
  const auto tasks = plan();
  std::string input;
  std::map<std::string, int> planted_kinds;
  for (const auto& t : tasks) {
    input += nlohmann::json{{"key", t.key}, {"payload", t.payload}}.dump() + "\n";
    ++planted_kinds[t.kind];
  }
  REQUIRE(planted_kinds["ok"] == kTasks / 10 * 9);
  REQUIRE(planted_kinds["cpu-limit"] == kTasks / 500);

  const std::string program = e2e::fixture("mixed_poison");
  // Wire sockets the supervisor has bound: its ipc:// endpoints
  // RUNDIR/w<n>, RUNDIR being pillbox-<pid>.XXXXXX (its listening sockets,
  // which /proc/net/unix lists with their paths).
  auto count_wire_sockets = [](pid_t pid) {
    std::ifstream unix_sockets("/proc/net/unix");
    const std::string dir = "/pillbox-" + std::to_string(pid) + ".";
    int n = 0;
    for (std::string line; std::getline(unix_sockets, line);) {
      const auto at = line.find(dir);
      if (at != std::string::npos && line.find("/w", at) != std::string::npos) ++n;
    }
    return n;
  };
  constexpr int kFdsPerWireSocket = 4;
  struct Sample {
    int fds = -1;       // minimum over the window, wire sockets not counted
    long rss_kb = -1;   // maximum over the window
    double at_s = 0;    // when the window started
    int wire_sockets = 0;  // at that minimum
    void add(pid_t pid, double now, int wires) {
      const int all = e2e::open_fd_count(pid);
      const int f = all > 0 ? all - kFdsPerWireSocket * wires : all;
      const long rss = e2e::vm_rss_kb(pid);
      if (at_s == 0) at_s = now;
      if (f > 0 && (fds < 0 || f < fds)) {
        fds = f;
        wire_sockets = wires;
      }
      if (rss > rss_kb) rss_kb = rss;
    }
  } early, late;
  const auto started = std::chrono::steady_clock::now();
  auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); };
  // The wall limit is far above the CPU limit: on a loaded 2-core CI host a
  // spinning task got under a fifth of a core and hit a 5 s wall limit
  // before its 1 s of CPU (wall-timeout instead of the planted cpu-limit).
  const auto r = run_pillbox({"run", "--json", "--jobs", "2", "--cpu", "1s", "--timeout", "30s", "-", "--", program}, input,
                             {}, [&](pid_t pid, std::size_t line, std::string_view) {
                               const auto n = static_cast<int>(line);
                               if (n >= kEarlySample && n < kEarlySample + kWindow) early.add(pid, since_start(), count_wire_sockets(pid));
                               if (n >= kLateSample && n < kLateSample + kWindow) late.add(pid, since_start(), count_wire_sockets(pid));
                             });
  const auto left = e2e::processes_of(program);

  std::map<std::string, int> seen_keys;
  std::map<std::string, int> kinds;
  {
    INFO(r.describe().substr(0, 3000));
    CHECK(r.term_signal == 0);
    CHECK(r.exit_code == 1);  // some failed; not a crash, not a usage or setup error
    CHECK(r.records.size() == static_cast<std::size_t>(kTasks));

    std::map<std::string, const Planted*> by_key;
    for (const auto& t : tasks) by_key[t.key] = &t;
    int wrong = 0;
    for (const auto& rec : r.records) {
      const std::string key = rec.value("key", "");
      ++seen_keys[key];
      ++kinds[rec.value("kind", "?")];
      const auto it = by_key.find(key);
      if (it == by_key.end()) {
        FAIL_CHECK("record for a key that was never submitted: " << key);
        continue;
      }
      const Planted& t = *it->second;
      bool right = rec["kind"] == t.kind;
      if (t.kind == "ok") right = right && rec.value("output", std::string("<none>")) == t.payload;
      if (!t.signal.empty()) right = right && rec["signal"] == t.signal;
      if (t.kind == "handler-error") right = right && rec["message"].get<std::string>().find("rejected record") != std::string::npos;
      if (!right && ++wrong <= 10) FAIL_CHECK("planted " << t.kind << " " << t.signal << ", got " << rec.dump().substr(0, 500));
    }
    CHECK(wrong == 0);
    int duplicates = 0;
    for (const auto& [key, n] : seen_keys) duplicates += n > 1;
    CHECK(duplicates == 0);
    CHECK(seen_keys.size() == static_cast<std::size_t>(kTasks));
    for (const auto& [kind, n] : planted_kinds) CHECK_MESSAGE(kinds[kind] == n, kind << ": planted " << n << ", reported " << kinds[kind]);

    // The supervisor while it ran: same descriptors, (almost) no growth.
    REQUIRE(early.fds > 0);
    REQUIRE(late.fds > 0);
    INFO("wire sockets: " << early.wire_sockets << " early, " << late.wire_sockets << " late");
    CHECK(late.wire_sockets <= 2 * 2 + 2);  // --jobs 2: running ones and the pool's spares
    CHECK(late.fds <= early.fds + 4);
    REQUIRE(early.rss_kb > 0);
    REQUIRE(late.rss_kb > 0);
#if defined(PILLBOX_SANITIZED)
    // AddressSanitizer keeps freed memory in a quarantine (up to 256 MiB), so
    // RSS grows in that build whatever the code does; fds are still checked.
    MESSAGE("skipped: RSS flatness under AddressSanitizer (its quarantine holds freed memory)");
#else
    CHECK(late.rss_kb - early.rss_kb < 20 * 1024);
#endif

    // Nothing of the task program is left, live or zombie.
    CHECK_MESSAGE(left.empty(), left.size() << " process(es) of " << program << " remain:\n" << e2e::describe(left));
  }
  const double rate = r.seconds > 0 ? kTasks / r.seconds : 0;
  const double steady_rate = late.at_s > early.at_s ? (kLateSample - kEarlySample) / (late.at_s - early.at_s) : 0;
  MESSAGE("scale: " << kTasks << " tasks in " << r.seconds << " s (" << rate << " tasks/s overall, " << steady_rate
                    << " tasks/s between records " << kEarlySample << " and " << kLateSample << ")");
  MESSAGE("scale: supervisor open fds (window minimum) " << early.fds << " -> " << late.fds << ", VmRSS (window maximum) "
                                                          << early.rss_kb << " kB -> " << late.rss_kb << " kB (records "
                                                          << kEarlySample << " -> " << kLateSample << ")");
  MESSAGE("scale: kinds ok " << kinds["ok"] << ", crash " << kinds["crash"] << ", handler-error " << kinds["handler-error"]
                             << ", cpu-limit " << kinds["cpu-limit"] << "; leftover processes " << left.size());
}
