// Chaos on librdkafka's mock cluster (issue 29, Must-hold 6), measured:
// 1 000 good and 25 poison records over 6 partitions, 3 `pillbox worker
// --kafka` processes in one consumer group (--jobs 2, --session-timeout
// 6s), 5 of them SIGKILLed at random moments and each replaced by a new
// one (the group rebalances: the dead member's partitions go to the others
// once its session times out, and again when its replacement joins). The
// poison: 24 crashes (S: SIGSEGV, A: abort) and one record that kills its
// worker's supervisor whenever it runs: the sandbox keeps a task from
// signalling its worker, so the test plays that part, SIGKILLing the worker
// that runs it (as kafka_worker_test does) and starting another. Then the
// workers drain and leave by themselves (--exit-when-idle).
//
// What holds (docs/distributed.md, Kafka): no good record lost (each good
// key has an ok result in T.results); ok results duplicated at most
// kills x --jobs times (at least once, no transactions on the mock: a
// worker killed after its result was acknowledged and before its settled
// entry was runs the record again; counted by pillbox.dedupe); each poison
// key in T.dlq under one pillbox.dedupe (its copies, made the same way,
// counted); the worker-killing record dead-lettered as supervisor-lost
// after --max-attempts deliveries that never reported back; every
// partition's committed offset at its end; no task process left.
//
// The moments are drawn from a seeded generator (the seed is printed; set
// PILLBOX_CHAOS_SEED to draw the same ones again) and measured in progress
// (ok verdicts the workers have told), not in time. The figures are
// printed with MESSAGE.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/chaos_fleet.h"
#include "tests/e2e/chaos_plan.h"
#include "tests/e2e/kafka_client.h"
#include "tests/e2e/kafka_mock.h"
#include "tests/e2e/support.h"
#include "tests/e2e/task_program.h"

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kTopic = "chaos";
constexpr const char* kGroup = "pillbox";  // the workers' default --group
constexpr int kPartitions = 6;
constexpr int kWorkers = 3;
constexpr int kJobs = 2;
constexpr int kKills = 5;
constexpr int kGood = 1000;
constexpr int kCrashes = 24;  // and the killer: 25 poison
constexpr int kMaxAttempts = 3;  // the worker's default --max-attempts
const std::string kKiller = "kills-its-supervisor";

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

using Task = e2e::ChaosTask;

// `good` good records, `crashes` crashing ones (S and A in turn) and the
// killer (L: it spins, and the test kills its worker), shuffled with `rng`.
std::vector<Task> plan(int good, int crashes, std::mt19937_64& rng) {
  return e2e::chaos_plan(good, crashes, "SA", rng, {{kKiller, "L kills its worker's supervisor", 'L'}});
}

// What the workers told so far (--json verdict lines): how many ok, and
// whether the killer was dead-lettered.
struct Told {
  std::size_t ok = 0;
  bool killer_dead_lettered = false;
};
Told told(const std::string& lines) {
  Told t;
  std::istringstream in(lines);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line, nullptr, false);
    if (!j.is_object()) continue;  // the last line, half written
    const std::string verdict = j.value("verdict", "");
    t.ok += verdict == "ok";
    t.killer_dead_lettered |= verdict == "dead-lettered" && j.value("key", "") == kKiller;
  }
  return t;
}

// The CPU time (clock ticks, user and system) process `pid` has used; 0
// when it is gone.
long cpu_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::vector<std::string> f;
  for (std::string s; fields >> s && f.size() < 13;) f.push_back(s);
  return f.size() < 13 ? 0 : std::stol(f[11]) + std::stol(f[12]);  // utime, stime: fields 14 and 15
}

// Workers in one group, each under a consumer name never used before, so
// that an attempt's `worker` tells which process ran it.
class Fleet : public e2e::ChaosFleet {
 public:
  Fleet(std::string bootstrap, std::string program, std::vector<std::string> options)
      : ChaosFleet({"--kafka", std::move(bootstrap), "--topic", kTopic}, std::string(kTopic) + "-", std::move(program),
                   std::move(options)) {}

  // The running worker whose process tree holds `pid`, if any.
  std::optional<std::size_t> running_ancestor_of(pid_t pid) {
    std::map<pid_t, pid_t> parent;
    for (const auto& p : e2e::list_processes()) parent[p.pid] = p.ppid;
    for (pid_t at = pid; at > 1 && parent.count(at) != 0; at = parent[at]) {
      for (std::size_t i : running()) {
        if (worker(i).pid() == at) return i;
      }
    }
    return std::nullopt;
  }
  // The processes of the task program that worker `i` runs.
  std::vector<pid_t> tasks_of(std::size_t i) {
    std::vector<pid_t> mine;
    for (pid_t pid : e2e::running_tasks(program())) {
      if (running_ancestor_of(pid) == std::optional<std::size_t>(i)) mine.push_back(pid);
    }
    return mine;
  }
};

// What T.results, T.dlq and the attempt log ended with, checked against the
// plan.
struct Ledger {
  std::size_t results = 0;
  std::size_t duplicates = 0;     // ok results beyond the first of a record (by pillbox.dedupe)
  std::size_t lost = 0;           // good keys without an ok result
  std::size_t dead_letters = 0;
  std::size_t extra_letters = 0;  // dead letters beyond the first of a record (by pillbox.dedupe)
  std::size_t redelivered = 0;    // records of T started more than once
  std::size_t killer_starts = 0;  // the killer's deliveries that began
  std::size_t killer_lost = 0;    // of those, the ones that never ended (no end entry)
  std::string killer_log;         // its attempt-log entries, in short
};

Ledger check_ledger(const std::string& bootstrap, const std::vector<Task>& tasks) {
  Ledger l;
  std::map<std::string, const Task*> planned;
  for (const Task& t : tasks) planned[t.key] = &t;
  // Each record's place in T: its dedupe key, "T/p@o".
  std::map<std::string, std::string> dedupe_of;
  for (const auto& r : e2e::read_topic(bootstrap, kTopic)) {
    REQUIRE(r.key.has_value());
    dedupe_of[*r.key] = std::string(kTopic) + "/" + std::to_string(r.partition) + "@" + std::to_string(r.offset);
  }
  REQUIRE(dedupe_of.size() == tasks.size());

  std::map<std::string, std::map<std::string, std::size_t>> ok_of;  // key -> dedupe -> copies
  for (const auto& r : e2e::read_topic(bootstrap, std::string(kTopic) + ".results")) {
    ++l.results;
    REQUIRE(r.key.has_value());
    INFO("result of " << *r.key << " at " << r.partition << "@" << r.offset);
    REQUIRE_MESSAGE(planned.count(*r.key) == 1, "a result for a key never submitted");
    CHECK_MESSAGE(planned[*r.key]->kind == 'g', "a poison record has an ok result");
    CHECK(r.value == std::optional<std::string>(planned[*r.key]->payload));  // echoed, exactly
    const auto dedupe = r.header("pillbox.dedupe");
    REQUIRE(dedupe.has_value());
    CHECK(*dedupe == dedupe_of[*r.key]);
    ++ok_of[*r.key][*dedupe];
  }
  for (const Task& t : tasks) {
    if (t.kind != 'g') continue;
    if (ok_of[t.key].empty()) {
      ++l.lost;
      continue;
    }
    for (const auto& [dedupe, copies] : ok_of[t.key]) l.duplicates += copies - 1;
  }
  CHECK(l.lost == 0);

  std::map<std::string, std::map<std::string, std::size_t>> letters_of;  // key -> dedupe -> copies
  for (const auto& d : e2e::read_topic(bootstrap, std::string(kTopic) + ".dlq")) {
    ++l.dead_letters;
    REQUIRE(d.key.has_value());
    const auto record_text = d.header("pillbox-record");
    INFO("dead letter " << *d.key << " at " << d.partition << "@" << d.offset << ", record "
                        << record_text.value_or("(none)").substr(0, 2000));
    REQUIRE_MESSAGE(planned.count(*d.key) == 1, "a dead letter for a key never submitted");
    const Task& t = *planned[*d.key];
    CHECK_MESSAGE(t.kind != 'g', "a good record was dead-lettered");
    CHECK(d.value == std::optional<std::string>(t.payload));  // the original, exact
    const auto dedupe = d.header("pillbox.dedupe");
    REQUIRE(dedupe.has_value());
    CHECK(*dedupe == dedupe_of[t.key]);
    ++letters_of[t.key][*dedupe];
    REQUIRE(record_text.has_value());
    const json record = json::parse(*record_text);
    const std::string kind = t.kind == 'L' ? "supervisor-lost" : "crash";
    CHECK(d.header("pillbox.kind") == std::optional<std::string>(kind));
    CHECK(record.value("kind", "") == kind);
  }
  for (const Task& t : tasks) {
    if (t.kind == 'g') continue;
    const auto& mine = letters_of[t.key];
    CHECK_MESSAGE(mine.size() == 1, "poison " << t.key << " dead-lettered under " << mine.size() << " dedupe keys");
    for (const auto& [dedupe, copies] : mine) {
      l.extra_letters += copies - 1;
      if (copies > 1) MESSAGE("poison " << t.key << " (" << dedupe << ") dead-lettered " << copies << " times");
    }
  }

  // The attempt log: every record of T settled; the killer dead-lettered
  // once --max-attempts of its deliveries began and never ended. (A
  // delivery whose partition was taken away while it ran ended there,
  // "released: partition revoked", uncharged: it does not count, and the
  // killer then began once more.)
  std::map<std::string, std::set<long>> starts, ends;
  std::set<std::string> settled;
  std::map<std::string, std::string> key_of;
  for (const auto& [key, dedupe] : dedupe_of) key_of[dedupe.substr(std::string(kTopic).size() + 1)] = key;
  const std::string killer_at = dedupe_of[kKiller].substr(std::string(kTopic).size() + 1);
  for (const auto& r : e2e::read_topic(bootstrap, std::string(kTopic) + ".pillbox-attempts")) {
    REQUIRE(r.value.has_value());
    const json e = json::parse(*r.value);
    const std::string where = std::to_string(e.at("partition").get<int>()) + "@" + std::to_string(e.at("offset").get<long>());
    const std::string entry = e.at("entry");
    const long delivery = e.at("delivery").get<long>();
    if (entry == "start") starts[where].insert(delivery);
    if (entry == "end") ends[where].insert(delivery);
    if (entry == "settled") settled.insert(where);
    if (where == killer_at) {
      const json ended = e.value("record", json::object());
      l.killer_log += " " + entry + " " + std::to_string(delivery) + " (" +
                      (entry == "end" ? ended.value("worker", "") + ": " + ended.value("kind", "") + ", " +
                                            ended.value("note", "")
                                      : e.value("worker", "")) +
                      ")";
    }
  }
  for (const auto& item : key_of) {
    const std::string& where = item.first;  // clang 14 cannot capture a structured binding
    const std::string& key = item.second;
    CHECK_MESSAGE(settled.count(where) == 1, key << " (" << where << ") has no settled entry");
    l.redelivered += starts[where].size() > 1;
  }
  l.killer_starts = starts[killer_at].size();
  for (long d : starts[killer_at]) l.killer_lost += ends[killer_at].count(d) == 0;
  CHECK_MESSAGE(l.killer_lost == static_cast<std::size_t>(kMaxAttempts), "the killer's attempt log:" << l.killer_log);
  return l;
}

std::uint64_t chaos_seed() {
  if (const char* given = std::getenv("PILLBOX_CHAOS_SEED"); given != nullptr && *given != '\0') {
    return std::strtoull(given, nullptr, 0);
  }
  return std::random_device{}();
}

}  // namespace

TEST_CASE("chaos on Kafka (the mock cluster): 5 workers SIGKILLed at random, a record that kills its worker") {
  std::vector<e2e::KafkaTopicSpec> topics;
  for (const char* suffix : {"", ".pillbox-attempts", ".dlq", ".results"}) {
    topics.push_back({std::string(kTopic) + suffix, kPartitions});
  }
  e2e::KafkaMock mock(topics);
  REQUIRE_KAFKA_MOCK(mock);
  const std::uint64_t seed = chaos_seed();
  MESSAGE("chaos seed " << seed << " (PILLBOX_CHAOS_SEED=" << seed << " draws the same moments again)");
  std::mt19937_64 rng(seed);
  const auto tasks = plan(kGood, kCrashes, rng);
  e2e::PoisonCopy program("kchaos_task");

  const auto t0 = Clock::now();
  {
    std::string lines;
    for (const Task& t : tasks) lines += e2e::task_line(t.key, t.payload);
    const auto r = e2e::run_pillbox({"submit", "--kafka", mock.bootstrap(), "--topic", kTopic, "-"}, lines);
    REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  }
  const double submit_s = seconds_since(t0);

  // --exit-when-idle counts while a worker holds its share of the group,
  // not during a rebalance: a worker whose partitions are done may leave
  // while a killed one's wait to be handed on (the killed one's
  // replacement, never idle before the group gave it its share, takes
  // them). The killer spins: --timeout and --cpu let it run until the
  // test has seen it and killed its worker.
  Fleet fleet(mock.bootstrap(), program.path(),
              {"--jobs", std::to_string(kJobs), "--session-timeout", "6s", "--backoff-base", "10ms",
               "--timeout", "120s", "--cpu", "120s", "--exit-when-idle", "5s", "--json"});
  const auto run_start = Clock::now();
  for (int i = 0; i < kWorkers; ++i) fleet.start();

  // Kills at random moments (after 40 to 140 more ok verdicts each), and
  // whenever the killer runs (its process has used half a second of CPU:
  // nothing else here does), until the killer is dead-lettered.
  std::set<std::string> killed;
  int random_kills = 0, killer_kills = 0;
  std::size_t next_kill_at = std::uniform_int_distribution<std::size_t>(40, 140)(rng);
  const long spun = std::max(1L, sysconf(_SC_CLK_TCK) / 2);
  auto kill_and_replace = [&](std::size_t victim, const std::vector<pid_t>& task) {
    killed.insert(fleet.name(victim));
    e2e::kill_worker_with(fleet.worker(victim), task);
    fleet.start();
  };
  const auto chaos_until = Clock::now() + 180s;
  for (;;) {
    const Told said = told(fleet.verdicts());
    const bool killer_done = said.killer_dead_lettered;
    if (killer_done && random_kills == kKills) break;
    REQUIRE_MESSAGE(Clock::now() < chaos_until, "after 180 s: " << random_kills << " random kills, " << killer_kills
                                                                << " of the killer's workers, killer dead-lettered: "
                                                                << killer_done << "\nworkers:\n" << fleet.errors());
    REQUIRE_MESSAGE(!fleet.running().empty(), "every worker ended; their stderr:\n" << fleet.errors());
    bool acted = false;
    for (pid_t pid : e2e::running_tasks(program.path())) {
      if (cpu_ticks(pid) < spun) continue;
      const auto victim = fleet.running_ancestor_of(pid);
      REQUIRE_MESSAGE(victim.has_value(), "the killer runs (pid " << pid << ") under no running worker: "
                                                                  << e2e::describe(e2e::processes_of(program.path())));
      kill_and_replace(*victim, {pid});
      ++killer_kills;
      acted = true;
      break;
    }
    const std::size_t ok = said.ok;
    if (!acted && random_kills < kKills && ok >= next_kill_at) {
      const auto live = fleet.running();
      const std::size_t victim = live[std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng)];
      kill_and_replace(victim, fleet.tasks_of(victim));
      ++random_kills;
      next_kill_at = ok + std::uniform_int_distribution<std::size_t>(40, 140)(rng);
      acted = true;
    }
    if (!acted) std::this_thread::sleep_for(50ms);
  }
  const double chaos_s = seconds_since(run_start);

  // The drain: each worker left leaves by itself once there is nothing new.
  for (std::size_t i : fleet.running()) {
    INFO(fleet.name(i) << " stderr:\n" << fleet.worker(i).err());
    CHECK(fleet.worker(i).wait(150s) == 0);
  }
  const double wall = seconds_since(run_start);
  e2e::check_no_task_left(program.path());

  const Ledger l = check_ledger(mock.bootstrap(), tasks);
  const auto progress = e2e::group_progress(mock.bootstrap(), kTopic, kGroup);
  for (const auto& [partition, end] : progress.end) {
    const int p = partition;
    CAPTURE(p);
    CHECK(progress.committed.at(p) == end);
  }
  // A record runs twice when its worker is killed after its result (or
  // dead letter) was acknowledged and before its settled entry was: at
  // most --jobs of them per kill.
  const int kills = random_kills + killer_kills;
  CHECK(l.duplicates <= static_cast<std::size_t>(kills * kJobs));
  CHECK(l.extra_letters <= static_cast<std::size_t>(kills * kJobs));
  MESSAGE("chaos/kafka (mock cluster, 3 brokers in memory): " << tasks.size() << " records (" << kGood << " good, "
          << kCrashes << " crashes, 1 worker killer) over " << kPartitions << " partitions submitted in " << submit_s
          << " s; " << kWorkers << " workers x --jobs " << kJobs << ", " << kills << " SIGKILLs (" << random_kills
          << " at random, " << killer_kills << " of the killer's workers), " << fleet.size()
          << " workers in all; chaos over at " << chaos_s << " s, all drained and gone at " << wall << " s ("
          << tasks.size() / wall << " records/s, the idle wait included); " << l.results << " ok results, "
          << l.duplicates << " duplicated (at most kills x jobs = " << kills * kJobs << "), " << l.lost << " lost; "
          << l.dead_letters << " dead letters for 25 poison keys (" << l.extra_letters << " copies); "
          << l.redelivered << " records started more than once; the killer started " << l.killer_starts << " times, "
          << l.killer_lost << " of them never ended; its attempt log:" << l.killer_log);
}
