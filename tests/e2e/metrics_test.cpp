// `pillbox run --metrics` (issue 16, Metrics): a real run over JSON lines on
// a stdin this test keeps open, so the run is alive and idle while it is
// scraped over real HTTP on a free loopback port; the counts are checked
// against what the run printed and what its store holds, and the text
// against `promtool check metrics` (Debian's prometheus package).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <httplib.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/live_run.h"
#include "tests/e2e/metrics_scrape.h"
#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

using e2e::sql_int;
using e2e::LiveRun;
using e2e::metrics_port;
using e2e::sample;
using e2e::Scrape;
using e2e::scrape;
using e2e::task_line;

TEST_CASE("run --metrics: counts match what the run printed and what its store holds; promtool accepts the text") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777);
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  LiveRun run({"run", "--json", "--store", store, "--jobs", "2", "--no-breaker", "--backoff-base", "20ms",
               "--metrics", "127.0.0.1:0", "-", "--writable", markers.path(), "--", e2e::fixture("poison_corpus"),
               markers.path()});
  const int port = metrics_port(run);
  INFO(run.err_seen());
  REQUIRE(port > 0);

  // Before any task: the run's families are there, at 0; the store is read.
  {
    const Scrape first = scrape(port);
    REQUIRE(first.status == 200);
    CHECK(first.content_type == "text/plain; version=0.0.4; charset=utf-8");
    CHECK(sample(first.body, "pillbox_slots") == 2);
    CHECK(sample(first.body, "pillbox_slots_busy") == 0);
    CHECK(sample(first.body, "pillbox_attempt_duration_seconds_count") == 0);
  }

  // 5 ok, 3 crashers with one fingerprint ('S'), 1 with another ('A').
  std::string input;
  for (int i = 1; i <= 5; ++i) input += task_line("good-" + std::to_string(i), "good payload " + std::to_string(i));
  for (int i = 1; i <= 3; ++i) input += task_line("segv-" + std::to_string(i), "S crasher " + std::to_string(i));
  input += task_line("abort-1", "A checksum mismatch");
  run.write(input);
  std::map<std::string, int> verdicts;
  for (int seen = 0; seen < 9;) {
    auto line = run.out_line();
    REQUIRE_MESSAGE(line.has_value(), run.err_seen());
    const auto j = nlohmann::json::parse(*line);
    ++verdicts[j["kind"].get<std::string>() + "/" + j["verdict"].get<std::string>()];
    ++seen;
  }
  CHECK(verdicts["ok/ok"] == 5);
  CHECK(verdicts["crash/quarantined"] == 4);

  // The run is idle now, waiting for more lines. The writes of ok tasks may
  // reach the store a turn after their verdict is printed (docs/architecture.md,
  // "Ledger"): the store's part is read again until it has them all.
  Scrape s;
  REQUIRE(e2e::eventually([&] {
    s = scrape(port);
    return s.status == 200 && sample(s.body, "pillbox_store_tasks{state=\"ok\"}") == 5;
  }));
  INFO(s.body);
  // What the run did: 1 attempt per good payload, 2 per crasher (the same
  // deterministic failure twice), each verdict once.
  CHECK(sample(s.body, "pillbox_tasks_total{kind=\"ok\",verdict=\"ok\"}") == 5);
  CHECK(sample(s.body, "pillbox_tasks_total{kind=\"crash\",verdict=\"quarantined\"}") == 4);
  CHECK(sample(s.body, "pillbox_attempts_total{kind=\"ok\"}") == 5);
  CHECK(sample(s.body, "pillbox_attempts_total{kind=\"crash\"}") == 8);
  CHECK(sample(s.body, "pillbox_attempt_duration_seconds_count") == 13);
  CHECK(sample(s.body, "pillbox_attempt_duration_seconds_bucket{le=\"+Inf\"}") == 13);
  CHECK(sample(s.body, "pillbox_attempt_duration_seconds_sum") > 0);
  CHECK(sample(s.body, "pillbox_new_fingerprints_total") == 2);
  CHECK(sample(s.body, "pillbox_slots_busy") == 0);
  CHECK(sample(s.body, "pillbox_slots") == 2);
  CHECK(sample(s.body, "pillbox_breaker_open") == 0);
  CHECK(sample(s.body, "pillbox_input_errors_total") == 0);
  // What the store holds, as the store says it.
  CHECK(sample(s.body, "pillbox_store_up") == 1);
  CHECK(sample(s.body, "pillbox_quarantine_records{status=\"quarantined\",kind=\"crash\"}") ==
        sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined' AND kind = 'crash'"));
  CHECK(sample(s.body, "pillbox_quarantine_records{status=\"quarantined\",kind=\"crash\"}") == 4);
  CHECK(sample(s.body, "pillbox_quarantine_records{status=\"resolved\",kind=\"crash\"}") == 0);
  CHECK(sample(s.body, "pillbox_quarantine_fingerprints") ==
        sql_int(db, "SELECT count(DISTINCT fingerprint) FROM quarantine"));
  CHECK(sample(s.body, "pillbox_quarantine_fingerprints") == 2);
  CHECK(sample(s.body, "pillbox_store_tasks{state=\"quarantined\"}") ==
        sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'quarantined'"));
  CHECK(sample(s.body, "pillbox_store_tasks{state=\"ok\"}") == sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'"));
  CHECK(sample(s.body, "pillbox_store_tasks{state=\"pending\"}") == 0);

  e2e::check_with_promtool(s.body);

  // A second pillbox cannot take the port (no SO_REUSEPORT sharing): a
  // usage error, before it runs anything.
  {
    const auto second = e2e::run_pillbox({"run", "--json", "--no-store", "--handler", "echo", "--metrics",
                                          "127.0.0.1:" + std::to_string(port), "-"},
                                         task_line("x", "never run"));
    INFO(second.describe());
    CHECK(second.exit_code == 2);
    CHECK(second.err.find("cannot listen on 127.0.0.1:" + std::to_string(port)) != std::string::npos);
    CHECK(second.records.empty());
  }

  // Anything but /metrics is not found.
  CHECK(scrape(port, "/").status == 404);
  CHECK(scrape(port, "/metrics/../etc").status == 404);

  // The run ends when its input does; its server goes with it.
  run.close_stdin();
  CHECK(run.wait() == 1);  // some tasks failed
  CHECK(scrape(port).status == 0);  // nothing listens any more
}

TEST_CASE("run --metrics: the breaker gauge is 1 while a handler outage is suspected, 0 once it is over") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);
  // poison_corpus fails every payload the same way while its run counter is
  // below the limit: an outage, until the test lowers the limit.
  const std::string counter = work.write("runs", "");
  REQUIRE(::chmod(counter.c_str(), 0666) == 0);
  const std::string limit = work.write("limit", "100000");
  LiveRun run({"run", "--json", "--store", dir.path() + "/store", "--jobs", "2", "--breaker-probe-interval", "50ms",
               "--metrics", "127.0.0.1:0", "--writable", work.path(), "-", "--", e2e::fixture("poison_corpus"),
               work.path(), counter, limit});
  const int port = metrics_port(run);
  INFO(run.err_seen());
  REQUIRE(port > 0);
  std::string input;
  for (int i = 1; i <= 30; ++i) input += task_line("doc-" + std::to_string(i), "document " + std::to_string(i));
  run.write(input);

  // The run says when it suspects an outage (and when it is over) on stderr;
  // the gauge follows a moment later, when the outcome that moved the
  // breaker has been handled: read until it does.
  auto wait_for_notice = [&](const std::string& what) {
    while (auto line = run.err_line()) {
      if (line->find(what) != std::string::npos) return true;
    }
    return false;
  };
  auto breaker_gauge_is = [&](double value) {
    return e2e::eventually([&] { return sample(scrape(port).body, "pillbox_breaker_open") == value; });
  };
  REQUIRE(wait_for_notice("handler outage suspected"));
  CHECK(breaker_gauge_is(1));
  work.write("limit", "0");  // the dependency is back: the next probe succeeds
  REQUIRE(wait_for_notice("handler outage over"));
  CHECK(breaker_gauge_is(0));
  const Scrape s = scrape(port);
  INFO(s.body);
  CHECK(sample(s.body, "pillbox_attempts_total{kind=\"handler-error\"}") > 0);
  e2e::check_with_promtool(s.body);
  run.close_stdin();
  CHECK(run.wait() == 0);  // every document ran ok in the end
}

// Issue 25: the scrape's own connection to the store once closed a plain
// descriptor of pillbox.db, which drops every POSIX lock this process held
// on it, SQLite's included. The next CLI reader then took itself for the
// last connection, checkpointed and deleted the WAL under the run, which
// went on committing into the deleted file: a SIGKILL lost those commits.
TEST_CASE("run --metrics, scraped and read by the CLI meanwhile, then SIGKILLed: every task it printed ok is ok in the store") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  LiveRun run({"run", "--json", "--store", store, "--jobs", "2", "--metrics", "127.0.0.1:0", "--handler", "echo", "-"});
  const int port = metrics_port(run);
  INFO(run.err_seen());
  REQUIRE(port > 0);
  int printed_ok = 0;
  auto run_tasks = [&](const std::string& prefix, int n) {
    std::string input;
    for (int i = 0; i < n; ++i) input += task_line(prefix + std::to_string(i), prefix + " payload " + std::to_string(i));
    run.write(input);
    for (int i = 0; i < n; ++i) {
      auto line = run.out_line();
      REQUIRE_MESSAGE(line.has_value(), run.err_seen());
      printed_ok += nlohmann::json::parse(*line)["verdict"] == "ok";
    }
  };
  auto cli_reads = [&] {
    for (const std::vector<std::string>& verb : {std::vector<std::string>{"tasks"}, {"quarantine", "list"}}) {
      std::vector<std::string> args = verb;
      args.insert(args.end(), {"--store", store, "--json"});
      const auto r = e2e::run_pillbox(args);
      INFO(r.describe());
      CHECK(r.exit_code == 0);
    }
  };

  run_tasks("before-", 10);
  REQUIRE(scrape(port).status == 200);  // the run's second connection opens
  for (int round = 0; round < 3; ++round) {
    cli_reads();  // readers come and go while the run goes on writing
    run_tasks("round-" + std::to_string(round) + "-", 15);
    REQUIRE(scrape(port).status == 200);
  }
  REQUIRE(printed_ok == 55);
  // Held-back ok writes go with the next transaction, which an idle run
  // makes at once (docs/architecture.md, "Ledger"): the CLI, another
  // process, sees all of them before the kill.
  REQUIRE(e2e::eventually([&] {
    const auto r = e2e::run_pillbox({"tasks", "--store", store, "--json", "--state", "ok"});
    return r.exit_code == 0 && r.records.size() == 55;
  }));
  e2e::check_no_deleted_store_files(run.pid());
  run.signal(SIGKILL);
  CHECK(run.wait() == 128 + SIGKILL);
  CHECK(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'") == 55);
}

TEST_CASE("run --metrics: a port in use, or an address that is not one, is a usage error before anything runs") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string input = dir.write("good", "a good payload\n");
  // A port this test holds.
  const int busy = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(busy >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(::listen(busy, 1) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));

  const auto in_use = e2e::run_pillbox({"run", "--json", "--store", store, "--handler", "echo", "--metrics", "127.0.0.1:" + port, input});
  INFO(in_use.describe());
  CHECK(in_use.exit_code == 2);
  CHECK(in_use.err.find("--metrics: cannot listen on 127.0.0.1:" + port) != std::string::npos);
  CHECK(in_use.records.empty());  // nothing ran
  ::close(busy);

  for (const std::string bad : {"127.0.0.1:99999", "127.0.0.1:", "localhost:http", ":9464", "nonsense"}) {
    const auto r = e2e::run_pillbox({"run", "--json", "--store", store, "--handler", "echo", "--metrics", bad, input});
    INFO(bad << "\n" << r.describe());
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--metrics") != std::string::npos);
    CHECK(r.records.empty());
  }
  // No task of these runs reached the ledger.
  if (::access((store + "/pillbox.db").c_str(), F_OK) == 0) CHECK(sql_int(store + "/pillbox.db", "SELECT count(*) FROM tasks") == 0);
}

TEST_CASE("worker --metrics: settled entries by kind and verdict, attempts, slots; the server goes with the worker") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  std::vector<std::pair<std::string, std::string>> tasks;
  for (int i = 0; i < 3; ++i) tasks.emplace_back("good-" + std::to_string(i), "payload " + std::to_string(i));
  tasks.emplace_back("segv", "S segv");
  tasks.emplace_back("segv-again", "S segv again");  // the same crash: one fingerprint new to the fleet, not two
  e2e::add_entries(server, "jobs", tasks);
  LiveRun worker({"worker", "--redis", server.url(), "--stream", "jobs", "--jobs", "2", "--backoff-base", "10ms",
                  "--json", "--metrics", "127.0.0.1:0", "--", e2e::fixture("mixed_poison")});
  worker.close_stdin();
  const int port = metrics_port(worker);
  INFO(worker.err_seen());
  REQUIRE(port > 0);
  for (std::size_t settled = 0; settled < tasks.size(); ++settled) {
    auto line = worker.out_line();
    REQUIRE_MESSAGE(line.has_value(), worker.err_seen());
  }
  const Scrape s = scrape(port);
  INFO(s.body);
  REQUIRE(s.status == 200);
  CHECK(sample(s.body, "pillbox_tasks_total{kind=\"ok\",verdict=\"ok\"}") == 3);
  CHECK(sample(s.body, "pillbox_tasks_total{kind=\"crash\",verdict=\"dead-lettered\"}") == 2);
  CHECK(sample(s.body, "pillbox_attempts_total{kind=\"crash\"}") == 4);  // each crash twice
  CHECK(sample(s.body, "pillbox_new_fingerprints_total") == 1);
  CHECK(sample(s.body, "pillbox_attempts_total{kind=\"ok\"}") == 3);
  CHECK(sample(s.body, "pillbox_attempt_duration_seconds_count") == 7);
  CHECK(sample(s.body, "pillbox_slots") == 2);
  CHECK(sample(s.body, "pillbox_slots_busy") == 0);
  CHECK(sample(s.body, "pillbox_breaker_open") == 0);
  CHECK(s.body.find("pillbox_store_up") == std::string::npos);  // a worker has no store
  CHECK(e2e::stream_entries(server, "jobs:dlq").size() == 2);
  e2e::check_with_promtool(s.body);
  worker.signal(SIGTERM);
  CHECK(worker.wait() == 128 + SIGTERM);
  CHECK(scrape(port).status == 0);
}
