// pillbox worker --amqp when it must stop taking work, against a real
// rabbitmq-server the test starts itself (rabbit_server.h; one broker for
// both cases: one test case, a function per case), as the Redis worker's
// tests (redis_worker_test.cpp) check the same on Redis:
// - SIGTERM: what runs is finished and settled, what was delivered and not
//   started is given back, and the next worker runs the rest, each once;
// - an outage of the handler (every task fails alike, not the payloads'
//   fault): the failures are held uncharged, nothing is dead-lettered, and
//   every task runs ok once the handler works again.
#include <doctest/doctest.h>
#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "supervisor/broker/amqp_connection.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using e2e::run_pillbox;

namespace {

// The broker's word on `queue` and its delay queues: nothing ready,
// nothing unacknowledged ("" when so, else what is held where).
std::string held(const e2e::RabbitServer& server, const std::string& queue) {
  const auto r = server.ctl({"list_queues", "name", "messages", "messages_unacknowledged", "--formatter", "json",
                             "--quiet"});
  REQUIRE_MESSAGE(r.exit_code == 0, r.err);
  std::string said;
  for (const json& q : json::parse(r.out)) {
    const std::string name = q.value("name", "");
    if (name != queue && name.rfind(queue + ".delay.", 0) != 0) continue;
    if (q.value("messages", -1) != 0 || q.value("messages_unacknowledged", -1) != 0) said += q.dump() + " ";
  }
  return said;
}

void submit(const e2e::RabbitServer& server, const std::string& queue, int n) {
  std::string lines;
  for (int i = 0; i < n; ++i) lines += e2e::task_line("t" + std::to_string(i), "task " + std::to_string(i));
  const auto r = run_pillbox({"submit", "--amqp", server.url(), "--queue", queue, "-"}, lines);
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
}

// The keys of the results in NAME.results, taken; each must be there once.
std::multiset<std::string> result_keys(const e2e::RabbitServer& server, const std::string& queue) {
  auto c = e2e::amqp_connect(server);
  std::multiset<std::string> keys;
  for (const auto& m : e2e::drain(c, queue + ".results")) keys.insert(e2e::header_text(m, "key"));
  return keys;
}

// The records `quarantine list` shows for NAME (none is the good outcome).
std::size_t quarantined(const e2e::RabbitServer& server, const std::string& queue) {
  const auto r = run_pillbox(e2e::quarantine_args(server, queue, {"list", "--json"}));
  REQUIRE_MESSAGE(r.exit_code == 0, r.describe());
  return r.records.size();
}

void sigterm_finishes_and_gives_back(const e2e::RabbitServer& server) {
  submit(server, "stops", 8);
  // Each task says it started, then takes 400 ms, so SIGTERM comes while
  // two run (and more are held, next in line: --prefetch, 4 x --jobs).
  e2e::TempDir started(01777, e2e::host_dir_tasks_see());
  const std::vector<std::string> slow = {"--writable", started.path(), "--", "/bin/sh", "-c",
                                         "touch " + started.path() + "/task.$$; sleep 0.4; cat"};
  auto args = std::vector<std::string>{"worker", "--amqp", server.url(), "--queue", "stops", "--jobs", "2", "--json"};
  args.insert(args.end(), slow.begin(), slow.end());
  e2e::Background first(e2e::pillbox_binary(), args);
  REQUIRE_MESSAGE(e2e::eventually([&] { return e2e::count_files_starting(started.path(), "task.") >= 2; }),
                  first.err());
  first.signal(SIGTERM);
  CHECK(first.wait() == 143);
  INFO("first worker:\n" << first.err());
  CHECK(first.err().find("stopping (SIGTERM)") != std::string::npos);
  const auto done_first = result_keys(server, "stops");
  CHECK(done_first.size() >= 2);  // what ran when SIGTERM came was finished and settled
  CHECK(done_first.size() < 8);
  // Nothing is left unacknowledged: what was not run went back to NAME.
  CHECK(e2e::eventually([&] {
    const auto r = server.ctl({"list_queues", "name", "messages_unacknowledged", "--formatter", "json", "--quiet"});
    for (const json& q : json::parse(r.out)) {
      if (q.value("name", "") == "stops") return q.value("messages_unacknowledged", -1) == 0;
    }
    return false;
  }));

  args = {"worker", "--amqp", server.url(), "--queue", "stops", "--jobs", "2", "--exit-when-idle", "1500ms", "--json"};
  args.insert(args.end(), slow.begin(), slow.end());
  const auto second = run_pillbox(args);
  INFO("second worker: " << second.describe());
  CHECK(second.exit_code == 0);
  auto keys = result_keys(server, "stops");
  keys.insert(done_first.begin(), done_first.end());
  std::set<std::string> distinct(keys.begin(), keys.end());
  CHECK(distinct.size() == 8);
  CHECK(keys.size() == 8);  // none twice
  CHECK(quarantined(server, "stops") == 0);
  const std::string still = held(server, "stops");
  CHECK_MESSAGE(still.empty(), still);
}

void handler_outage_holds_uncharged(const e2e::RabbitServer& server) {
  // The handler is broken while the flag file exists (a missing dependency,
  // say). The directory is under /tmp, which each task gets privately:
  // --share shows tasks the host's, live (the flag's removal too).
  e2e::TempDir flags;
  const std::string flag = flags.write("broken", "");
  submit(server, "outage", 12);
  e2e::Background w(e2e::pillbox_binary(),
                    {"worker", "--amqp", server.url(), "--queue", "outage", "--jobs", "2", "--breaker-window", "4",
                     "--breaker-probe-interval", "100ms", "--backoff-base", "5s", "--exit-when-idle", "1s",
                     "--share", flags.path(), "--",
                     "/bin/sh", "-c", "test -e " + flag + " && { echo 'missing dependency' >&2; exit 3; }; cat"});
  REQUIRE_MESSAGE(e2e::eventually([&] { return w.err().find("handler outage suspected") != std::string::npos; }),
                  w.err());
  CHECK(quarantined(server, "outage") == 0);
  ::unlink(flag.c_str());
  CHECK(w.wait() == 0);
  INFO(w.err());
  CHECK(w.err().find("handler works again") != std::string::npos);
  auto keys = result_keys(server, "outage");
  // The failures before the breaker opened were retried: their copies wait
  // in a delay queue (--backoff-base 5s, with jitter), which the worker
  // does not hold, so --exit-when-idle ended it first. Back in NAME, the
  // next worker runs them.
  if (keys.size() < 12) {
    auto c = e2e::amqp_connect(server);
    const std::size_t left = 12 - keys.size();
    REQUIRE_MESSAGE(e2e::eventually([&] { return e2e::ready(c, "outage") == left; }, std::chrono::seconds(30)),
                    held(server, "outage"));
    const auto next = run_pillbox({"worker", "--amqp", server.url(), "--queue", "outage", "--jobs", "2",
                                   "--exit-when-idle", "1s", "--", "/bin/sh", "-c", "cat"});
    CHECK_MESSAGE(next.exit_code == 0, next.describe());
    const auto more = result_keys(server, "outage");
    keys.insert(more.begin(), more.end());
  }
  CHECK(keys.size() == 12);
  CHECK(std::set<std::string>(keys.begin(), keys.end()).size() == 12);
  CHECK(quarantined(server, "outage") == 0);  // nothing charged to the payloads
  const std::string still = held(server, "outage");
  CHECK_MESSAGE(still.empty(), still);
}

}  // namespace

TEST_CASE("rabbitmq worker: SIGTERM gives back what it did not start; a handler outage is held, never dead-lettered") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  {
    INFO("SIGTERM: what runs is finished, the rest given back and run once by the next worker");
    sigterm_finishes_and_gives_back(server);
  }
  {
    INFO("a handler outage: failures held uncharged; all ok once it works again");
    handler_outage_holds_uncharged(server);
  }
}
