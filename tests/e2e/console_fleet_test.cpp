// pillbox serve --redis URL --stream NAME (issue 16): the console over the
// fleet's quarantine, against a real redis-server and a real `pillbox
// worker` that dead-letters crashing payloads (mixed_poison: S segfaults, A
// aborts). The API answers what `quarantine list/show/stats --json --redis`
// print; pages work with entry ids (in headless Chromium); a discard needs
// the token and lands in the fleet's audit trail as web; what the fleet does
// not have (tasks, runs) is said, not a 500; a patch is the CLI's; Redis stopped is 503
// and the console goes on when it is back; /metrics counts the dead letters.
#include <algorithm>
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <httplib.h>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/console_client.h"
#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

using e2e::body_of;
using e2e::metric_sample;
using e2e::run_pillbox;
using e2e::Serve;
using nlohmann::json;

namespace {

// A durable Redis (stopped and started again in a test) whose stream `jobs`
// has the dead letters of a real worker: two crashes of one bug, an abort;
// the fine task is not one.
struct Fleet {
  e2e::RedisServer server{e2e::RedisOptions{true}};
  e2e::TempDir home;  // the default store directory's parent: where the token goes

  void dead_letter() {
    e2e::add_entries(server, "jobs", {{"segv-1", "S corrupt"}, {"abort", "A checksum"}, {"segv-2", "S again"},
                                      {"fine", "fine"}});
    const auto worker = run_pillbox({"worker", "--redis", server.url(), "--stream", "jobs", "--backoff-base", "10ms",
                                     "--exit-when-idle", "500ms", "--quiet", "--", e2e::fixture("mixed_poison")});
    INFO(worker.describe());
    REQUIRE(worker.exit_code == 0);
  }
  std::map<std::string, std::string> env() const { return {{"PILLBOX_STORE", home.path() + "/state/pillbox"}}; }
  // Where serve said its token is (the default: serve-redis-HASH.token in
  // the default store directory).
  std::string token_file() const { return e2e::token_file_of(*serve); }
  std::string token() const { return e2e::token_of(*serve); }
  // `pillbox quarantine ARGS... --redis URL --stream jobs --json`: its JSON lines.
  json cli(std::vector<std::string> args) const {
    args.insert(args.begin(), "quarantine");
    args.insert(args.end(), {"--redis", server.url(), "--stream", "jobs", "--json"});
    const auto r = run_pillbox(args);
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    return json(r.records);
  }
  std::string id_of(const std::string& key) const {
    const json listed = cli({"list", "--key", key});
    REQUIRE(listed.size() == 1);
    return listed[0]["id"].get<std::string>();
  }
  // The dead letters, then `pillbox serve --redis` over them on a free
  // port, and a client of it.
  httplib::Client& start(bool with_worker = true) {
    if (with_worker) dead_letter();
    serve = std::make_unique<Serve>(
        std::vector<std::string>{"--redis", server.url(), "--stream", "jobs", "--listen", "127.0.0.1:0"}, env());
    REQUIRE_MESSAGE(serve->url().rfind("http://127.0.0.1:", 0) == 0, serve->err());
    http = std::make_unique<httplib::Client>("127.0.0.1", serve->port());
    return *http;
  }
  // A dead letter as anyone who can write to Redis may write it; its id.
  std::string forge(const std::vector<std::string>& fields) {
    auto redis = e2e::connect(server);
    std::vector<std::string_view> command = {"XADD", "jobs:dlq", "*"};
    command.insert(command.end(), fields.begin(), fields.end());
    auto id = redis.command(command);
    REQUIRE(id.has_value());
    return pillbox::broker::reply_text(id->get());
  }
  std::unique_ptr<Serve> serve;
  std::unique_ptr<httplib::Client> http;
};

}  // namespace

TEST_CASE("serve --redis: the API answers what quarantine list/show/stats --json --redis print; /metrics counts") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  httplib::Client& http = f.start();

  const json listed = body_of(http.Get("/api/records"));
  CHECK(listed["records"] == f.cli({"list"}));
  CHECK(listed["records"].size() == 3);
  CHECK(listed["total"] == 3);
  CHECK(body_of(http.Get("/api/records?kind=crash"))["records"] == f.cli({"list", "--kind", "crash"}));
  CHECK(body_of(http.Get("/api/records?limit=1&offset=1"))["records"] == f.cli({"list", "--limit", "1", "--offset", "1"}));
  CHECK(body_of(http.Get("/api/records?limit=1&offset=1"))["total"] == 3);
  const std::string id = f.id_of("segv-1");
  const json shown = body_of(http.Get("/api/records/" + id));
  CHECK(json::array({shown}) == f.cli({"show", id}));
  CHECK(shown["stream"]["name"] == "jobs");
  CHECK(body_of(http.Get("/api/stats"))["groups"] == f.cli({"stats"}));

  // The payload: its exact bytes.
  const auto payload = http.Get("/api/records/" + id + "/payload");
  REQUIRE(payload);
  CHECK(payload->status == 200);
  CHECK(payload->body == "S corrupt");
  // The bundle: what `quarantine export ID --bundle --redis` writes, as a .tar.gz.
  const auto bundle = http.Get("/api/records/" + id + "/bundle");
  REQUIRE(bundle);
  CHECK(bundle->status == 200);
  CHECK(bundle->get_header_value("Content-Disposition") == "attachment; filename=\"record-" + id + ".tar.gz\"");
  e2e::TempDir out;
  const auto untar = e2e::run_command("/bin/tar", {"-xzf", out.write("b.tar.gz", bundle->body), "-C", out.path()});
  INFO(untar.describe());
  REQUIRE(untar.exit_code == 0);
  const auto exported = run_pillbox({"quarantine", "export", id, "--bundle", "-o", out.path() + "/cli", "--redis",
                                     f.server.url(), "--stream", "jobs"});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);
  for (const char* name : {"payload", "policy.policy", "record.json", "reproduce.sh"}) {
    CAPTURE(name);
    CHECK(e2e::read_file(out.path() + "/record-" + id + "/" + name) == e2e::read_file(out.path() + "/cli/" + name));
  }

  // /metrics: the dead letters by status and kind, promtool-clean.
  const auto metrics = http.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  INFO(metrics->body);
  CHECK(metric_sample(metrics->body, "pillbox_fleet_up") == 1);
  std::map<std::string, long long> counted;  // the CLI's records by series
  for (const auto& r : listed["records"]) {
    ++counted["pillbox_quarantine_records{status=\"" + r["status"].get<std::string>() + "\",kind=\"" +
              r["kind"].get<std::string>() + "\"}"];
  }
  CHECK(counted.size() >= 1);
  for (const auto& [series, n] : counted) CHECK_MESSAGE(metric_sample(metrics->body, series) == n, series);
  CHECK(metric_sample(metrics->body, "pillbox_quarantine_records{status=\"discarded\",kind=\"crash\"}") == 0);
  CHECK(metric_sample(metrics->body, "pillbox_quarantine_fingerprints") == static_cast<long long>(f.cli({"stats"}).size()));
  e2e::check_with_promtool(metrics->body);

  // The token went to the default store directory, made 0700 for it.
  struct stat st {};
  REQUIRE(::stat((f.home.path() + "/state/pillbox").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  CHECK(f.token().size() == 64);
  CHECK(f.token_file().rfind(f.home.path() + "/state/pillbox/serve-redis-", 0) == 0);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: ids are entry ids; tasks and runs are said to be the store's, not a 500; patch as the CLI") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  httplib::Client& http = f.start();
  const std::string id = f.id_of("abort");

  for (const std::string bad : {"12", "abc", "1-x", "1-"}) {
    const auto r = http.Get("/api/records/" + bad);
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(body_of(r)["error"].get<std::string>().find("entry IDs such as 1712345678901-0") != std::string::npos);
  }
  const auto unknown = http.Get("/api/records/1-0");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  CHECK(http.Get("/records/abc")->status == 400);
  CHECK(http.Get("/api/records?source=run")->status == 400);

  for (const char* path : {"/api/tasks", "/api/runs"}) {
    const auto r = http.Get(path);
    REQUIRE(r);
    CHECK(r->status == 404);
    CHECK(body_of(r)["error"].get<std::string>().find("--metrics") != std::string::npos);
  }
  for (const char* path : {"/tasks", "/runs"}) {
    const auto r = http.Get(path);
    REQUIRE(r);
    CHECK(r->status == 404);
    CHECK(r->body.find("--metrics") != std::string::npos);
    CHECK(r->body.find("jobs:dlq") != std::string::npos);  // the header names the quarantine
  }

  // A patch: the token checked first; arguments refused with the CLI's own
  // words (a fleet's task has none); a payload stored as the CLI stores it.
  const std::string args = R"({"note": "fix", "set_args": {"mode": "x"}})";
  CHECK(http.Post("/api/records/" + id + "/patch", args, "application/json")->status == 401);
  const httplib::Headers auth = {{"Authorization", "Bearer " + f.token()}};
  const auto refused = http.Post("/api/records/" + id + "/patch", auth, args, "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 400);
  const auto cli = run_pillbox({"quarantine", "patch", id, "--set-arg", "mode=x", "--note", "fix", "--redis",
                                f.server.url(), "--stream", "jobs"});
  CHECK(cli.exit_code == 2);
  CHECK(cli.err == "pillbox quarantine: " + body_of(refused)["error"].get<std::string>() + "\n");
  const auto patched = http.Post("/api/records/" + id + "/patch", auth, R"({"note": "fix", "payload_b64": "QQ=="})",
                                 "application/json");
  REQUIRE(patched);
  CHECK(patched->status == 200);
  CHECK(body_of(patched)["n"] == 1);
  CHECK(body_of(patched)["record_id"] == id);
  const auto shown = run_pillbox({"quarantine", "show", id, "--json", "--redis", f.server.url(), "--stream", "jobs"});
  REQUIRE(shown.records.size() == 1);
  CHECK(shown.records[0]["revisions"][0]["payload_sha256"] == body_of(patched)["payload_sha256"]);

  // The record's page: its revisions, a patch form of the payload only; the
  // commands name the fleet.
  const auto page = http.Get("/records/" + id);
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->body.find("patch-form") != std::string::npos);
  CHECK(page->body.find("name=\"set_args\"") == std::string::npos);
  CHECK(page->body.find("<table class=\"revisions\">") != std::string::npos);
  CHECK(page->body.find("discard-form") != std::string::npos);
  CHECK(page->body.find("pillbox reproduce " + id + " --redis " + f.server.url() + "/0 --stream jobs") !=
        std::string::npos);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: discard needs the token; with it the fleet's audit trail says web; a replaying one is 409") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  httplib::Client& http = f.start();
  const std::string id = f.id_of("segv-1");
  const std::string path = "/api/records/" + id + "/discard";
  const std::string body = R"({"reason": "known bug, fixed upstream"})";
  const json before = f.cli({"show", id});

  const auto none = http.Post(path, body, "application/json");
  REQUIRE(none);
  CHECK(none->status == 401);
  const auto wrong = http.Post(path, {{"Authorization", "Bearer " + std::string(64, '0')}}, body, "application/json");
  REQUIRE(wrong);
  CHECK(wrong->status == 403);
  const httplib::Headers auth = {{"Authorization", "Bearer " + f.token()}};
  CHECK(http.Post(path, auth, R"({"why": "x"})", "application/json")->status == 400);
  CHECK(http.Post("/api/records/bad/discard", auth, body, "application/json")->status == 400);
  CHECK(http.Post("/api/records/1-0/discard", auth, body, "application/json")->status == 404);
  CHECK(f.cli({"show", id}) == before);

  // Being replayed (its redrive lock held, as `quarantine replay` holds it): refused, unchanged.
  const std::string other = f.id_of("segv-2");
  {
    auto redis = e2e::connect(f.server);
    REQUIRE(redis.command({"SET", "jobs:dlq:lock:" + other, "a replay of the test"}).has_value());
  }
  const json other_before = f.cli({"show", other});
  const auto locked = http.Post("/api/records/" + other + "/discard", auth, body, "application/json");
  REQUIRE(locked);
  CHECK(locked->status == 409);
  CHECK(body_of(locked)["error"].get<std::string>().find("is being replayed right now") != std::string::npos);
  CHECK(f.cli({"show", other}) == other_before);

  const auto done = http.Post(path, auth, body, "application/json");
  REQUIRE(done);
  CHECK(done->status == 200);
  CHECK(body_of(done) == json({{"discarded", {{{"id", id}, {"was", "quarantined"}}}},
                               {"already_discarded", json::array()},
                               {"changed", 1}}));
  const json shown = f.cli({"show", id})[0];
  CHECK(shown["status"] == "discarded");
  const json& last = shown["audit"].back();
  CHECK(last["actor"].get<std::string>().rfind("web: 127.0.0.1", 0) == 0);
  CHECK(last["action"] == "discarded");
  CHECK(last["detail"] == "known bug, fixed upstream (was quarantined)");
  const auto again = http.Post(path, auth, body, "application/json");
  REQUIRE(again);
  CHECK(body_of(again)["already_discarded"] == json::array({id}));
  CHECK(f.cli({"show", id})[0]["audit"].size() == shown["audit"].size());
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: Redis stopped is 503 (JSON and page) and serve goes on; restarted, 200 again") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  httplib::Client& http = f.start();
  const std::string id = f.id_of("abort");
  REQUIRE(http.Get("/api/records")->status == 200);

  f.server.stop();
  for (const std::string& path : std::vector<std::string>{"/api/records", "/api/records/" + id, "/api/stats"}) {
    const auto r = http.Get(path);
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(body_of(r)["error"].get<std::string>().find("Redis at " + f.server.url() + "/0 cannot be reached") !=
          std::string::npos);
  }
  const auto page = http.Get("/records/" + id);
  REQUIRE(page);
  CHECK(page->status == 503);
  CHECK(page->body.find("cannot be reached") != std::string::npos);
  const auto metrics = http.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("\npillbox_fleet_up 0\n") != std::string::npos);
  CHECK(f.serve->running());

  f.server.start();
  const auto back = http.Get("/api/records/" + id);
  REQUIRE(back);
  CHECK(back->status == 200);
  CHECK(json::array({body_of(back)}) == f.cli({"show", id}));
  CHECK(http.Get("/api/records")->status == 200);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: the record page in Chromium shows the fingerprint, links by entry id, escapes a payload") {
  if (!e2e::have_chromium()) return;
  Fleet f;
  REQUIRE_REDIS(f.server);
  // A dead letter a browser must never run: markup in its key and payload,
  // bytes that are not UTF-8 (S: mixed_poison crashes on it).
  const std::string hostile_key = "<img src=x onerror=alert(2)>";
  e2e::add_entries(f.server, "jobs", {{hostile_key, std::string("S<script>alert(1)</script>\xff\xfe end")}});
  f.start();
  const json record = f.cli({"show", f.id_of("segv-1")})[0];
  const std::string id = record["id"];
  const std::string fingerprint = record["fingerprint"];

  const auto list = e2e::browse(f.serve->url());
  INFO(list.describe());
  REQUIRE(list.exit_code == 0);
  CHECK(list.out.find("href=\"/records/" + id + "\"") != std::string::npos);
  CHECK(list.out.find(fingerprint) != std::string::npos);

  const auto page = e2e::browse(f.serve->url() + "records/" + id);
  INFO(page.describe());
  REQUIRE(page.exit_code == 0);
  CHECK(page.out.find("Record " + id) != std::string::npos);
  CHECK(page.out.find(fingerprint) != std::string::npos);
  CHECK(page.out.find("dead letter") != std::string::npos);
  CHECK(page.out.find("S corrupt") != std::string::npos);  // the payload's preview

  CHECK(list.out.find("&lt;img src=x onerror=alert(2)&gt;") != std::string::npos);
  CHECK(list.out.find("<img") == std::string::npos);
  const auto hostile = e2e::browse(f.serve->url() + "records/" + f.id_of(hostile_key));
  INFO(hostile.describe());
  REQUIRE(hostile.exit_code == 0);
  CHECK(hostile.out.find("payload hex") != std::string::npos);  // not UTF-8: a hex dump
  CHECK(hostile.out.find("S&lt;script&gt;alert(1") != std::string::npos);
  CHECK(hostile.out.find("<img") == std::string::npos);
  std::size_t scripts = 0;
  for (auto at = hostile.out.find("<script"); at != std::string::npos; at = hostile.out.find("<script", at + 1)) ++scripts;
  CHECK(scripts == 1);  // console.js, no element from the dead letter
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: a reproduce job runs `pillbox reproduce ID --redis URL --stream NAME`; its verdict is audited as web") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  httplib::Client& http = f.start();
  const std::string id = f.id_of("segv-1");
  const httplib::Headers auth = {{"Authorization", "Bearer " + f.token()}};
  CHECK(http.Post("/api/records/1712345678901/reproduce", auth, "{}", "application/json")->status == 404);
  CHECK(http.Post("/api/replay", auth, R"({"ids": [7]})", "application/json")->status == 400);  // not an entry id
  const auto started = http.Post("/api/records/" + id + "/reproduce", auth, R"({"runs": 2})", "application/json");
  REQUIRE(started);
  REQUIRE(started->status == 202);
  const std::string job = "/api/jobs/" + std::to_string(body_of(started)["job"]["id"].get<std::int64_t>());
  json ended;
  REQUIRE(e2e::eventually([&] {
    ended = body_of(http.Get(job))["job"];
    return ended["state"] != "running";
  }));
  INFO(ended.dump());
  CHECK(ended["state"] == "done");
  const json command = ended["command"];
  CHECK(std::find(command.begin(), command.end(), "--redis") != command.end());
  CHECK(ended["result"]["verdict"] == "reliable");
  const json shown = f.cli({"show", id})[0];
  CHECK(shown["reproduce"]["verdict"] == "reliable");
  CHECK(shown["audit"].back()["actor"].get<std::string>().rfind("web: 127.0.0.1 via pillbox reproduce", 0) == 0);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis, quarantine list --redis: a dead letter nested 200000 deep lists as unreadable, no crash") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  const std::string deep = "{\"crash_state\":" + std::string(200000, '[') + std::string(200000, ']') + "}";
  const std::string id = f.forge({"key", "deep", "kind", "crash", "fingerprint", "pb1-00", "payload", "P", "record", deep});
  const json listed = f.cli({"list"});
  REQUIRE(listed.size() == 1);
  CHECK(listed[0]["id"] == id);
  CHECK(listed[0]["key"] == "deep");
  httplib::Client& http = f.start(false);
  const auto records = http.Get("/api/records");
  REQUIRE(records);
  CHECK(records->status == 200);
  CHECK(body_of(records)["records"] == listed);
  const json shown = body_of(http.Get("/api/records/" + id));
  CHECK(shown["message"].get<std::string>().find("no readable `record` field (it nests deeper than 64 levels)") !=
        std::string::npos);
  CHECK(http.Get("/records/" + id)->status == 200);
  CHECK(metric_sample(http.Get("/metrics")->body, "pillbox_fleet_up") == 1);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: a state that is not pillbox's or a lock key of another type marks that record only") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  const std::string bad_state = f.forge({"key", "a", "kind", "crash", "fingerprint", "pb1-01", "payload", "A"});
  const std::string bad_lock = f.forge({"key", "b", "kind", "crash", "fingerprint", "pb1-01", "payload", "B"});
  const std::string fine = f.forge({"key", "c", "kind", "crash", "fingerprint", "pb1-02", "payload", "C"});
  {
    auto redis = e2e::connect(f.server);
    REQUIRE(redis.command({"HSET", "jobs:dlq:state", bad_state, "not json"}).has_value());
    REQUIRE(redis.command({"HSET", "jobs:dlq:lock:" + bad_lock, "x", "y"}).has_value());
  }
  httplib::Client& http = f.start(false);
  const auto records = http.Get("/api/records");
  REQUIRE(records);
  REQUIRE(records->status == 200);
  const json listed = body_of(records)["records"];
  REQUIRE(listed.size() == 3);
  std::map<std::string, json> by_id;
  for (const auto& r : listed) by_id[r["id"]] = r;
  CHECK(by_id[bad_state]["state_error"].get<std::string>().find("field " + bad_state + " of jobs:dlq:state") !=
        std::string::npos);
  CHECK(by_id[bad_lock]["state_error"].get<std::string>().find("jobs:dlq:lock:" + bad_lock) != std::string::npos);
  CHECK(by_id[bad_lock]["state_error"].get<std::string>().find("holds a hash") != std::string::npos);
  CHECK_FALSE(by_id[fine].contains("state_error"));
  json without_notes = listed;  // list --json prints the store's list object: the note is the console's and show's
  for (auto& r : without_notes) r.erase("state_error");
  CHECK(without_notes == f.cli({"list"}));
  CHECK(f.cli({"show", bad_state})[0]["state_error"] == by_id[bad_state]["state_error"]);
  CHECK(http.Get("/api/stats")->status == 200);
  const auto shown = http.Get("/api/records/" + bad_state);
  REQUIRE(shown);
  CHECK(shown->status == 200);
  CHECK(body_of(shown)["state_error"] == by_id[bad_state]["state_error"]);
  const auto page = http.Get("/");
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->body.find("state unreadable") != std::string::npos);
  const auto record_page = http.Get("/records/" + bad_lock);
  REQUIRE(record_page);
  CHECK(record_page->status == 200);
  CHECK(record_page->body.find("holds a hash") != std::string::npos);
  const std::string metrics = http.Get("/metrics")->body;
  CHECK(metric_sample(metrics, "pillbox_fleet_up") == 1);
  CHECK(metric_sample(metrics, "pillbox_quarantine_records{status=\"quarantined\",kind=\"crash\"}") == 3);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: each fleet's console has its own default token file; a second on one file is refused") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  f.forge({"key", "a", "kind", "crash", "fingerprint", "pb1-01", "payload", "A"});
  httplib::Client& http = f.start(false);
  const std::string file = f.token_file();
  CHECK(file.find("/serve.token") == std::string::npos);  // plain `pillbox serve`'s file stays its own
  CHECK(file.size() == (f.home.path() + "/state/pillbox/serve-redis-").size() + 12 + 6);
  const std::string token = f.token();
  REQUIRE(token.size() == 64);

  // Another stream of the same Redis: a file of its own, both run.
  Serve other({"--redis", f.server.url(), "--stream", "other", "--listen", "127.0.0.1:0"}, f.env());
  REQUIRE_MESSAGE(other.url().rfind("http://127.0.0.1:", 0) == 0, other.err());
  CHECK(e2e::token_file_of(other) != file);
  CHECK(other.stop(SIGTERM) == 0);

  // The same stream again: refused, and the first's token still acts.
  const auto second = run_pillbox({"serve", "--redis", f.server.url(), "--stream", "jobs", "--listen", "127.0.0.1:0"},
                                  "", f.env());
  CHECK(second.exit_code == 3);
  CHECK(second.err.find(") is serving with the token file " + file + "; stop it or use its token") != std::string::npos);
  CHECK(f.token() == token);
  const std::string id = f.cli({"list"})[0]["id"];
  const auto discarded = http.Post("/api/records/" + id + "/discard", {{"Authorization", "Bearer " + token}},
                                   R"({"reason":"checked"})", "application/json");
  REQUIRE(discarded);
  CHECK(discarded->status == 200);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

// The most resident memory the process had (VmHWM), in KiB.
long long peak_rss_kb(pid_t pid) {
  const std::string status = e2e::read_file("/proc/" + std::to_string(pid) + "/status");
  const auto at = status.find("VmHWM:");
  REQUIRE(at != std::string::npos);
  return std::stoll(status.substr(at + 6));
}

TEST_CASE("serve --redis: listing dead letters of megabytes reads none of their payloads; show and download do") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  const std::string big(4 << 20, 'x');
  std::string id;
  for (int i = 0; i < 16; ++i) {
    id = f.forge({"key", "big-" + std::to_string(i), "kind", "crash", "fingerprint", "pb1-01", "payload", big});
  }
  httplib::Client& http = f.start(false);
  const long long before = peak_rss_kb(f.serve->pid());
  const auto one = http.Get("/api/records?limit=1");
  REQUIRE(one);
  CHECK(one->status == 200);
  const json listed = body_of(one);
  CHECK(listed["total"] == 16);
  CHECK(listed["records"][0]["payload_size"] == big.size());
  CHECK(http.Get("/api/stats")->status == 200);
  CHECK(http.Get("/")->status == 200);
  CHECK(http.Get("/metrics")->body.find("pillbox_fleet_up 1") != std::string::npos);
  // 16 payloads of 4 MiB are 64 MiB: none of them was read (before: a page of 256 entries, every payload).
  INFO("peak RSS before " << before << " KiB, after " << peak_rss_kb(f.serve->pid()) << " KiB");
  CHECK(peak_rss_kb(f.serve->pid()) - before < 16 * 1024);
  const auto payload = http.Get("/api/records/" + id + "/payload");
  REQUIRE(payload);
  CHECK(payload->status == 200);
  CHECK(payload->body == big);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

// How many times Redis ran `command` since its stats were reset (INFO commandstats).
long long calls_of(const e2e::RedisServer& server, const std::string& command) {
  auto redis = e2e::connect(server);
  auto info = redis.command({"INFO", "commandstats"});
  REQUIRE(info.has_value());
  const std::string text = pillbox::broker::reply_text(info->get());
  const auto at = text.find("cmdstat_" + command + ":calls=");
  return at == std::string::npos ? 0 : std::stoll(text.substr(at + command.size() + 15));
}

TEST_CASE("serve --redis: a listing reads the dead letters once (no second scan to count); /metrics is cached") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  for (const char* key : {"a", "b", "c"}) f.forge({"key", key, "kind", "crash", "fingerprint", "pb1-01", "payload", key});
  httplib::Client& http = f.start(false);
  REQUIRE(e2e::connect(f.server).command({"CONFIG", "RESETSTAT"}).has_value());
  const json listed = body_of(http.Get("/api/records?limit=1&offset=1"));
  CHECK(listed["total"] == 3);
  CHECK(listed["records"].size() == 1);
  CHECK(listed["records"][0]["key"] == "b");
  CHECK(calls_of(f.server, "eval") == 2);  // one page of entries, their states and locks
  REQUIRE(e2e::connect(f.server).command({"CONFIG", "RESETSTAT"}).has_value());
  CHECK(http.Get("/metrics")->status == 200);
  CHECK(http.Get("/metrics")->status == 200);  // within a second: the last count
  CHECK(calls_of(f.server, "eval") == 2);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: an unknown kind counts as kind=\"other\"; a payload not matching its sha256 is a 409") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  f.forge({"key", "a", "kind", "made-up-kind", "fingerprint", "pb1-01", "payload", "A"});
  const std::string forged = f.forge({"key", "b", "kind", "crash", "fingerprint", "pb1-02", "payload", "B", "record",
                                      R"({"key":"b","kind":"crash","payload_sha256":"00"})"});
  httplib::Client& http = f.start(false);
  const std::string metrics = http.Get("/metrics")->body;
  INFO(metrics);
  CHECK(metric_sample(metrics, "pillbox_quarantine_records{status=\"quarantined\",kind=\"other\"}") == 1);
  CHECK(metrics.find("made-up-kind") == std::string::npos);
  e2e::check_with_promtool(metrics);
  const auto payload = http.Get("/api/records/" + forged + "/payload");
  REQUIRE(payload);
  CHECK(payload->status == 409);
  CHECK(body_of(payload)["error"].get<std::string>().find("does not match the sha256") != std::string::npos);
  const auto page = http.Get("/records/" + forged);
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->body.find("does not match the sha256 its record names") != std::string::npos);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: a dead letter whose redrive_of names no record lists as a record, flagged") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  const std::string real = f.forge({"key", "a", "kind", "crash", "fingerprint", "pb1-01", "payload", "A"});
  f.forge({"key", "a", "kind", "crash", "fingerprint", "pb1-01", "payload", "A", "redrive_of", real});
  const std::string orphan =
      f.forge({"key", "b", "kind", "crash", "fingerprint", "pb1-02", "payload", "B", "redrive_of", "1-0"});
  httplib::Client& http = f.start(false);
  const json listed = body_of(http.Get("/api/records"));
  REQUIRE(listed["records"].size() == 2);  // the real redrive's dead letter is an attempt of `real`
  CHECK(listed["records"][0]["id"] == orphan);
  CHECK(listed["records"][0]["message"].get<std::string>().find("its redrive_of names 1-0, which is no dead letter") !=
        std::string::npos);
  CHECK(listed["records"][1]["id"] == real);
  CHECK(listed["records"] == f.cli({"list"}));
  CHECK(http.Get("/api/records/" + orphan)->status == 200);
  CHECK(metric_sample(http.Get("/metrics")->body, "pillbox_quarantine_fingerprints") == 2);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve --redis: the first request after Redis restarted answers 200; a key of another type then is a 500") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  f.forge({"key", "a", "kind", "crash", "fingerprint", "pb1-01", "payload", "A"});
  httplib::Client& http = f.start(false);
  REQUIRE(http.Get("/api/records")->status == 200);
  f.server.stop();
  f.server.start();
  const auto first = http.Get("/api/records");
  REQUIRE(first);
  CHECK(first->status == 200);
  CHECK(body_of(first)["total"] == 1);

  f.server.stop();
  f.server.start();
  {
    auto redis = e2e::connect(f.server);
    REQUIRE(redis.command({"DEL", "jobs:dlq"}).has_value());
    REQUIRE(redis.command({"SET", "jobs:dlq", "not a stream"}).has_value());
  }
  const auto wrong = http.Get("/api/records");
  REQUIRE(wrong);
  CHECK(wrong->status == 500);
  CHECK(body_of(wrong)["error"].get<std::string>().find("holds a string, not a dead-letter stream") !=
        std::string::npos);
  CHECK(f.serve->stop(SIGTERM) == 0);
}

TEST_CASE("serve: --store and --redis together, or --stream alone, are usage errors naming both") {
  const auto both = run_pillbox({"serve", "--store", "/nonexistent", "--redis", "redis://127.0.0.1:1", "--stream", "j"});
  CHECK(both.exit_code == 2);
  CHECK(both.err.find("--store DIR or --redis URL --stream NAME, not both") != std::string::npos);
  const auto stream = run_pillbox({"serve", "--stream", "j"});
  CHECK(stream.exit_code == 2);
  CHECK(stream.err.find("--stream goes with --redis URL") != std::string::npos);
  const auto no_stream = run_pillbox({"serve", "--redis", "redis://127.0.0.1:1"});
  CHECK(no_stream.exit_code == 2);
  CHECK(no_stream.err.find("--redis needs --stream NAME") != std::string::npos);
  e2e::TempDir dir;
  const auto down = run_pillbox({"serve", "--redis", "redis://127.0.0.1:" + std::to_string(e2e::free_loopback_port()),
                                 "--stream", "j", "--token-file", dir.path() + "/t"});
  CHECK(down.exit_code == 3);
  CHECK(down.err.find("cannot reach Redis") != std::string::npos);
}
