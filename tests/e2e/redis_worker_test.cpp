// pillbox worker against a real redis-server (started by the test on a free
// loopback port): results and dead letters land where docs/distributed.md
// says, the attempt count is Redis's delivery count, a worker's death is
// counted and its entries are taken over, two workers judge one entry on
// its whole history, malformed entries never stop the stream, SIGTERM
// finishes what runs. Workers are real `pillbox worker` processes, killed
// with real signals; tasks run the mixed_poison fixture (S: SIGSEGV,
// A: abort, L: spins, E: handler error, else ok).
#include <doctest/doctest.h>
#include <signal.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "supervisor/io/result_files.h"
#include "tests/e2e/background.h"
#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

namespace {

using e2e::pending_on;
using e2e::add_entries;
using e2e::run_pillbox;
using nlohmann::json;

// The worker's arguments for the mixed_poison fixture, plus `extra`.
std::vector<std::string> worker_args(const e2e::RedisServer& server, const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"worker", "--redis", server.url(), "--stream", "jobs"};
  if (std::find(extra.begin(), extra.end(), "--backoff-base") == extra.end()) {
    args.insert(args.end(), {"--backoff-base", "10ms"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--", e2e::fixture("mixed_poison")});
  return args;
}


json record_of(const e2e::StreamEntry& dead_letter) {
  auto j = json::parse(dead_letter.fields.at("record"), nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

// Keys left behind under NAME:attempts: (every settled entry's history is deleted).
std::size_t history_keys(const e2e::RedisServer& server) {
  auto redis = e2e::connect(server);
  auto r = redis.command({"KEYS", "jobs:attempts:*"});
  REQUIRE(r.has_value());
  return (*r)->elements;
}

TEST_CASE("worker: ok results go to NAME:results, poison to NAME:dlq after two deliveries, nothing stays pending") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  std::vector<std::pair<std::string, std::string>> tasks;
  for (int i = 0; i < 20; ++i) tasks.emplace_back("good-" + std::to_string(i), "payload " + std::to_string(i));
  tasks.emplace_back("segv", "S segv");
  tasks.emplace_back("abort", "A abort");
  tasks.emplace_back("binary", std::string("\x01\xff\x00 bytes", 9));
  const auto ids = add_entries(server, "jobs", tasks);

  const auto r = run_pillbox(worker_args(server, {"--jobs", "2", "--exit-when-idle", "1s", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);

  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 21);
  std::map<std::string, std::map<std::string, std::string>> by_key;
  for (const auto& e : results) by_key[e.fields.at("key")] = e.fields;
  CHECK(by_key.at("good-3").at("output") == "payload 3");
  CHECK(by_key.at("good-3").at("verdict") == "ok");
  CHECK(by_key.at("good-3").at("kind") == "ok");
  CHECK(by_key.at("good-3").at("entry") == ids[3]);
  CHECK(by_key.at("good-3").at("deliveries") == "1");
  // Not UTF-8: base64, never mangled.
  CHECK(by_key.at("binary").count("output") == 0);
  CHECK(by_key.at("binary").at("output_b64") == "Af8AIGJ5dGVz");

  const auto dlq = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(dlq.size() == 2);
  for (const auto& d : dlq) {
    const std::string key = d.fields.at("key");
    INFO(key);
    CHECK(d.fields.at("kind") == "crash");
    CHECK(d.fields.at("deliveries") == "2");  // the same crash twice in a row
    CHECK(d.fields.at("payload") == (key == "segv" ? "S segv" : "A abort"));
    CHECK(d.fields.at("entry") == (key == "segv" ? ids[20] : ids[21]));
    const json rec = record_of(d);
    CHECK(rec["kind"] == "crash");
    CHECK(rec["fingerprint"] == d.fields.at("fingerprint"));
    CHECK(rec["signal"] == (key == "segv" ? "SIGSEGV" : "SIGABRT"));
    CHECK(rec["handler"] == "exec");
    CHECK_FALSE(rec["policy"].get<std::string>().empty());
    CHECK(rec["stream"]["entry"] == d.fields.at("entry"));
    REQUIRE(rec["attempts_history"].size() == 2);
    for (const auto& a : rec["attempts_history"]) {
      CHECK(a["kind"] == "crash");
      CHECK(a["fingerprint"] == d.fields.at("fingerprint"));
      CHECK_FALSE(a["worker"].get<std::string>().empty());
    }
  }
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs"}) == 0);  // settled entries are deleted
  CHECK(history_keys(server) == 0);
  // One line per settled entry on stdout.
  CHECK(r.records.size() == 23);
}

TEST_CASE("worker: --exit-when-idle counts from the first chance to read, not from the start") {
  // Broke under ASan: a start slower than --exit-when-idle (the sandbox's
  // checks) counted as idleness, and the worker exited before its first
  // read, 0 entries received. 1 ms is shorter than any start.
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  add_entries(server, "jobs", {{"a", "payload a"}, {"b", "payload b"}, {"c", "payload c"}});
  const auto r = run_pillbox(worker_args(server, {"--jobs", "1", "--exit-when-idle", "1ms", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(e2e::stream_entries(server, "jobs:results").size() == 3);
  CHECK(r.records.size() == 3);
}

TEST_CASE("worker: two different workers that see the same crash dead-letter it after 2 deliveries") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = add_entries(server, "jobs", {{"segv", "S"}});
  // Worker A records the crash, then waits a long backoff holding the entry
  // (renewed), and is killed there.
  e2e::Background a(e2e::pillbox_binary(),
                    worker_args(server, {"--consumer", "worker-a", "--jobs", "1", "--backoff-base", "1h",
                                         "--backoff-max", "1h", "--claim-idle", "30s"}));
  REQUIRE_MESSAGE(e2e::eventually([&] { return e2e::redis_integer(server, {"HLEN", "jobs:attempts:" + ids[0]}) == 1; }),
                  a.err());
  a.signal(SIGKILL);
  a.wait();
  // Worker B takes it over (A is silent), sees A's crash in the history and
  // the same crash itself: dead-lettered at delivery 2.
  const auto b = run_pillbox(worker_args(server, {"--consumer", "worker-b", "--claim-idle", "200ms",
                                                  "--exit-when-idle", "1500ms", "--json"}));
  INFO(b.describe());
  CHECK(b.exit_code == 0);
  CHECK(b.err.find("1 taken over from idle workers") != std::string::npos);
  const auto dlq = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(dlq.size() == 1);
  CHECK(dlq[0].fields.at("deliveries") == "2");
  const json rec = record_of(dlq[0]);
  REQUIRE(rec["attempts_history"].size() == 2);
  CHECK(rec["attempts_history"][0]["worker"] == "worker-a");
  CHECK(rec["attempts_history"][1]["worker"] == "worker-b");
  CHECK(rec["attempts_history"][0]["fingerprint"] == rec["attempts_history"][1]["fingerprint"]);
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

TEST_CASE("worker: a worker killed mid-task still counts the delivery; another takes the entry over") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = add_entries(server, "jobs", {{"spin", "L spins"}, {"fine", "fine"}});
  {
    e2e::Background a(e2e::pillbox_binary(),
                      worker_args(server, {"--consumer", "worker-a", "--jobs", "1", "--timeout", "60s", "--cpu", "60s"}));
    REQUIRE_MESSAGE(e2e::eventually([&] { return pending_on(server, ids[0]).first == "worker-a"; }), a.err());
    a.signal(SIGKILL);
    a.wait();
  }
  CHECK(pending_on(server, ids[0]) == std::pair<std::string, long long>{"worker-a", 1});
  const auto b = run_pillbox(worker_args(server, {"--consumer", "worker-b", "--timeout", "300ms", "--claim-idle",
                                                  "200ms", "--exit-when-idle", "1500ms", "--json"}));
  INFO(b.describe());
  CHECK(b.exit_code == 0);
  const auto dlq = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(dlq.size() == 1);
  CHECK(dlq[0].fields.at("key") == "spin");
  CHECK(dlq[0].fields.at("kind") == "wall-timeout");
  // Delivery 1 (worker A, killed) never reported back; 2, 3 and 4 timed out
  // (three charged failures of --max-attempts 3).
  CHECK(dlq[0].fields.at("deliveries") == "4");
  const json rec = record_of(dlq[0]);
  REQUIRE(rec["attempts_history"].size() == 4);
  CHECK(rec["attempts_history"][0]["kind"] == "supervisor-lost");
  CHECK(rec["attempts_history"][0]["note"] == "never reported back");
  for (int i = 1; i < 4; ++i) CHECK(rec["attempts_history"][i]["kind"] == "wall-timeout");
  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 1);
  CHECK(results[0].fields.at("key") == "fine");
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

TEST_CASE("worker: a payload whose deliveries never report back is dead-lettered as supervisor-lost, unrun") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = add_entries(server, "jobs", {{"killer", "L stands for a payload that kills its worker"}});
  // --max-attempts 2: two workers die holding it ...
  for (int n = 1; n <= 2; ++n) {
    const std::string me = "worker-" + std::to_string(n);
    e2e::Background w(e2e::pillbox_binary(), worker_args(server, {"--consumer", me, "--jobs", "1", "--timeout", "60s",
                                                                  "--cpu", "60s", "--claim-idle", "200ms",
                                                                  "--max-attempts", "2"}));
    // The second delivery is a suspect's: killed once its start is
    // recorded, it is one that began to run (one killed before would not
    // count: it never started).
    REQUIRE_MESSAGE(e2e::eventually([&] {
                      return pending_on(server, ids[0]) == std::pair<std::string, long long>{me, n} &&
                             (n == 1 || e2e::redis_integer(server, {"HEXISTS", "jobs:attempts:" + ids[0], "2"}) == 1);
                    }),
                    w.err());
    w.signal(SIGKILL);
    w.wait();
  }
  // ... and the third dead-letters it without running it.
  const auto r = run_pillbox(worker_args(server, {"--consumer", "worker-3", "--claim-idle", "200ms", "--max-attempts",
                                                  "2", "--exit-when-idle", "1500ms", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto dlq = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(dlq.size() == 1);
  CHECK(dlq[0].fields.at("kind") == "supervisor-lost");
  CHECK(dlq[0].fields.at("deliveries") == "3");
  const json rec = record_of(dlq[0]);
  CHECK(rec["attempts_history"].size() == 2);
  CHECK(rec["wall_ms"] == 0);  // not run again
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0]["verdict"] == "dead-lettered");
  CHECK(r.err.find(", 0 ok,") != std::string::npos);
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

TEST_CASE("worker: deliveries held by workers that died before starting them are not held against the payload") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = add_entries(server, "jobs", {{"innocent", "waited its turn"}});
  // Three workers held it and died, none recording anything: the first may
  // have run it, the next two held it as a suspect's delivery, which records
  // its start before it runs (delivery_history.h), so they never started it
  // (as when a worker that holds entries read ahead or claimed is killed).
  auto redis = e2e::connect(server);
  REQUIRE(redis.command({"XGROUP", "CREATE", "jobs", "pillbox", "0"}).has_value());
  REQUIRE(redis.command({"XREADGROUP", "GROUP", "pillbox", "ghost-1", "COUNT", "1", "STREAMS", "jobs", ">"}).has_value());
  for (const char* ghost : {"ghost-2", "ghost-3"}) {
    REQUIRE(redis.command({"XCLAIM", "jobs", "pillbox", ghost, "0", ids[0]}).has_value());
  }
  REQUIRE(pending_on(server, ids[0]) == std::pair<std::string, long long>{"ghost-3", 3});
  // --max-attempts 3: one delivery that may have run is not three; it runs.
  const auto r = run_pillbox(worker_args(server, {"--consumer", "worker-a", "--claim-idle", "100ms",
                                                  "--exit-when-idle", "1500ms", "--json"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 1);
  CHECK(results[0].fields.at("key") == "innocent");
  CHECK(results[0].fields.at("output") == "waited its turn");
  CHECK(results[0].fields.at("deliveries") == "4");
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

TEST_CASE("worker: malformed and oversized entries are dead-lettered as protocol-error; the stream goes on") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  auto redis = e2e::connect(server);
  REQUIRE(redis.command({"XADD", "jobs", "*", "key", "no-payload"}).has_value());
  REQUIRE(redis.command({"XADD", "jobs", "*", "something", "else", "\xff\xfe", "\x00"}).has_value());
  add_entries(server, "jobs", {{"big", std::string(4096, 'x')}, {"after", "still runs"}});
  const auto r = run_pillbox(worker_args(server, {"--max-payload", "1K", "--exit-when-idle", "1s"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto dlq = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(dlq.size() == 3);
  for (const auto& d : dlq) {
    CHECK(d.fields.at("kind") == "protocol-error");
    CHECK(d.fields.at("deliveries") == "1");
  }
  CHECK(record_of(dlq[0])["message"].get<std::string>().find("no `payload` field") != std::string::npos);
  CHECK(dlq[1].fields.at("key").rfind("entry:", 0) == 0);  // no key: named by its entry id
  CHECK(record_of(dlq[2])["message"].get<std::string>().find("4096 bytes is over the limit of 1024") != std::string::npos);
  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 1);
  CHECK(results[0].fields.at("output") == "still runs");
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

// Issue 25, point 4: bounded by bytes, not only by count. A key over
// --max-key is dead-lettered unrun like an oversized payload (the dead
// letter keeps it whole); an output over --results-max-output goes to
// NAME:results as its size and hash, so a flood of large outputs is held
// to about --results-maxlen x that many bytes.
TEST_CASE("worker: an oversized key is dead-lettered unrun; large outputs go to NAME:results as size and hash only") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const std::string long_key(5000, 'k');
  add_entries(server, "jobs", {{long_key, "fine"}, {"small", "fits"}});
  std::vector<std::pair<std::string, std::string>> flood;
  for (int i = 0; i < 200; ++i) flood.emplace_back("large-" + std::to_string(i), std::string(60'000, 'a' + i % 26));
  add_entries(server, "jobs", flood);
  const auto r = run_pillbox(worker_args(server, {"--results-max-output", "1K", "--results-maxlen", "50",
                                                  "--exit-when-idle", "1s", "--quiet"}));
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto dlq = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(dlq.size() == 1);
  CHECK(dlq[0].fields.at("kind") == "protocol-error");
  CHECK(dlq[0].fields.at("key") == long_key);
  CHECK(record_of(dlq[0])["message"].get<std::string>().find("key of 5000 bytes is over the limit of 4096 bytes") !=
        std::string::npos);
  CHECK(record_of(dlq[0])["wall_ms"] == 0);  // not run
  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(!results.empty());
  CHECK(results.size() < 202);  // trimmed to about 50 (MAXLEN ~ trims whole nodes)
  std::size_t output_bytes = 0;
  for (const auto& result : results) {
    const auto& f = result.fields;
    if (f.at("key") == "small") {
      CHECK(f.at("output") == "fits");
      continue;
    }
    CHECK(f.count("output") == 0);
    CHECK(f.at("output_size") == "60000");
    CHECK(f.at("output_sha256").size() == 64);
    CHECK(f.at("output_omitted") == "too large: 60000 bytes, over --results-max-output 1024");
    for (const auto& [name, value] : f) output_bytes += value.size();
  }
  // What the flood left in Redis: a few hundred bytes per result, not 60 000.
  CHECK(output_bytes < results.size() * 1024);
}

TEST_CASE("results --redis: a fleet's outputs, the newest per key, byte for byte; forged entries said so") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const std::string binary("\x01\xff\x00 bytes", 9);
  add_entries(server, "jobs", {{"a", "first a"}, {"b", "bee"}, {"bin", binary}, {"segv", "S dies"}, {"big", std::string(3000, 'x')}});
  REQUIRE(run_pillbox(worker_args(server, {"--results-max-output", "2K", "--exit-when-idle", "1s", "--quiet"})).exit_code == 0);
  // "a" again, with another payload: its newest result stands.
  add_entries(server, "jobs", {{"a", "second a"}});
  REQUIRE(run_pillbox(worker_args(server, {"--exit-when-idle", "1s", "--quiet"})).exit_code == 0);

  e2e::TempDir dir;
  const std::string out = dir.file("out");
  const auto files = run_pillbox({"results", "--redis", server.url(), "--stream", "jobs", "-o", out + "/"});
  INFO(files.describe());
  CHECK(files.exit_code == 0);  // a listing, as for a store: "big" says it was not kept
  const auto big = run_pillbox({"results", "--redis", server.url(), "--stream", "jobs", "-o", out, "big"});
  CHECK(big.exit_code == 1);  // asked for, and not kept on Redis
  CHECK(e2e::read_file(out + "/a.out") == "second a");
  CHECK(e2e::read_file(out + "/b.out") == "bee");
  CHECK(e2e::read_file(out + "/bin.out") == binary);
  CHECK(files.out.find(out + "/a.out") != std::string::npos);
  CHECK(files.out.find("//") == std::string::npos);  // -o DIR/ prints clean paths
  CHECK(files.out.find("not kept on Redis: too large: 3000 bytes") != std::string::npos);
  CHECK(files.out.find("segv") == std::string::npos);  // dead-lettered: no result

  const auto json = run_pillbox({"results", "--redis", server.url(), "--stream", "jobs", "--json", "a", "bin", "nope"});
  INFO(json.describe());
  CHECK(json.exit_code == 1);
  REQUIRE(json.records.size() == 2);
  std::map<std::string, nlohmann::json> by_key;
  for (const auto& j : json.records) by_key[j["key"]] = j;
  CHECK(by_key["a"]["output"] == "second a");
  CHECK(by_key["a"]["result"] == "kept");
  CHECK(by_key["bin"]["output_b64"].is_string());
  CHECK(json.err.find("no result with key 'nope' on jobs:results") != std::string::npos);

  const auto raw = run_pillbox({"results", "--redis", server.url(), "--stream", "jobs", "bin"});
  CHECK(raw.exit_code == 0);
  CHECK(raw.out == binary);

  // NAME:results is not signed: what anyone wrote there is read as a claim.
  auto redis = e2e::connect(server);
  REQUIRE(redis.command({"XADD", "jobs:results", "*", "verdict", "ok", "output", "no key"}).has_value());
  REQUIRE(redis.command({"XADD", "jobs:results", "*", "key", "b", "output_b64", "not base64!"}).has_value());
  // An empty key is a key (a task may be submitted with one): its file is written.
  REQUIRE(redis.command({"XADD", "jobs:results", "*", "key", "", "output", "empty key"}).has_value());
  // The largest id a stream can hold, last on its page: the listing ends there.
  REQUIRE(redis.command({"XADD", "jobs:results", "18446744073709551615-18446744073709551615", "key", "last", "output",
                         "LAST"}).has_value());
  const std::string out2 = dir.file("out2");
  const auto forged = run_pillbox({"results", "--redis", server.url(), "--stream", "jobs", "-o", out2});
  INFO(forged.describe());
  CHECK(forged.exit_code == 0);
  CHECK(forged.out.find("unreadable: the entry has no key") != std::string::npos);
  CHECK(forged.out.find("unreadable: its output_b64 is not base64") != std::string::npos);
  CHECK(e2e::read_file(out2 + "/" + pillbox::result_file_name("")) == "empty key");
  CHECK(e2e::read_file(out2 + "/last.out") == "LAST");
  CHECK(run_pillbox({"results", "--redis", server.url(), "--stream", "jobs", "b"}).exit_code == 1);

  const auto both = run_pillbox({"results", "--redis", server.url(), "--stream", "jobs", "--store", dir.file("s")});
  CHECK(both.exit_code == 2);
  const auto no_stream = run_pillbox({"results", "--redis", server.url()});
  CHECK(no_stream.exit_code == 2);
  CHECK(no_stream.err.find("--redis needs --stream NAME") != std::string::npos);
}

TEST_CASE("results --redis: one output in memory at a time, however many large outputs the stream holds") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  auto redis = e2e::connect(server);
  const std::string mib(1 << 20, 'o');
  for (int i = 0; i < 40; ++i) {
    REQUIRE(redis.command({"XADD", "jobs:results", "*", "key", "k" + std::to_string(i), "output", mib}).has_value());
  }
  const auto r = run_pillbox({"results", "--redis", server.url(), "--stream", "jobs", "k5"});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.out == mib);
  // The same, its peak memory from wait4: the 40 MiB on Redis never came
  // over at once (it took 222 MB for 200 such entries when they did).
  const std::string bin = e2e::pillbox_binary();
  const std::string url = server.url();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::execl(bin.c_str(), bin.c_str(), "results", "--redis", url.c_str(), "--stream", "jobs", "--json", "k5",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  REQUIRE(::wait4(pid, &status, 0, &usage) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  MESSAGE("pillbox results --json k5 over 40 entries of 1 MiB: max RSS " << usage.ru_maxrss << " KiB");
  CHECK(usage.ru_maxrss < 40 * 1024);  // KiB: its own output (and its JSON) once, not the stream's
}

TEST_CASE("worker: an unreachable Redis, a bad URL and a key that is not a stream are one clear line each") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const int closed = e2e::free_loopback_port();
  auto r = run_pillbox({"worker", "--redis", "redis://127.0.0.1:" + std::to_string(closed), "--stream", "jobs",
                        "--handler", "echo"});
  CHECK(r.exit_code == 3);
  CHECK(r.err_lines().size() == 1);
  CHECK(r.err.find("cannot reach Redis at redis://127.0.0.1:" + std::to_string(closed)) != std::string::npos);

  r = run_pillbox({"worker", "--redis", "http://x", "--stream", "jobs", "--handler", "echo"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("expected redis://HOST[:PORT][/DB]") != std::string::npos);

  auto redis = e2e::connect(server);
  REQUIRE(redis.command({"SET", "plain", "a string"}).has_value());
  r = run_pillbox({"worker", "--redis", server.url(), "--stream", "plain", "--handler", "echo"});
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK(r.err_lines().size() == 1);
  CHECK(r.err.find("the key 'plain' on redis://127.0.0.1:" + std::to_string(server.port()) +
                   "/0 holds a string, not a stream") != std::string::npos);

  r = run_pillbox({"worker", "--redis", server.url(), "--stream", "jobs", "--handler", "echo", "stray"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("pillbox submit") != std::string::npos);
}

TEST_CASE("worker: a Redis error that is not a lost connection stops the worker; the entry stays pending") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = add_entries(server, "jobs", {{"fine", "runs fine"}});
  // The results key is not a stream: the settle's XADD fails (WRONGTYPE),
  // an error Redis answers, not a lost connection.
  auto redis = e2e::connect(server);
  REQUIRE(redis.command({"SET", "jobs:results", "not a stream"}).has_value());
  e2e::Background w(e2e::pillbox_binary(), worker_args(server, {"--consumer", "worker-a", "--claim-idle", "30s"}));
  // It stops and says why, instead of waiting forever on the entry whose
  // settle failed.
  CHECK(w.wait(std::chrono::seconds(20)) == 3);
  INFO(w.err());
  CHECK(w.err().find("the key 'jobs:results'") != std::string::npos);
  CHECK(w.err().find("holds a string, not a stream") != std::string::npos);
  CHECK(w.err().find("stopping (a Redis error") != std::string::npos);
  // Nothing was settled: the entry is still pending on the worker, for the
  // fleet to take over after --claim-idle.
  CHECK(pending_on(server, ids[0]) == std::pair<std::string, long long>{"worker-a", 1});
  CHECK(e2e::redis_integer(server, {"XLEN", "jobs"}) == 1);
}

TEST_CASE("worker: SIGTERM finishes what runs, reads nothing new, and the next worker runs the rest once") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  std::vector<std::pair<std::string, std::string>> tasks;
  for (int i = 0; i < 8; ++i) tasks.emplace_back("t" + std::to_string(i), "task " + std::to_string(i));
  add_entries(server, "jobs", tasks);
  // Each task says it started, then takes 400 ms, so SIGTERM comes while
  // two run. (Pending entries are not yet running ones: a worker holds
  // entries it has read before their children start.)
  e2e::TempDir started(01777, e2e::host_dir_tasks_see());
  const std::vector<std::string> slow = {"--writable", started.path(), "--", "/bin/sh", "-c",
                                         "touch " + started.path() + "/task.$$; sleep 0.4; cat"};
  auto args = std::vector<std::string>{"worker", "--redis", server.url(), "--stream", "jobs", "--jobs", "2",
                                       "--consumer", "first", "--json"};
  args.insert(args.end(), slow.begin(), slow.end());
  e2e::Background first(e2e::pillbox_binary(), args);
  REQUIRE_MESSAGE(e2e::eventually([&] { return e2e::count_files_starting(started.path(), "task.") >= 2; }),
                  first.err());
  first.signal(SIGTERM);
  CHECK(first.wait() == 143);
  INFO(first.err());
  const std::size_t done_first = e2e::stream_entries(server, "jobs:results").size();
  CHECK(done_first >= 2);  // what ran when SIGTERM came was finished and settled
  CHECK(done_first < 8);
  CHECK(first.err().find("stopping (SIGTERM)") != std::string::npos);

  args = {"worker", "--redis", server.url(), "--stream", "jobs", "--jobs", "2", "--consumer", "second",
          "--claim-idle", "200ms", "--exit-when-idle", "1500ms", "--json"};
  args.insert(args.end(), slow.begin(), slow.end());
  const auto second = run_pillbox(args);
  INFO(second.describe());
  CHECK(second.exit_code == 0);
  const auto results = e2e::stream_entries(server, "jobs:results");
  std::set<std::string> keys;
  for (const auto& e : results) keys.insert(e.fields.at("key"));
  CHECK(keys.size() == 8);
  CHECK(results.size() == 8);  // none twice
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

}  // namespace

namespace {

TEST_CASE("worker: an outage of its handler holds the failures uncharged and pauses intake; it resumes when the handler works") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  // The handler is broken while the flag file exists (a missing dependency,
  // say). The directory is under /tmp, which each task gets privately:
  // --share shows tasks the host's, live (the flag's removal too).
  e2e::TempDir flags;
  const std::string flag = flags.write("broken", "");
  std::vector<std::pair<std::string, std::string>> tasks;
  for (int i = 0; i < 12; ++i) tasks.emplace_back("t" + std::to_string(i), "task " + std::to_string(i));
  add_entries(server, "jobs", tasks);
  e2e::Background w(e2e::pillbox_binary(),
                    {"worker", "--redis", server.url(), "--stream", "jobs", "--jobs", "2", "--breaker-window", "4",
                     "--breaker-probe-interval", "100ms", "--backoff-base", "5s", "--exit-when-idle", "1s",
                     "--share", flags.path(), "--",
                     "/bin/sh", "-c", "test -e " + flag + " && { echo 'missing dependency' >&2; exit 3; }; cat"});
  REQUIRE_MESSAGE(e2e::eventually([&] { return w.err().find("handler outage suspected") != std::string::npos; }),
                  w.err());
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
  ::unlink(flag.c_str());
  CHECK(w.wait() == 0);
  INFO(w.err());
  CHECK(w.err().find("handler works again") != std::string::npos);
  const auto results = e2e::stream_entries(server, "jobs:results");
  CHECK(results.size() == 12);
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());  // nothing charged to the payloads
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

}  // namespace

namespace {

TEST_CASE("worker: tasks that cannot see a file of the host beside their tool are held, never dead-lettered; --share fixes it") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  // Under /tmp, which each task gets as its own empty directory: the tool is
  // named on the command line (so shown), the data file beside it is not.
  e2e::TempDir dir;
  dir.write("data.txt", "PREFIX\n");
  const std::string tool = dir.write("tool.sh", "#!/bin/sh\nprefix=$(cat \"$(dirname \"$0\")/data.txt\") || exit 1\n"
                                                "printf '%s ' \"$prefix\"; cat\n");
  std::filesystem::permissions(tool, std::filesystem::perms(0755));
  std::vector<std::pair<std::string, std::string>> tasks;
  for (int i = 0; i < 6; ++i) tasks.emplace_back("t" + std::to_string(i), "task " + std::to_string(i));
  add_entries(server, "jobs", tasks);
  {
    e2e::Background w(e2e::pillbox_binary(), {"worker", "--redis", server.url(), "--stream", "jobs", "--jobs", "2",
                                              "--breaker-probe-interval", "100ms", "--", tool});
    REQUIRE_MESSAGE(e2e::eventually([&] { return w.err().find("could not see") != std::string::npos; }), w.err());
    CHECK(w.err().find("could not see " + dir.file("data.txt") + ", which this host has") != std::string::npos);
    CHECK(w.err().find("--share " + dir.path()) != std::string::npos);
    w.signal(SIGTERM);
    CHECK(w.wait() == 143);
    CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
    CHECK(e2e::stream_entries(server, "jobs:results").empty());
  }
  // Restarted with the directory shared: every entry ok, none charged away.
  const auto r = run_pillbox({"worker", "--redis", server.url(), "--stream", "jobs", "--jobs", "2", "--claim-idle", "100ms",
                              "--exit-when-idle", "1s", "--share", dir.path(), "--", tool});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  const auto results = e2e::stream_entries(server, "jobs:results");
  CHECK(results.size() == 6);
  CHECK(e2e::stream_entries(server, "jobs:dlq").empty());
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
}

}  // namespace

namespace {

TEST_CASE("worker: a task that runs longer than --claim-idle keeps its claim; no other worker takes it over") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  const auto ids = add_entries(server, "jobs", {{"long", "takes 2 s"}});
  const std::vector<std::string> slow = {"--", "/bin/sh", "-c", "sleep 2; cat"};
  auto args_for = [&](const std::string& me) {
    std::vector<std::string> args = {"worker", "--redis", server.url(), "--stream", "jobs", "--consumer", me,
                                     "--claim-idle", "300ms", "--exit-when-idle", "1s", "--json"};
    args.insert(args.end(), slow.begin(), slow.end());
    return args;
  };
  e2e::Background a(e2e::pillbox_binary(), args_for("worker-a"));
  REQUIRE_MESSAGE(e2e::eventually([&] { return pending_on(server, ids[0]).first == "worker-a"; }), a.err());
  // B looks for idle entries every 100 ms while A's task runs 2 s (more
  // than six times --claim-idle).
  const auto b = run_pillbox(args_for("worker-b"));
  INFO(b.describe());
  CHECK(b.exit_code == 0);
  CHECK(b.err.find("0 entries received") != std::string::npos);
  CHECK(a.wait() == 0);
  INFO(a.err());
  const auto results = e2e::stream_entries(server, "jobs:results");
  REQUIRE(results.size() == 1);
  CHECK(results[0].fields.at("deliveries") == "1");
  CHECK(results[0].fields.at("worker") == "worker-a");
}

}  // namespace

namespace {

TEST_CASE("worker: a Redis that cannot serve for a while (full: OOM) is waited for, said once, and nothing is lost") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  std::vector<std::pair<std::string, std::string>> tasks;
  for (int i = 0; i < 6; ++i) tasks.emplace_back("t" + std::to_string(i), "task " + std::to_string(i));
  add_entries(server, "jobs", tasks);
  auto redis = e2e::connect(server);
  REQUIRE(redis.command({"XGROUP", "CREATE", "jobs", "pillbox", "0"}).has_value());
  // Full: every write a script makes is refused with -OOM until the limit goes.
  REQUIRE(redis.command({"CONFIG", "SET", "maxmemory-policy", "noeviction"}).has_value());
  REQUIRE(redis.command({"CONFIG", "SET", "maxmemory", "1"}).has_value());
  e2e::Background w(e2e::pillbox_binary(), worker_args(server, {"--exit-when-idle", "1s"}));
  REQUIRE_MESSAGE(e2e::eventually([&] { return w.err().find("cannot serve now") != std::string::npos; }), w.err());
  // Full for a while: the worker tries again (100, 200, 400 ms later) and
  // is refused each time; the outage is still one.
  auto refused = [&] {
    auto r = redis.command({"INFO", "errorstats"});
    REQUIRE(r.has_value());
    const std::string info = pillbox::broker::reply_text(r->get());
    const auto at = info.find("errorstat_OOM:count=");
    return at == std::string::npos ? 0 : std::stoll(info.substr(at + 20));
  };
  REQUIRE_MESSAGE(e2e::eventually([&] { return refused() >= 4; }), w.err());
  REQUIRE(redis.command({"CONFIG", "SET", "maxmemory", "0"}).has_value());
  CHECK(w.wait() == 0);
  const std::string err = w.err();
  INFO(err);
  CHECK(e2e::stream_entries(server, "jobs:results").size() == 6);
  CHECK(e2e::pending_count(server, "jobs", "pillbox") == 0);
  // Once per link and outage, not once per task.
  std::size_t said = 0;
  for (std::size_t at = err.find("lost Redis"); at != std::string::npos; at = err.find("lost Redis", at + 1)) ++said;
  CHECK(said == 1);
  CHECK(err.find("Redis is back") != std::string::npos);
}

}  // namespace
