// The console's job bodies (supervisor/serve/job_api.h): what each becomes
// as the CLI verb's arguments, the defaults, and the refusals that say what
// is allowed; and the board's limits (supervisor/serve/console_jobs.h) with
// a program that waits to be stopped.
#include <doctest/doctest.h>

#include <signal.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/serve/job_api.h"

using namespace pillbox;
using namespace pillbox::serve;
using Args = std::vector<std::string>;

namespace {
// A store's record ids, as StoreSource::checked_id takes them.
const IdCheck kStoreIds = [](const std::string& text) -> Expected<std::string> {
  auto id = record_id(text);
  if (!id) return Error{id.error(), ErrorCode::kUsage};
  return std::to_string(*id);
};
}  // namespace

TEST_CASE("job bodies: reproduce takes runs 1..100, 5 by default; anything else is refused, saying so") {
  auto r = reproduce_request("7", "", "web: 127.0.0.1");
  REQUIRE(r);
  CHECK(r->kind == JobKind::kReproduce);
  CHECK(r->args == Args{"reproduce", "7", "--runs", "5", "--json", "--quiet"});
  CHECK(r->records == std::vector<std::string>{"7"});
  CHECK(r->actor == "web: 127.0.0.1");
  CHECK(reproduce_request("7", R"({"runs": 100})", "a")->args[3] == "100");
  for (const char* bad : {"x", "[]", R"({"runs": 0})", R"({"runs": 101})", R"({"runs": 2.5})", R"({"runs": "3"})",
                          R"({"runs": 3, "jobs": 2})", "{\"runs\": \"\xff\"}"}) {
    INFO(bad);
    auto refused = reproduce_request("7", bad, "a");
    REQUIRE(!refused);
    CHECK(refused.error_code() == ErrorCode::kUsage);
    CHECK(refused.error().find("runs") != std::string::npos);
  }
}

TEST_CASE("job bodies: minimize passes max_runs and max_time (seconds) when given, the CLI's defaults otherwise") {
  CHECK(minimize_request("3", "{}", "a")->args == Args{"minimize", "3", "--json", "--quiet"});
  CHECK(minimize_request("3", R"({"max_runs": 50, "max_time": 90})", "a")->args ==
        Args{"minimize", "3", "--max-runs", "50", "--max-time", "90s", "--json", "--quiet"});
  for (const char* bad : {R"({"max_runs": 0})", R"({"max_runs": 100001})", R"({"max_time": 3601})",
                          R"({"max_time": "5m"})", R"({"restart": true})"}) {
    INFO(bad);
    CHECK(!minimize_request("3", bad, "a"));
  }
}

TEST_CASE("job bodies: replay takes ids or a fingerprint/kind filter, and its brakes; never an option in a value") {
  auto ids = replay_request(R"({"ids": [4, 9], "batch": 1, "stop_after": 2, "max_failure_ratio": 0.25})", "a", kStoreIds);
  REQUIRE(ids);
  CHECK(ids->kind == JobKind::kReplay);
  CHECK(ids->args == Args{"quarantine", "replay", "4", "9", "--batch", "1", "--stop-after", "2",
                          "--max-failure-ratio", "0.25", "--json", "--quiet"});
  CHECK(ids->records == std::vector<std::string>{"4", "9"});
  auto filter = replay_request(R"({"filter": {"fingerprint": "pb1-3e46b329fd2fc86c", "kind": "crash"}})", "a", kStoreIds);
  REQUIRE(filter);
  CHECK(filter->args == Args{"quarantine", "replay", "--fingerprint=pb1-3e46b329fd2fc86c", "--kind=crash", "--json",
                             "--quiet"});
  CHECK(filter->records.empty());
  for (const char* bad : {"{}", R"({"ids": []})", R"({"ids": [0]})", R"({"ids": ["4x"]})", R"({"ids": [1.5]})", R"({"ids": ["--all"]})",
                          R"({"ids": [1], "filter": {"kind": "crash"}})", R"({"filter": {}})",
                          R"({"filter": {"status": "quarantined"}})", R"({"filter": {"kind": "boom"}})",
                          R"({"filter": {"fingerprint": "--all"}})", R"({"filter": {"fingerprint": "a b"}})",
                          R"({"filter": {"fingerprint": 3}})", R"({"ids": [1], "batch": 0})",
                          R"({"ids": [1], "stop_after": 0})", R"({"ids": [1], "max_failure_ratio": 1})",
                          R"({"ids": [1], "max_failure_ratio": -0.1})", R"({"ids": [1], "force": true})"}) {
    INFO(bad);
    auto refused = replay_request(bad, "a", kStoreIds);
    REQUIRE(!refused);
    CHECK(refused.error_code() == ErrorCode::kUsage);
  }
  std::string many = "{\"ids\": [";
  for (std::size_t i = 1; i <= kMaxWebReplayIds + 1; ++i) many += (i > 1 ? "," : "") + std::to_string(i);
  CHECK(!replay_request(many + "]}", "a", kStoreIds));
  // Ids as text, checked by the quarantine shown: a fleet's entry ids.
  auto text = replay_request(R"({"ids": ["4"]})", "a", kStoreIds);
  REQUIRE(text);
  CHECK(text->records == std::vector<std::string>{"4"});
  const IdCheck fleet_ids = [](const std::string& t) { return broker::parse_fleet_id(t); };
  auto entries = replay_request(R"({"ids": ["1712345678901-0"]})", "a", fleet_ids);
  REQUIRE(entries);
  CHECK(entries->args == Args{"quarantine", "replay", "1712345678901-0", "--json", "--quiet"});
  CHECK(!replay_request(R"({"ids": [7]})", "a", fleet_ids));
  // One record, one id text: leading zeros are not another record; past 64 bits is none.
  auto padded = broker::parse_fleet_id("01712345678901-00");
  REQUIRE(padded);
  CHECK(*padded == "1712345678901-0");
  CHECK(!broker::parse_fleet_id("99999999999999999999-0"));
  CHECK(!broker::parse_fleet_id("1-"));
}

TEST_CASE("job routes: a bad record id is 404 and a bad body 400, before the board is asked") {
  JobBoard board("/bin/false", {});
  CHECK(start_reproduce(board, kStoreIds, "0", "{}", "a").status == 404);
  CHECK(start_reproduce(board, kStoreIds, "1x", "{}", "a").status == 404);
  CHECK(start_minimize(board, kStoreIds, "-1", "{}", "a").status == 404);
  CHECK(start_reproduce(board, kStoreIds, "1", R"({"runs": 0})", "a").status == 400);
  CHECK(start_replay(board, kStoreIds, "{}", "a").status == 400);
  CHECK(board.list().body["jobs"].empty());
}

namespace {

// The board's view of job `id` once `done` holds for it (a deadline of 30 s).
nlohmann::json job_when(const JobBoard& board, std::int64_t id, const std::function<bool(const nlohmann::json&)>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  nlohmann::json job;
  while (!done(job = board.show(std::to_string(id)).body["job"])) {
    REQUIRE_MESSAGE(std::chrono::steady_clock::now() < deadline, job.dump());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling the board: it offers nothing to wait on
  }
  return job;
}

}  // namespace

TEST_CASE("job board: 2 at once, one per record, stop by SIGTERM, the output and stderr kept; the source args last") {
  // /bin/sh as the program: `-c SCRIPT` are the verb's arguments here, the
  // source arguments land in $0 and $1.
  JobBoard board("/bin/sh", {"--store", "/nowhere"});
  auto sleeper = [](std::int64_t record) {
    return JobRequest{JobKind::kMinimize, {"-c", "echo \"$PILLBOX_ACTOR\" >&2; echo '{\"label\":\"m\",\"done\":1}' >&3; "
                                                 "exec sleep 60"}, "web: 127.0.0.1", {std::to_string(record)}};
  };
  const auto a = board.start(sleeper(1));
  REQUIRE(a.status == 202);
  CHECK(a.body["job"]["command"] == nlohmann::json{"/bin/sh", "-c", sleeper(1).args[1], "--store", "/nowhere"});
  CHECK(board.start(sleeper(1)).status == 409);
  const auto b = board.start(sleeper(2));
  REQUIRE(b.status == 202);
  const auto c = board.start(sleeper(3));
  CHECK(c.status == 429);
  CHECK(c.body["error"] == "2 jobs are running; wait or stop one at /jobs");

  const auto id = a.body["job"]["id"].get<std::int64_t>();
  auto progressed = job_when(board, id, [](const nlohmann::json& j) { return j["progress"].is_object(); });
  CHECK(progressed["progress"]["done"] == 1);
  CHECK(board.stop(std::to_string(id)).status == 202);
  const auto stopped = job_when(board, id, [](const nlohmann::json& j) { return j["state"] != "running"; });
  CHECK(stopped["state"] == "stopped");
  CHECK(stopped["signal"] == SIGTERM);
  CHECK(stopped["stderr_tail"] == "web: 127.0.0.1\n");
  CHECK(stopped["result"].is_null());
  CHECK(board.stop(std::to_string(id)).status == 409);
  CHECK(board.show("99").status == 404);

  // One a done job with a JSON result.
  const auto d = board.start(JobRequest{JobKind::kReproduce, {"-c", "echo '{\"verdict\": \"flaky\"}'; exit 1"}, "a", {"4"}});
  REQUIRE(d.status == 202);
  const auto done = job_when(board, d.body["job"]["id"].get<std::int64_t>(),
                             [](const nlohmann::json& j) { return j["state"] != "running"; });
  CHECK(done["state"] == "done");
  CHECK(done["exit_code"] == 1);
  CHECK(done["result"]["verdict"] == "flaky");
  CHECK(board.list().body["jobs"].size() == 3);
  // The rest is stopped when the board goes: none left running.
  board.stop_all();
  CHECK(board.list().body["jobs"][1]["state"] == "stopped");
  CHECK(board.start(sleeper(5)).status == 503);
}

TEST_CASE("job board: a program that cannot start makes a failed job that says why; a crash of one is failed too") {
  JobBoard board("/nonexistent/pillbox", {});
  const auto a = board.start(JobRequest{JobKind::kReproduce, {"reproduce", "1"}, "a", {"1"}});
  REQUIRE(a.status == 202);
  const auto failed = job_when(board, a.body["job"]["id"].get<std::int64_t>(),
                               [](const nlohmann::json& j) { return j["state"] != "running"; });
  CHECK(failed["state"] == "failed");
  CHECK(failed["error"].get<std::string>().find("cannot start /nonexistent/pillbox") != std::string::npos);

  JobBoard shell("/bin/sh", {});
  const auto b = shell.start(JobRequest{JobKind::kReplay, {"-c", "echo '{\"record_id\": 1}'; kill -SEGV $$"}, "a", {}});
  REQUIRE(b.status == 202);
  const auto crashed = job_when(shell, b.body["job"]["id"].get<std::int64_t>(),
                                [](const nlohmann::json& j) { return j["state"] != "running"; });
  CHECK(crashed["state"] == "failed");
  CHECK(crashed["signal"] == SIGSEGV);
  CHECK(crashed["result"]["results"][0]["record_id"] == 1);  // what it wrote before is kept
}

TEST_CASE("job board: the child has stdin, stdout, stderr and the progress pipe, none of the server's descriptors") {
  // A descriptor without close-on-exec, as cpp-httplib's sockets are.
  const int leaky = ::fcntl(STDERR_FILENO, F_DUPFD, 20);
  REQUIRE(leaky >= 20);
  JobBoard board("/bin/sh", {});
  const auto a = board.start(JobRequest{JobKind::kReplay, {"-c", "ls /proc/$$/fd >&2"}, "a", {}});
  REQUIRE(a.status == 202);
  const auto job = job_when(board, a.body["job"]["id"].get<std::int64_t>(),
                            [](const nlohmann::json& j) { return j["state"] != "running"; });
  ::close(leaky);
  CHECK(job["state"] == "done");
  // dash keeps a descriptor of its own, 10: the rest is 0 to 3.
  CHECK(job["stderr_tail"] == "0\n1\n10\n2\n3\n");
}

TEST_CASE("job board: a serve started with SIGCHLD ignored still sees its jobs end; a job has a process group of its own") {
  // Whoever started serve may have left SIGCHLD ignored (it survives exec):
  // the kernel would reap the jobs itself and no job would ever end.
  ::signal(SIGCHLD, SIG_IGN);
  JobBoard board("/bin/sh", {});
  const auto a = board.start(JobRequest{JobKind::kReproduce,
                                        {"-c", "[ \"$(cut -d' ' -f5 /proc/$$/stat)\" = \"$$\" ] && echo '{\"own\": 1}'"},
                                        "a", {"1"}});
  REQUIRE(a.status == 202);
  const auto ended = job_when(board, a.body["job"]["id"].get<std::int64_t>(),
                              [](const nlohmann::json& j) { return j.value("state", "") != "running"; });
  CHECK(ended["state"] == "done");
  CHECK(ended["result"]["own"] == 1);  // its pid is its process group: a terminal's signals to serve miss it
  ::signal(SIGCHLD, SIG_DFL);
}

TEST_CASE("job board: the source's secrets go into the job's environment, never into its command or JSON") {
  setenv("PILLBOX_AMQP_PASSWORD", "inherited", 1);  // serve's own: replaced, not passed on
  JobBoard board("/bin/sh", {"--amqp", "amqp://u@h:5672/%2f"}, {{"PILLBOX_AMQP_PASSWORD", "s3cret"}});
  const auto a = board.start(JobRequest{JobKind::kReproduce,
                                        {"-c", "printf '{\"tail\": \"%s\"}' \"${PILLBOX_AMQP_PASSWORD#s3c}\""}, "a", {"1"}});
  unsetenv("PILLBOX_AMQP_PASSWORD");
  REQUIRE(a.status == 202);
  const auto ended = job_when(board, a.body["job"]["id"].get<std::int64_t>(),
                              [](const nlohmann::json& j) { return j.value("state", "") != "running"; });
  CHECK(ended["state"] == "done");
  CHECK(ended["result"]["tail"] == "ret");  // the password's tail: the job had it
  CHECK(ended.dump().find("s3cret") == std::string::npos);
  CHECK(board.list().body.dump().find("s3cret") == std::string::npos);
}
