// A payload that kills its worker's supervisor every time it runs, among
// good messages, on a worker that holds more than it runs (--prefetch 8,
// --jobs 1), against a real rabbitmq-server the test starts itself
// (rabbit_server.h). After its first kill it is a suspect: it runs alone,
// and the broker's own count says the worker holds nothing else while it
// runs (messages_unacknowledged 1: the others given back, the consume
// paused), and it starts only once what was given back is acknowledged.
// So the good messages are never counted with it: every one ends ok once,
// none is dead-lettered beside it (x-delivery-limit), and the killer ends
// in NAME.dlq. The sandbox keeps a task from signalling its worker, so
// the test kills the worker for the payload, as amqp_chaos_test.cpp does.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_topology.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"
#include "tests/e2e/task_program.h"

using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

constexpr int kGood = 30;
constexpr char kQueue[] = "alone";

// The broker's word on NAME: messages ready and unacknowledged.
struct QueueCounts {
  long ready = -1;
  long unacked = -1;
};
QueueCounts counts(const e2e::RabbitServer& server) {
  const auto r = server.ctl({"list_queues", "name", "messages_ready", "messages_unacknowledged", "--formatter", "json",
                             "--quiet"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  for (const json& q : json::parse(r.out)) {
    if (q.value("name", "") == kQueue) return {q.value("messages_ready", -1L), q.value("messages_unacknowledged", -1L)};
  }
  return {};
}

// Every dead letter in NAME.dlq.
std::vector<pillbox::broker::AmqpDeadLetter> dead_letters(const e2e::RabbitServer& server) {
  return e2e::all_dead_letters(server, std::string(kQueue) + ".dlq");
}

}  // namespace

TEST_CASE("a supervisor killer runs alone on RabbitMQ: nothing held beside it, every good message ok") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  e2e::PoisonCopy program("suspect_task");
  {
    // The killer first, so that the first worker holds it with good ones.
    std::string lines = e2e::task_line("killer", "L kills its worker's supervisor");
    for (int i = 0; i < kGood; ++i) lines += e2e::task_line("good-" + std::to_string(i), "good payload " + std::to_string(i));
    const auto r = e2e::run_pillbox({"submit", "--amqp", server.url(), "--queue", kQueue, "-"}, lines);
    REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  }
  const std::vector<std::string> worker_args = {"worker", "--amqp", server.url(), "--queue", kQueue, "--jobs", "1",
                                                "--prefetch", "8", "--timeout", "120s", "--cpu", "120s", "--json",
                                                "--", program.path()};
  std::vector<std::unique_ptr<e2e::Background>> workers;
  auto stderr_of_all = [&] {
    std::string all;
    for (const auto& w : workers) all += "--- worker:\n" + w->err() + "\n";
    return all;
  };
  // Each round: a worker, until the killer runs; then it dies with it. The
  // killer ends in NAME.dlq after at most x-delivery-limit + 1 deliveries
  // (the broker's count, or the one its copies carry).
  const auto limit = pillbox::broker::worker_delivery_limit(3);
  int kills = 0;
  int alone_seen = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (dead_letters(server).empty()) {
    REQUIRE_MESSAGE(kills <= limit + 1, "the killer was not dead-lettered after " << kills << " kills\n" << stderr_of_all());
    workers.push_back(std::make_unique<e2e::Background>(e2e::pillbox_binary(), worker_args));
    e2e::Background& w = *workers.back();
    // The killer runs (its process spins), or it was dead-lettered unrun by
    // this worker (the limit counted across copies).
    REQUIRE_MESSAGE(e2e::eventually([&] { return !e2e::running_tasks(program.path()).empty() || !dead_letters(server).empty(); },
                                    60s),
                    "the killer never ran; workers:\n" << stderr_of_all());
    if (e2e::running_tasks(program.path()).empty()) {
      w.signal(SIGTERM);
      w.wait();
      break;
    }
    if (kills > 0) {
      // A suspect now (its last delivery never reported back): the worker
      // holds it alone, as the broker counts. (Its figures for a quorum
      // queue are a few seconds old: the outcomes below decide; without
      // the isolation this read 8, and 7 good messages were dead-lettered
      // with the killer at x-delivery-limit.)
      CAPTURE(kills);
      const bool alone = e2e::eventually([&] { return counts(server).unacked == 1; }, 10s, 50ms);
      CHECK_MESSAGE(alone, "held beside the suspect: " << counts(server).unacked << " unacknowledged\n" << w.err());
      alone_seen += alone;
    }
    e2e::kill_worker_with(w, e2e::running_tasks(program.path()));
    ++kills;
  }
  // The rest run on a worker that stays.
  e2e::Background last(e2e::pillbox_binary(), [&] {
    auto a = worker_args;
    a.insert(a.begin() + 5, {"--exit-when-idle", "3s"});
    return a;
  }());
  CHECK(last.wait() == 0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const auto letters = dead_letters(server);
  REQUIRE_MESSAGE(letters.size() == 1, letters.size() << " dead letters; workers:\n" << stderr_of_all() << last.err());
  CHECK(letters[0].key == "killer");
  // The broker's (delivery_limit) or a worker's (supervisor-lost, the
  // deliveries that never reported back counted across copies).
  CHECK((letters[0].first_death_reason == "delivery_limit" || letters[0].from_pillbox()));

  auto c = e2e::amqp_connect(server);
  std::map<std::string, int> ok;
  for (const auto& m : e2e::drain(c, std::string(kQueue) + ".results")) ++ok[e2e::header_text(m, "key")];
  int duplicates = 0;
  for (int i = 0; i < kGood; ++i) {
    const std::string key = "good-" + std::to_string(i);
    CHECK_MESSAGE(ok.count(key) == 1, key << " has no ok result");
    duplicates += ok.count(key) ? ok[key] - 1 : 0;
  }
  // Nothing was being settled when a worker died (the suspect starts once
  // what was given back is acknowledged): nothing ran twice.
  CHECK(duplicates == 0);
  CHECK(ok.count("killer") == 0);
  // (The broker's figures for a quorum queue are a few seconds old.)
  CHECK_MESSAGE(e2e::eventually([&] { const auto q = counts(server); return q.ready == 0 && q.unacked == 0; }, 20s, 200ms),
                "left in " << kQueue << ": " << counts(server).ready << " ready, " << counts(server).unacked
                           << " unacknowledged");
  e2e::check_no_task_left(program.path());
  MESSAGE("suspect alone: " << kills << " kills, the worker held the suspect alone in " << alone_seen << " of "
                            << std::max(kills - 1, 0) << " rounds after the first; " << kGood << " good ok ("
                            << duplicates << " duplicate results), the killer dead-lettered ("
                            << (letters[0].from_pillbox() ? "by a worker" : "by RabbitMQ, " + letters[0].first_death_reason)
                            << ") in " << took << " s");
}
