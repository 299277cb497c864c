// pillbox serve's actions that run (issue 16): reproduce, minimize and
// replay as jobs, each the pillbox CLI run by the console over a real store,
// asked for over real HTTP. Without the token nothing starts; with it the
// verdict lands in the store, audited as web; a replay's --stop-after stops
// it with the records it did not reach still quarantined; a stopped minimize
// keeps its progress for the next; a serve killed with SIGKILL leaves no
// record claimed by the replay it ran; the job page renders in Chromium.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

#include "tests/e2e/console_client.h"
#include "tests/e2e/console_serve.h"

using e2e::body_of;
using e2e::browse;
using e2e::Browser;
using e2e::have_chromium;
using e2e::run_pillbox;
using e2e::Serve;
using e2e::sql_int;
using e2e::sql_rows;
using e2e::task_line;
using namespace e2e::console;

namespace {

const std::chrono::seconds kJobDeadline{180};

// The access token's header, for the store `store` serve writes it to.
httplib::Headers auth(const std::string& store) { return {{"Authorization", "Bearer " + read_token(store)}}; }

// POSTs `body` to `path`; the reply's status and JSON.
std::pair<int, json> post(httplib::Client& http, const std::string& path, const std::string& body,
                          const httplib::Headers& headers = {}) {
  auto r = http.Post(path, headers, body, "application/json");
  REQUIRE(r);
  return {r->status, body_of(r)};
}

// Starts a job (202) and returns its id.
std::int64_t start(httplib::Client& http, const std::string& store, const std::string& path, const std::string& body) {
  const auto [status, reply] = post(http, path, body, auth(store));
  INFO(path << " " << body << " -> " << reply.dump());
  REQUIRE(status == 202);
  REQUIRE(reply["job"]["id"].is_number_integer());
  return reply["job"]["id"].get<std::int64_t>();
}

json job_of(httplib::Client& http, std::int64_t id) {
  auto r = http.Get("/api/jobs/" + std::to_string(id));
  REQUIRE(r);
  REQUIRE(r->status == 200);
  return body_of(r)["job"];
}

// Polls the job until `done` holds for it (deadline kJobDeadline); the job then.
json job_when(httplib::Client& http, std::int64_t id, const std::function<bool(const json&)>& done) {
  json job;
  const bool ok = e2e::eventually(
      [&] {
        job = job_of(http, id);
        return done(job);
      },
      kJobDeadline, std::chrono::milliseconds(50));
  REQUIRE_MESSAGE(ok, "job " << id << " is still " << job.dump());
  return job;
}

json ended(httplib::Client& http, std::int64_t id) {
  return job_when(http, id, [](const json& j) { return j["state"] != "running"; });
}

// Records of a program that never ends (sleep_forever) under a 1 s wall
// limit: every run of them takes a second, so a job on them runs long enough
// to be stopped, and a minimize improves on each run (every candidate hangs
// the same way) and saves its progress each time.
struct SlowStore {
  e2e::TempDir dir;
  std::string store = dir.path() + "/store";
  std::string db = store + "/pillbox.db";

  explicit SlowStore(int records) {
    std::string input;
    for (int i = 1; i <= records; ++i) input += task_line("slow-" + std::to_string(i), std::string(64, 'a' + i));
    const auto run = run_pillbox({"run", "--store", store, "--json", "--timeout", "1s", "--max-attempts", "1", "-", "--",
                                  e2e::fixture("sleep_forever")},
                                 input);
    INFO(run.describe());
    REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine WHERE kind = 'wall-timeout'") == records);
  }
  // quarantine show ID --json.
  json cli_show(int id) const {
    const auto r = run_pillbox({"quarantine", "show", std::to_string(id), "--json", "--store", store});
    INFO(r.describe());
    REQUIRE(r.records.size() == 1);
    return r.records[0];
  }
};

}  // namespace

TEST_CASE("jobs: reproduce needs the token and a good body; with them a job whose verdict is kept, audited as web") {
  ConsoleStore s;
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  const std::string id = s.id_of("segv");
  const std::string path = "/api/records/" + id + "/reproduce";
  const std::string before = s.state();

  CHECK(post(http, path, R"({"runs": 2})").first == 401);
  CHECK(post(http, path, R"({"runs": 2})", {{"Authorization", "Bearer " + std::string(64, '0')}}).first == 403);
  for (const std::string& bad : {std::string("not json"), std::string(R"({"runs": 0})"), std::string(R"({"runs": 101})"),
                                 std::string(R"({"runs": "5"})"), std::string(R"({"runs": 2, "jobs": 8})"),
                                 std::string("[]")}) {
    const auto [status, reply] = post(http, path, bad, auth(s.store));
    INFO(bad << " -> " << reply.dump());
    CHECK(status == 400);
    CHECK(reply["error"].is_string());
  }
  CHECK(post(http, "/api/records/0x1/reproduce", "{}", auth(s.store)).first == 404);
  CHECK(post(http, "/api/replay", R"({"filter": {"status": "quarantined"}})", auth(s.store)).first == 400);
  CHECK(post(http, "/api/replay", R"({"ids": [1], "filter": {"kind": "crash"}})", auth(s.store)).first == 400);
  CHECK(post(http, "/api/replay", R"({"filter": {"fingerprint": "--all"}})", auth(s.store)).first == 400);
  CHECK(post(http, "/api/records/" + id + "/minimize", R"({"max_time": 0})", auth(s.store)).first == 400);
  // Nothing started, nothing changed.
  CHECK(body_of(http.Get("/api/jobs"))["jobs"].empty());
  CHECK(s.state() == before);

  const std::int64_t job_id = start(http, s.store, path, R"({"runs": 3})");
  const json job = ended(http, job_id);
  INFO(job.dump());
  CHECK(job["state"] == "done");
  CHECK(job["kind"] == "reproduce");
  CHECK(job["exit_code"] == 0);
  CHECK(job["actor"] == "web: 127.0.0.1");
  CHECK(job["result"]["verdict"] == "reliable");
  CHECK(job["result"]["runs"] == 3);
  CHECK(job["progress"]["done"] == 3);  // the last progress line, at the verb's finish
  // The store has the verdict, and the audit entry names the web address.
  const json shown = s.cli({"quarantine", "show", id})[0];
  CHECK(shown["reproduce"]["verdict"] == "reliable");
  CHECK(shown["audit"].back()["action"] == "reproduced");
  CHECK(shown["audit"].back()["actor"].get<std::string>().rfind("web: 127.0.0.1 via pillbox reproduce", 0) == 0);

  // The list, an unknown job, a stop of one that has ended.
  const json jobs = body_of(http.Get("/api/jobs"))["jobs"];
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0]["id"] == job_id);
  CHECK(!jobs[0].contains("stderr_tail"));
  CHECK(http.Get("/api/jobs/99")->status == 404);
  CHECK(http.Get("/api/jobs/x")->status == 404);
  CHECK(post(http, "/api/jobs/" + std::to_string(job_id) + "/stop", "", auth(s.store)).first == 409);
  CHECK(post(http, "/api/jobs/99/stop", "", auth(s.store)).first == 404);

  // The pages, as Chromium renders them: the job's state and result.
  auto page = http.Get("/jobs/" + std::to_string(job_id));
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->body.find("id=\"job-state\" class=\"status job-done\">done<") != std::string::npos);
  CHECK(http.Get("/records/" + id)->body.find("/reproduce\"") != std::string::npos);
  if (have_chromium()) {
    const auto dom = browse(serve.url() + "jobs/" + std::to_string(job_id));
    INFO(dom.describe());
    CHECK(dom.out.find(">done</span>") != std::string::npos);
    CHECK(dom.out.find("\"verdict\": \"reliable\"") != std::string::npos);
    const auto list = browse(serve.url() + "jobs");
    CHECK(list.out.find("href=\"/jobs/" + std::to_string(job_id) + "\"") != std::string::npos);
  }
  CHECK(serve.stop(SIGTERM) == 0);
}

TEST_CASE("jobs: a replay of one fingerprint with stop_after 1 stops after the first; the others stay quarantined") {
  ConsoleStore s;  // three records of one bug (segv, the hostile key, markup)
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  const std::string fp = sql_rows(s.db, "SELECT fingerprint FROM quarantine WHERE key = 'segv'")[0][0];
  REQUIRE(sql_int(s.db, "SELECT count(*) FROM quarantine WHERE fingerprint = '" + fp + "'") == 3);

  const std::int64_t job_id =
      start(http, s.store, "/api/replay", json({{"filter", {{"fingerprint", fp}}}, {"batch", 1}, {"stop_after", 1}}).dump());
  const json job = ended(http, job_id);
  INFO(job.dump());
  CHECK(job["state"] == "done");
  CHECK(job["exit_code"] == 1);  // the CLI's: a stop condition ended it
  REQUIRE(job["result"]["results"].size() == 1);
  CHECK(job["result"]["results"][0]["replay"] == "failed-again");
  CHECK(job["result"]["stopped_because"].get<std::string>().find("failed again with " + fp) != std::string::npos);
  const std::string of_fp = " FROM quarantine WHERE fingerprint = '" + fp + "'";
  CHECK(sql_int(s.db, "SELECT count(*)" + of_fp + " AND status = 'failed-again'") == 1);
  CHECK(sql_int(s.db, "SELECT count(*)" + of_fp + " AND status = 'quarantined'") == 2);
  CHECK(sql_int(s.db, "SELECT count(*) FROM quarantine WHERE status = 'replaying'") == 0);
  const auto audit = sql_rows(s.db, "SELECT actor FROM audit WHERE action = 'replayed'");
  REQUIRE(audit.size() == 1);
  CHECK(audit[0][0].rfind("web: 127.0.0.1 via pillbox quarantine replay", 0) == 0);
  // The quarantine list filtered by the fingerprint offers the replay.
  CHECK(http.Get("/?fingerprint=" + fp)->body.find("Replay the records of this filter") != std::string::npos);
}

TEST_CASE("jobs: at most 2 run, one per record; a stopped minimize ends stopped and the next one resumes it") {
  SlowStore s(2);
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  const std::int64_t first = start(http, s.store, "/api/records/1/minimize", R"({"max_runs": 100000, "max_time": 600})");
  // The same record again: refused while the first runs on it.
  const auto [busy, busy_reply] = post(http, "/api/records/1/reproduce", "{}", auth(s.store));
  CHECK(busy == 409);
  CHECK(busy_reply["error"].get<std::string>().find("runs on record 1") != std::string::npos);
  const std::int64_t second = start(http, s.store, "/api/records/2/reproduce", R"({"runs": 100})");
  // A third while two run (each of theirs takes a second at least).
  const auto [third, third_reply] = post(http, "/api/records/2/reproduce", R"({"runs": 1})", auth(s.store));
  CHECK(third == 429);
  CHECK(third_reply["error"] == "2 jobs are running; wait or stop one at /jobs");
  // Once the minimize has made some runs (its progress says so), stopped.
  job_when(http, first, [](const json& j) {
    return j["state"] != "running" || (j["progress"].is_object() && j["progress"]["done"].get<long>() >= 2);
  });
  const auto [stopping, stop_reply] = post(http, "/api/jobs/" + std::to_string(first) + "/stop", "", auth(s.store));
  CHECK(stopping == 202);
  CHECK(stop_reply["job"]["stop_requested"] == true);
  const json stopped = ended(http, first);
  INFO(stopped.dump());
  CHECK(stopped["state"] == "stopped");
  CHECK(stopped["exit_code"] == 128 + SIGTERM);
  CHECK(stopped["result"]["finished"] == false);
  CHECK(stopped["result"]["stopped_by"] == "SIGTERM");
  const auto runs_before = stopped["result"]["runs"].get<long>();
  CHECK(runs_before >= 2);
  CHECK(stopped["result"]["minimized_size"].get<long>() < 64);
  // The reproduce, stopped too: it records nothing.
  CHECK(post(http, "/api/jobs/" + std::to_string(second) + "/stop", "", auth(s.store)).first == 202);
  CHECK(ended(http, second)["state"] == "stopped");
  CHECK(!s.cli_show(2).contains("reproduce"));

  // The next minimize goes on from the best payload so far.
  const std::int64_t again = start(http, s.store, "/api/records/1/minimize",
                                   json({{"max_runs", runs_before + 2}}).dump());
  const json resumed = ended(http, again);
  INFO(resumed.dump());
  CHECK(resumed["state"] == "done");
  CHECK(resumed["result"]["resumed"] == true);
  CHECK(resumed["result"]["runs"].get<long>() > runs_before);
  CHECK(resumed["result"]["minimized_size"].get<long>() <= stopped["result"]["minimized_size"].get<long>());
}

TEST_CASE("jobs: a serve killed with SIGKILL stops its replay, which gives back every record it held") {
  SlowStore s(3);
  const std::string& store = s.store;
  const std::string& db = s.db;
  auto serve = std::make_unique<Serve>(store);
  httplib::Client http("127.0.0.1", serve->port());
  const std::int64_t job_id =
      start(http, store, "/api/replay", R"({"filter": {"kind": "wall-timeout"}, "batch": 1})");
  const json running = job_when(http, job_id, [&](const json& j) {
    return j["state"] != "running" || (j["pid"].is_number() && sql_int(db, "SELECT count(*) FROM quarantine WHERE "
                                                                             "status = 'replaying'") > 0);
  });
  REQUIRE(running["state"] == "running");
  const pid_t child = running["pid"].get<pid_t>();
  CHECK(serve->stop(SIGKILL) == 128 + SIGKILL);
  // The replay hears of it (PR_SET_PDEATHSIG), stops, and releases its claims.
  const bool gone = e2e::eventually(
      [&] {
        std::ifstream in("/proc/" + std::to_string(child) + "/stat");
        const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const auto close = stat.rfind(')');
        return stat.empty() || (close != std::string::npos && stat.compare(close + 2, 1, "Z") == 0);
      },
      kJobDeadline);
  CHECK(gone);
  CHECK(e2e::eventually([&] { return sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'replaying'") == 0; },
                        std::chrono::seconds(30)));
  // Not every record was reached: the ones left are quarantined still.
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") >= 1);
}

TEST_CASE("jobs: in Chromium, a record's Reproduce needs the token, then goes to the job's page, which follows it to done") {
  if (!have_chromium()) return;
  SlowStore s(1);
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  Browser browser;
  const std::string tab = browser.open(serve.url() + "records/1");
  // Fills the Reproduce form (4 runs of a second each, 2 at once), clicks,
  // and returns what the form says once the server has answered, or "" when
  // the page went on to the job's.
  auto click = [&](const std::string& token) {
    return browser.evaluate(tab, "(() => {"
                                 "  const form = document.querySelector('form[data-action$=\"/reproduce\"]');"
                                 "  const result = form.querySelector('.job-result');"
                                 "  document.querySelector('.job-token').value = " + json(token).dump() + ";"
                                 "  form.querySelector('[name=runs]').value = '4';"
                                 "  const answered = new Promise(done => new MutationObserver(() => {"
                                 "    if (result.textContent !== 'starting…') done(result.textContent);"
                                 "  }).observe(result, {childList: true, characterData: true, subtree: true}));"
                                 "  form.querySelector('button').click();"
                                 "  return answered;"
                                 "})()");
  };
  CHECK(click("").get<std::string>().rfind("401: ", 0) == 0);
  CHECK(body_of(http.Get("/api/jobs"))["jobs"].empty());

  // With the token: the job starts and the tab goes to its page.
  browser.evaluate(tab, "document.querySelector('.job-token').value = " + json(read_token(s.store)).dump() +
                            "; document.querySelector('form[data-action$=\"/reproduce\"] button').click(); true");
  browser.wait_for("Page.loadEventFired", tab);
  CHECK(browser.evaluate(tab, "location.pathname") == "/jobs/1");
  CHECK(browser.evaluate(tab, "sessionStorage.getItem('pillbox-token')") == read_token(s.store));
  // Running when the page loaded: it refreshes until the job ends, then
  // loads again whole (once the job has ended, it says done).
  if (browser.evaluate(tab, "document.getElementById('job-state').textContent") == "running") {
    CHECK(browser.evaluate(tab, "document.getElementById('job-stop') !== null") == true);
    browser.wait_for("Page.loadEventFired", tab);
  }
  CHECK(browser.evaluate(tab, "document.getElementById('job-state').textContent") == "done");
  CHECK(browser.evaluate(tab, "document.querySelector('pre.result').textContent.includes('\"runs\": 4')") == true);
  CHECK(browser.evaluate(tab, "document.getElementById('job-stop') === null") == true);
  CHECK(s.cli_show(1)["reproduce"]["runs"] == 4);
  browser.screenshot_for_docs(tab, "job.png");
}

TEST_CASE("jobs: a serve stopped by SIGTERM stops its running replay and waits for it: nothing is left replaying") {
  SlowStore s(3);
  auto serve = std::make_unique<Serve>(s.store);
  httplib::Client http("127.0.0.1", serve->port());
  const std::int64_t job_id = start(http, s.store, "/api/replay", R"({"ids": [1, 2, 3], "batch": 1})");
  const json running = job_when(http, job_id, [&](const json& j) {
    return j["state"] != "running" ||
           (j["pid"].is_number() && sql_int(s.db, "SELECT count(*) FROM quarantine WHERE status = 'replaying'") > 0);
  });
  REQUIRE(running["state"] == "running");
  CHECK(serve->stop(SIGTERM) == 0);
  // serve has waited for the replay: its claims are given back already.
  CHECK(sql_int(s.db, "SELECT count(*) FROM quarantine WHERE status = 'replaying'") == 0);
  CHECK(sql_int(s.db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined'") >= 1);
  CHECK(::kill(running["pid"].get<pid_t>(), 0) != 0);  // reaped by serve
}
