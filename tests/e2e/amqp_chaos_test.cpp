// Chaos on a real RabbitMQ broker (issue 28, point 7), measured: 1 000 good
// and 25 poison tasks submitted with `pillbox submit --amqp`, 3 real
// `pillbox worker --amqp` processes, 5 of them SIGKILLed at random moments
// (each replaced by a new one) and the broker itself SIGKILLed and started
// again mid-run, on the same node, ports and Mnesia directory, while the
// workers run. What holds (docs/distributed.md, "What happens when
// something dies, on RabbitMQ"): no good task lost and none dead-lettered;
// every poison key dead-lettered with its record; nothing left
// unacknowledged; the workers ride out the restart. What issue 28 asked
// beyond that does not hold, by the protocol the docs state (publish,
// confirm, then ack: an ack can die with a worker or the broker): ok
// results duplicated at most kills x --jobs times (the broker's restart
// adds its own), each poison key dead-lettered exactly once (a lost ack
// can fork a task). Both are bounded by what the kills can cut, checked,
// and measured with the figures. And a payload that kills its worker's
// supervisor every time ends by the broker's own delivery limit, as
// `quarantine show` says.
//
// The moments are drawn from a seeded generator (the seed is printed; set
// PILLBOX_CHAOS_SEED to draw the same ones again) and measured in progress,
// results that have arrived, not in time: the test waits on the broker's
// queues, never for a while. The figures (throughput, duplicates, kills,
// the restart's cost) are printed with MESSAGE.
//
// Tasks run private copies of the mixed_poison fixture (S: SIGSEGV,
// A: abort, L: spins, else echo), so that a task's process can be found by
// its path without seeing another test's.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "supervisor/broker/amqp_back_end.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_topology.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/chaos_fleet.h"
#include "tests/e2e/chaos_plan.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"
#include "tests/e2e/task_program.h"

using json = nlohmann::json;
using pillbox::broker::AmqpConnection;
using pillbox::broker::AmqpMessage;
using pillbox::broker::AmqpValue;
using pillbox::broker::find_field;
using e2e::check_no_task_left;
using e2e::PoisonCopy;
using e2e::running_tasks;

using e2e::header_text;
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char* kQueue = "chaos";
constexpr int kWorkers = 3;
constexpr int kJobs = 2;
// The workers' default --prefetch (default_amqp_prefetch): what each holds.
const int kPrefetch = static_cast<int>(pillbox::broker::default_amqp_prefetch(kJobs));
constexpr int kKills = 5;
constexpr int kGood = 1000;
constexpr int kPoison = 25;
constexpr std::uint32_t kMaxAttempts = 3;  // the worker's default --max-attempts

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The broker's word on queues: name -> {messages, messages_unacknowledged}.
// (rabbitmqctl: queue.declare says nothing of what consumers hold.)
json queues(const e2e::RabbitServer& server) {
  const auto r = server.ctl({"list_queues", "name", "messages", "messages_unacknowledged", "--formatter", "json",
                             "--quiet"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  json by_name = json::object();
  for (const json& q : json::parse(r.out)) by_name[q.at("name").get<std::string>()] = q;
  return by_name;
}

// What a failure's message says of the broker: its queues as it sees them,
// and what its log said of them (a quorum queue without a leader is
// "running" for rabbitmqctl; only the log tells).
std::string diagnosis(const e2e::RabbitServer& server) {
  const auto listed = server.ctl({"list_queues", "name", "type", "state", "messages", "messages_unacknowledged"});
  std::string said;
  std::istringstream log(e2e::read_file(server.log_file()));
  std::vector<std::string> lines;
  for (std::string line; std::getline(log, line);) {
    if (line.find("[error]") != std::string::npos || line.find("leader not known") != std::string::npos) {
      lines.push_back(line.substr(0, 300));
    }
  }
  const std::size_t from = lines.size() > 20 ? lines.size() - 20 : 0;
  for (std::size_t i = from; i < lines.size(); ++i) said += lines[i] + "\n";
  return "queues:\n" + listed.out + listed.err + "the broker's log, its last errors and leaderless queues (" +
         std::to_string(lines.size()) + " lines):\n" + said;
}

// Messages ready in `queue` (queue.declare, passive: fast, where rabbitmqctl
// takes a second a call); -1 when it cannot be asked.
long ready(AmqpConnection& c, const std::string& queue) {
  auto state = c.check_queue(queue);
  return state ? static_cast<long>(state->messages) : -1;
}

using Task = e2e::ChaosTask;

// `good` good tasks and `poison` poison ones (S and A in turn: both end as
// crashes), shuffled with `rng`.
std::vector<Task> plan(int good, int poison, std::mt19937_64& rng) { return e2e::chaos_plan(good, poison, "SA", rng); }

void submit(const e2e::RabbitServer& server, const std::string& queue, const std::vector<Task>& tasks) {
  std::string lines;
  for (const Task& t : tasks) lines += e2e::task_line(t.key, t.payload);
  const auto r = e2e::run_pillbox({"submit", "--amqp", server.url(), "--queue", queue, "-"}, lines);
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
}

// Workers on one queue, each under a name never used before, so that a
// result's `worker` header tells which process ran it.
class Fleet : public e2e::ChaosFleet {
 public:
  Fleet(const e2e::RabbitServer& server, const std::string& queue, std::string program, std::vector<std::string> options)
      : ChaosFleet({"--amqp", server.url(), "--queue", queue}, queue + "-", std::move(program), std::move(options)) {}
};

// NAME.results as this test reads it: consumed without a prefetch limit and
// never acknowledged, so that the broker keeps every result. A connection
// of this reader that dies with the broker then changes nothing: its
// results go back to the queue (an acknowledgement would have no answer,
// and one lost with the broker would hand a result over twice, a duplicate
// no worker made), and a new connection reads them all again.
class ResultsReader {
 public:
  struct Result {
    std::string key, status, body, worker, deliveries, message_id;
  };

  explicit ResultsReader(const e2e::RabbitServer& server) : server_(server) {}

  // Tried again for a while: a broker just started may not serve the
  // queue yet (its quorum is recovered after the listeners open).
  void connect() {
    results_.clear();
    std::string why;
    const bool consuming = e2e::eventually([&] {
      connection_.reset();
      auto c = AmqpConnection::open(*pillbox::broker::parse_amqp_url(server_.url()));
      if (!c) {
        why = c.error();
        return false;
      }
      if (auto consumed = c->consume(queue(), 0); !consumed) {
        why = consumed.message();
        return false;
      }
      connection_.emplace(std::move(*c));
      return true;
    }, 30s, 100ms);
    REQUIRE_MESSAGE(consuming, "cannot consume " << queue() << ": " << why << "\n" << diagnosis(server_));
  }
  void disconnect() { connection_.reset(); }
  static std::string queue() { return std::string(kQueue) + ".results"; }

  // Reads until `done()` holds (true) or `limit` passes (false). Fails at
  // once when no worker is left to add results.
  bool read_until(const std::function<bool()>& done, std::chrono::milliseconds limit, Fleet& fleet) {
    const auto until = Clock::now() + limit;
    while (!done()) {
      if (Clock::now() >= until) return false;
      REQUIRE_MESSAGE(!fleet.running().empty(), "every worker ended; their stderr:\n" << fleet.errors());
      auto m = connection_->next(500ms);
      REQUIRE_MESSAGE(m.has_value(), m.error());
      if (!*m) continue;
      const AmqpMessage& r = **m;
      results_.push_back({header_text(r, "key"), header_text(r, "status"), r.body, header_text(r, "worker"),
                          header_text(r, "deliveries"), header_text(r, "message_id")});
    }
    return true;
  }
  const std::vector<Result>& results() const { return results_; }

 private:
  const e2e::RabbitServer& server_;
  std::optional<AmqpConnection> connection_;
  std::vector<Result> results_;
};

// The first dead letter in the stream `dlq`, waited for (a consume from
// its first offset blocks until the broker has one).
AmqpMessage first_dead_letter(const e2e::RabbitServer& server, const std::string& dlq) {
  auto c = e2e::amqp_connect(server);
  REQUIRE(c.consume(dlq, 10, {{"x-stream-offset", std::string("first")}}).is_ok());
  auto m = c.next(30s);
  REQUIRE_MESSAGE(m.has_value(), m.error());
  REQUIRE_MESSAGE(m->has_value(), "nothing in " << dlq << " after 30 s");
  return std::move(**m);
}

// A payload that kills its worker's supervisor whenever it runs. The
// sandbox keeps a task from doing that itself (as root its uid is a pool
// uid, in a PID namespace of its own: it cannot signal the worker), so the
// test does it for the payload: whenever the payload's process runs (it
// spins: 'L'), the worker is SIGKILLed, and a new one is started, as a
// fleet's supervisor would. Each kill is a delivery the broker counts and
// no worker settles; the workers count only the first (the next ones are
// suspects, run alone, and "no start marker can be written on RabbitMQ"),
// so with --max-attempts 2 no worker ever dead-letters it: the broker does,
// past its x-delivery-limit (worker_delivery_limit: 10), after 11
// deliveries. `quarantine show` says so.
void supervisor_killer(e2e::RabbitServer& server) {
  const std::string queue = "killer";
  constexpr std::uint32_t kMaxAttempts = 2;
  const std::int64_t limit = pillbox::broker::worker_delivery_limit(kMaxAttempts);
  PoisonCopy program("chaos_killer");
  const auto t0 = Clock::now();
  submit(server, queue, {{"kills-its-supervisor", "L kills its worker's supervisor", 'L'}});
  auto c = e2e::amqp_connect(server);
  Fleet fleet(server, queue, program.path(),
              {"--jobs", "1", "--max-attempts", std::to_string(kMaxAttempts), "--timeout", "120s", "--cpu", "120s"});
  // The broker delivers it limit + 1 times: each delivery's count (0 to
  // limit) is not past the limit; the return of the last one is.
  for (std::int64_t delivery = 1; delivery <= limit + 1; ++delivery) {
    CAPTURE(delivery);
    // Back in the queue: the broker has taken it from the killed worker.
    REQUIRE_MESSAGE(e2e::eventually([&] { return ready(c, queue) == 1; }, 30s),
                    "not back in '" << queue << "' (dead-lettered early?); workers:\n" << fleet.errors());
    const std::size_t w = fleet.start();
    REQUIRE_MESSAGE(e2e::eventually([&] { return !running_tasks(program.path()).empty(); }, 30s),
                    "the payload never ran; workers:\n" << fleet.errors());
    const auto task = running_tasks(program.path());
    fleet.worker(w).signal(SIGKILL);
    CHECK(fleet.worker(w).wait() == 128 + SIGKILL);
    // Its guardian ends the payload's process: the next one seen is the
    // next delivery's.
    CHECK_MESSAGE(e2e::still_running_after(task, 10s).empty(), "the killed worker's task still runs");
  }
  const AmqpMessage letter = first_dead_letter(server, queue + ".dlq");
  const double took = seconds_since(t0);
  const auto read = pillbox::broker::read_dead_letter(letter);
  CHECK_FALSE(read.from_pillbox());  // the broker's, not a worker's
  CHECK(read.first_death_reason == "delivery_limit");
  CHECK(read.first_death_queue == queue);
  CHECK(read.key == "kills-its-supervisor");
  CHECK(read.payload == "L kills its worker's supervisor");
  CHECK(ready(c, queue) == 0);

  const auto shown = e2e::run_pillbox(e2e::quarantine_args(server, queue, {"show", "0"}));
  CHECK_MESSAGE(shown.exit_code == 0, shown.describe());
  CHECK_MESSAGE(shown.out.find("dead-lettered by RabbitMQ itself: reason delivery_limit, from queue killer") !=
                    std::string::npos,
                shown.describe());
  const auto shown_json = e2e::run_pillbox(e2e::quarantine_args(server, queue, {"show", "0", "--json"}));
  REQUIRE_MESSAGE(shown_json.records.size() == 1, shown_json.describe());
  CHECK(shown_json.records[0].at("amqp").value("first_death_reason", "") == "delivery_limit");
  CHECK(shown_json.records[0].value("key", "") == "kills-its-supervisor");
  CHECK(shown_json.records[0].value("kind", "") == "supervisor-lost");
  // No worker holds it, no worker left a process of it.
  CHECK(e2e::eventually([&] { return queues(server)[queue].value("messages_unacknowledged", -1) == 0; }, 20s, 200ms));
  check_no_task_left(program.path());
  MESSAGE("chaos/supervisor killer: " << limit + 1 << " deliveries, each SIGKILLing its worker while the payload ran, "
                                      << "then dead-lettered by RabbitMQ (delivery_limit, x-delivery-limit " << limit
                                      << ") in " << took << " s");
}

// What NAME.results and NAME.dlq ended with, checked against the plan.
struct Ledger {
  std::size_t results = 0;
  std::size_t duplicates = 0;      // ok results beyond the first for a key
  std::size_t same_duplicates = 0;  // of those, one worker's one delivery published again
  std::size_t lost = 0;            // good keys without an ok result
  std::size_t redelivered = 0;     // good keys whose first ok result came on a delivery after the first
  std::size_t dead_letters = 0;
  std::size_t extra_letters = 0;  // dead letters beyond the first for a poison key
  std::size_t same_letters = 0;   // of those, one settle published twice (the same history)
};

Ledger check_ledger(const e2e::RabbitServer& server, const std::vector<Task>& tasks,
                    const std::vector<ResultsReader::Result>& results) {
  Ledger l;
  std::map<std::string, const Task*> planned;
  for (const Task& t : tasks) planned[t.key] = &t;
  std::map<std::string, std::vector<const ResultsReader::Result*>> ok_of;
  for (const auto& r : results) {
    ++l.results;
    INFO("result of " << r.key << " by " << r.worker << ", delivery " << r.deliveries);
    REQUIRE_MESSAGE(planned.count(r.key) == 1, "a result for a key never submitted");
    CHECK(r.status == "ok");
    CHECK_MESSAGE(planned[r.key]->kind == 'g', "a poison task has an ok result");
    CHECK(r.body == planned[r.key]->payload);  // echoed, exactly
    ok_of[r.key].push_back(&r);
  }
  for (const Task& t : tasks) {
    if (t.kind != 'g') continue;
    const auto& oks = ok_of[t.key];
    if (oks.empty()) {
      ++l.lost;
      continue;
    }
    l.duplicates += oks.size() - 1;
    if (oks.front()->deliveries != "1") ++l.redelivered;
    for (std::size_t i = 1; i < oks.size(); ++i) {
      if (oks[i]->worker == oks[0]->worker && oks[i]->deliveries == oks[0]->deliveries) ++l.same_duplicates;
    }
    if (oks.size() > 1) {
      std::string seen;
      for (const auto* r : oks) seen += " (" + r->worker + ", delivery " + r->deliveries + ")";
      MESSAGE("duplicate ok results of " << t.key << ":" << seen);
    }
  }
  CHECK(l.lost == 0);

  // NAME.dlq: each poison key, with the record the worker wrote; no good
  // key there. Read whole, by offset.
  //
  // Issue 28 asks for each poison key exactly once. In the stream that
  // does not hold on RabbitMQ, by the protocol docs/distributed.md states:
  // a settle is publish, confirm, then ack, and the ack can be lost (a
  // worker killed after the confirm; the broker killed before the ack
  // reached its disk). The message then comes back. For a dead letter, its
  // letter is in twice, alike. For a first crash, the retry's copy is in
  // NAME.delay.MS and the original is run again beside it: the task forks,
  // and each branch is dead-lettered on its own history. Seen here (5 runs
  // in 23): a poison's letter after deliveries 1 (crash, chaos-0) and 2
  // (crash, chaos-4), and another of its message id after 1 (never
  // reported back), 2 (crash, chaos-1) and 3 (crash, chaos-4): chaos-0's
  // ack of the original died with the broker. So the stream is checked for
  // what holds there (every poison key at least once, all its letters of
  // its one message id, the letters beyond one a key no more than the
  // settles the kills can cut: the duplicates' bound, below), and the
  // operator's view for exactly once: `quarantine list` takes a letter of
  // an earlier one's message id, payload and signature for a copy of that
  // record (amqp_quarantine.h), leaves it out and says how many.
  std::map<std::string, std::vector<const pillbox::broker::AmqpDeadLetter*>> letters_of;
  const auto letters = e2e::all_dead_letters(server, std::string(kQueue) + ".dlq");
  for (const auto& d : letters) {
    ++l.dead_letters;
    INFO("dead letter at offset " << d.offset << ": key " << d.key << ", record " << d.record.dump().substr(0, 2000));
    CHECK(d.unreadable.empty());
    REQUIRE_MESSAGE(planned.count(d.key) == 1, "a dead letter for a key never submitted");
    const Task& t = *planned[d.key];
    CHECK_MESSAGE(t.kind != 'g', "a good task was dead-lettered");
    letters_of[d.key].push_back(&d);
    REQUIRE(d.from_pillbox());
    CHECK(d.payload == t.payload);
    CHECK(d.record.value("kind", "") == "crash");
    CHECK(d.record.at("queue").value("name", "") == kQueue);
    CHECK(d.record.at("attempts_history").size() >= 2);  // the crash, retried, crashed alike
  }
  // A letter, in short, for the figures: where, which message, its deliveries.
  auto said = [](const pillbox::broker::AmqpDeadLetter& d) {
    std::string history;
    for (const json& a : d.record.value("attempts_history", json::array())) {
      history += " " + std::to_string(a.value("delivery", 0)) + ":" + a.value("kind", "") + "@" + a.value("worker", "");
    }
    return "offset " + std::to_string(d.offset) + ", message " + d.message_id + ", deliveries" + history;
  };
  for (const Task& t : tasks) {
    if (t.kind == 'g') continue;
    const auto& mine = letters_of[t.key];
    CHECK_MESSAGE(!mine.empty(), "poison " << t.key << " was never dead-lettered");
    if (mine.size() < 2) continue;
    std::string all;
    for (const auto* d : mine) {
      CHECK(d->message_id == mine[0]->message_id);
      all += "\n  " + said(*d);
      if (d == mine[0]) continue;
      ++l.extra_letters;
      const auto history = [](const auto* letter) { return letter->record.value("attempts_history", json()); };
      l.same_letters += history(d) == history(mine[0]);
    }
    MESSAGE("poison " << t.key << " dead-lettered " << mine.size() << " times:" << all);
  }
  // The operator's view: each poison key once, its copies left out and
  // counted.
  const auto listed = e2e::run_pillbox(e2e::quarantine_args(server, kQueue, {"list", "--json", "--limit", "1000"}));
  REQUIRE_MESSAGE(listed.exit_code == 0, listed.describe());
  std::multiset<std::string> listed_keys, poison_keys;
  for (const json& r : listed.records) listed_keys.insert(r.value("key", ""));
  for (const Task& t : tasks) {
    if (t.kind != 'g') poison_keys.insert(t.key);
  }
  CHECK(listed_keys == poison_keys);
  if (l.extra_letters > 0) {
    const std::string said = std::to_string(l.extra_letters) + " message" + (l.extra_letters == 1 ? "" : "s") +
                             " of " + kQueue + ".dlq left out: dead-lettered again";
    CHECK_MESSAGE(listed.err.find(said) != std::string::npos, listed.err);
  }
  return l;
}

// Whether the broker holds anything of NAME's now: ready or unacknowledged
// in NAME or a delay queue.
std::string held_by_the_broker(const json& q) {
  std::string held;
  for (const auto& [name, info] : q.items()) {
    if (name != kQueue && name.rfind(std::string(kQueue) + ".delay.", 0) != 0) continue;
    const long messages = info.value("messages", -1L), unacked = info.value("messages_unacknowledged", -1L);
    if (messages != 0 || unacked != 0) {
      held += name + ": " + std::to_string(messages) + " messages, " + std::to_string(unacked) + " unacknowledged; ";
    }
  }
  return held;
}

std::uint64_t chaos_seed() {
  if (const char* given = std::getenv("PILLBOX_CHAOS_SEED"); given != nullptr && *given != '\0') {
    return std::strtoull(given, nullptr, 0);
  }
  return std::random_device{}();
}

}  // namespace

TEST_CASE("chaos on RabbitMQ: 5 workers SIGKILLed and the broker restarted mid-run; a supervisor killer ends at the delivery limit") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  const std::uint64_t seed = chaos_seed();
  MESSAGE("chaos seed " << seed << " (PILLBOX_CHAOS_SEED=" << seed << " draws the same moments again)");
  std::mt19937_64 rng(seed);
  const auto tasks = plan(kGood, kPoison, rng);

  const auto t0 = Clock::now();
  // NAME is made first, with the delivery limit the workers declare
  // (submit would make it with the default), and NAME.results as the
  // workers declare it: this test consumes it from the moment the workers
  // start, and a consume that raced the first worker's creation of it left
  // it without a leader for this test's connections for good, 3 runs in 8
  // (its log: "leader call - leader not known", every retry for 30 s; 0 in
  // 5 made first; 0 wedged of 108 quorum queues each declared by 3
  // connections at once, without a consumer). The delay queues are the
  // workers' own, declared at their start: RabbitMQ 3.10.8 does not bring
  // back a quorum queue made less than a second before a SIGKILL (its log
  // says "leader not known" for ever and no publish to it is confirmed;
  // made 200 ms before the kill: 3 tries in 3; 1 s: fine). Found here, when
  // a worker declared a delay queue as a retry first needed it: a kill
  // within 60 ms of NAME.delay.1's declaration wedged every worker that
  // retried into it (docs/distributed.md, the crash table). The broker is
  // killed here long after the first worker started.
  {
    auto c = e2e::amqp_connect(server);
    REQUIRE(pillbox::broker::declare_topology(
                c, {.queue = kQueue, .delivery_limit = pillbox::broker::worker_delivery_limit(kMaxAttempts)})
                .has_value());
    REQUIRE(c.declare_queue(ResultsReader::queue(), {{"x-queue-type", std::string("quorum")},
                                                     {"x-max-length", std::int64_t{100000}},
                                                     {"x-overflow", std::string("drop-head")}})
                .has_value());
  }
  submit(server, kQueue, tasks);
  const double submit_s = seconds_since(t0);
  {
    INFO("a payload that kills its worker's supervisor every time");
    supervisor_killer(server);
  }

  PoisonCopy program("chaos_task");
  // No --exit-when-idle: a worker counts the broker's outage as idle time.
  Fleet fleet(server, kQueue, program.path(), {"--jobs", std::to_string(kJobs), "--backoff-base", "10ms"});
  const auto run_start = Clock::now();
  for (int i = 0; i < kWorkers; ++i) fleet.start();
  ResultsReader reader(server);
  reader.connect();

  // Six moments, each after 40 to 140 more results: five kills of a worker
  // drawn among those running, and the broker's restart at a place drawn
  // among them (not the first: the fleet is then well under way).
  const int restart_after = std::uniform_int_distribution<int>(1, kKills - 1)(rng);
  std::size_t progress = 0;
  std::set<std::string> killed;
  std::vector<std::size_t> through_restart;  // the workers running when the broker was killed
  double stop_ms = 0, start_ms = 0, back_s = 0;
  std::size_t restart_at = 0;
  for (int k = 0; k < kKills; ++k) {
    progress += std::uniform_int_distribution<std::size_t>(40, 140)(rng);
    REQUIRE_MESSAGE(reader.read_until([&] { return reader.results().size() >= progress; }, 120s, fleet),
                    "NAME.results did not reach " << progress << " (has " << reader.results().size()
                                                  << ")\n" << diagnosis(server) << "workers:\n" << fleet.errors());
    const auto live = fleet.running();
    const std::size_t victim = live[std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng)];
    killed.insert(fleet.name(victim));
    fleet.worker(victim).signal(SIGKILL);
    CHECK(fleet.worker(victim).wait() == 128 + SIGKILL);
    fleet.start();
    if (k + 1 != restart_after) continue;

    progress += std::uniform_int_distribution<std::size_t>(40, 140)(rng);
    REQUIRE_MESSAGE(reader.read_until([&] { return reader.results().size() >= progress; }, 120s, fleet),
                    "NAME.results did not reach " << progress << "\n" << diagnosis(server) << "workers:\n"
                                                                  << fleet.errors());
    through_restart = fleet.running();
    restart_at = reader.results().size();
    reader.disconnect();
    auto at = Clock::now();
    server.stop(SIGKILL);
    stop_ms = std::chrono::duration<double, std::milli>(Clock::now() - at).count();
    at = Clock::now();
    server.start();
    start_ms = std::chrono::duration<double, std::milli>(Clock::now() - at).count();
    reader.connect();
    // Back: every worker that ran through it said so (its links connected
    // again and consumed anew).
    REQUIRE_MESSAGE(e2e::eventually([&] {
                      for (std::size_t i : through_restart) {
                        if (fleet.worker(i).err().find("RabbitMQ is back") == std::string::npos) return false;
                      }
                      return true;
                    }, 60s),
                    "the workers did not come back; workers:\n" << fleet.errors());
    back_s = seconds_since(at);
  }

  // The end: every good key has an ok result, every poison key is in
  // NAME.dlq, and the broker holds nothing of NAME's (ready or
  // unacknowledged, in NAME or a delay queue).
  std::set<std::string> good_keys;
  for (const Task& t : tasks) {
    if (t.kind == 'g') good_keys.insert(t.key);
  }
  std::set<std::string> ok_keys;
  std::size_t seen = 0;
  const bool all_in = reader.read_until([&] {
    for (; seen < reader.results().size(); ++seen) ok_keys.insert(reader.results()[seen].key);
    return ok_keys.size() >= good_keys.size();
  }, 150s, fleet);
  if (!all_in) {
    std::string missing;
    for (const auto& k : good_keys) {
      if (ok_keys.count(k) == 0 && missing.size() < 400) missing += k + " ";
    }
    FAIL("good keys without a result (" << good_keys.size() - ok_keys.size() << "): " << missing << "\n"
                                        << diagnosis(server) << "workers:\n" << fleet.errors());
  }
  const double all_ok_s = seconds_since(run_start);
  std::string held;
  const bool settled = e2e::eventually([&] { return (held = held_by_the_broker(queues(server))).empty(); }, 60s, 200ms);
  CHECK_MESSAGE(settled, "the broker still holds " << held << "\n" << diagnosis(server) << "workers:\n"
                                                     << fleet.errors());
  const double wall = seconds_since(run_start);

  // The workers stop as an operator stops them; those that ran through the
  // restart told of it, lost and back, and went on. Once, or twice: a
  // worker's publishing link, idle, finds its connection gone only at its
  // next publish, which may come after the consuming link is back (seen
  // here: "lost ... consumes link", "back", "lost ... publishes link:
  // cannot publish to queue 'chaos.results': a socket error occurred",
  // "back"); the summary then counts 2 outages.
  for (std::size_t i : fleet.running()) fleet.worker(i).signal(SIGTERM);
  std::size_t through = 0, told_twice = 0;
  for (std::size_t i = 0; i < fleet.size(); ++i) {
    const bool was_killed = killed.count(fleet.name(i)) != 0;
    if (was_killed) continue;
    INFO(fleet.name(i) << " stderr:\n" << fleet.worker(i).err());
    const int code = fleet.worker(i).wait();
    CHECK((code == 0 || code == 128 + SIGTERM));
    const std::string err = fleet.worker(i).err();
    const bool ran_through = std::find(through_restart.begin(), through_restart.end(), i) != through_restart.end();
    through += ran_through;
    const std::size_t lost = count_of(err, "lost RabbitMQ: ");
    if (ran_through) {
      CHECK((lost == 1 || (lost == 2 && count_of(err, "lost RabbitMQ: publishes link: ") == 1)));
    } else {
      CHECK(lost == 0);
    }
    told_twice += lost == 2;
    CHECK(count_of(err, "RabbitMQ is back") == lost);
    CHECK(count_of(err, "RabbitMQ lost " + std::to_string(lost) + (lost == 1 ? " time\n" : " times\n")) == 1);
    CHECK(err.find("a RabbitMQ error") == std::string::npos);  // none stopped on an error
  }
  // Nothing held once they are gone either (what a stopping worker gives
  // back is a copy, and there was nothing to give).
  CHECK(held_by_the_broker(queues(server)).empty());
  check_no_task_left(program.path());

  const Ledger l = check_ledger(server, tasks, reader.results());
  // What comes twice comes from the messages the broker had handed out
  // unacknowledged when a kill cut their settles. A worker killed: each
  // settle under way comes back and runs again, and a worker has at most
  // --jobs of them under way (it starts no task beyond: amqp_back_end.h),
  // however deep its prefetch. The broker killed: the same from what its
  // disk had (its log is a prefix of what happened, in which no consumer
  // ever held more than its prefetch), and besides, a publish whose
  // confirm died with the broker is sent again by the worker's publishing
  // link (docs/distributed.md): up to --prefetch + --jobs per worker
  // running then. Issue 28 bounds duplicates by kills x jobs, which leaves
  // the broker's restart out: measured here beside it (at the default
  // --prefetch, 2: 5 to 12 in 21 runs, 4 over kills x jobs, none over
  // (kills + the broker's) x jobs; at --prefetch 8: 14 to 18 in 4 runs).
  const std::size_t bound = kKills * kJobs + through_restart.size() * (kPrefetch + kJobs);
  CHECK(l.duplicates <= bound);
  CHECK(l.extra_letters <= bound);
  MESSAGE("chaos/rabbitmq: " << tasks.size() << " tasks (" << kGood << " good, " << kPoison << " poison) submitted in "
          << submit_s << " s; " << kWorkers << " workers x --jobs " << kJobs << ", " << kKills << " SIGKILLs, "
          << fleet.size() << " workers in all; every good key ok " << all_ok_s << " s after the first worker started, "
          << "all settled at " << wall << " s (" << tasks.size() / wall << " tasks/s, restart included); "
          << l.results << " ok results, " << l.duplicates << " duplicated (at most " << bound << "; kills x jobs = "
          << kKills * kJobs << "; " << l.same_duplicates << " of them one delivery published twice), " << l.lost
          << " lost, " << l.redelivered
          << " good keys first ok on a later delivery; " << l.dead_letters << " dead letters for " << kPoison
          << " poison keys (" << l.extra_letters << " beyond one a key, " << l.same_letters
          << " of them one settle published twice, the others forks); the broker SIGKILLed after "
          << restart_at << " results (stopped in " << stop_ms << " ms, started in " << start_ms << " ms, "
          << through_restart.size() << " workers through it, all back " << back_s << " s after the start began, "
          << told_twice << " of the " << through << " that ran to the end told of it twice)");
}
