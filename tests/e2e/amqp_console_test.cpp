// pillbox serve --amqp URL --queue NAME: the console over the fleet's
// quarantine on RabbitMQ, against a real rabbitmq-server the test starts
// itself (rabbit_server.h; one broker, one test case, a function per case)
// and a real `pillbox worker --amqp` that dead-letters crashing payloads
// (mixed_poison: S segfaults, A aborts). The API answers what `quarantine
// list/show/stats --json --amqp` print; discard needs the token and is
// audited as web; a replay started through the API runs as a job whose
// outcome is shown; the broker stopped is 503, and serve goes on once it is
// back; /metrics passes promtool; a dead letter with hostile properties,
// headers and record renders escaped. The console logs in as a user of its
// own whose password appears in no reply, page, job command or log line.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <httplib.h>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/base64.h"
#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/amqp_quarantine.h"
#include "supervisor/broker/amqp_topology.h"
#include "tests/e2e/amqp_client.h"
#include "tests/e2e/background.h"
#include "tests/e2e/console_client.h"
#include "tests/e2e/rabbit_server.h"
#include "tests/e2e/support.h"

using json = nlohmann::json;
using pillbox::broker::AmqpOutgoing;
using e2e::body_of;
using e2e::metric_sample;
using e2e::run_pillbox;
using e2e::Serve;

namespace {

struct Fleet {
  Fleet(e2e::RabbitServer& s, std::string k, std::string p) : server(s), key(std::move(k)), secret(std::move(p)) {}
  e2e::RabbitServer& server;
  std::string key;     // the fleet key's file
  std::string secret;  // the console user's password: shown nowhere
  e2e::TempDir home{0700};  // the default store directory's parent: where the token goes
  // Every reply the consoles gave (headers and bodies) and what they and
  // their jobs printed: the password must be in none of it.
  std::string seen;

  // The console's own user (console:SECRET), with every right on "/".
  std::string console_url() const { return server.url_for("console", secret, "%2f"); }
  // The broker as the console names it: without the password.
  std::string shown_url() const { return "amqp://console@127.0.0.1:" + std::to_string(server.port()) + "/%2f"; }
  std::map<std::string, std::string> env() const { return {{"PILLBOX_STORE", home.path() + "/state/pillbox"}}; }

  std::vector<std::string> worker(const std::string& queue, bool fixed, const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = {"worker", "--amqp", server.url(), "--queue", queue, "--consumer",
                                     fixed ? "fixed" : "broken", "--max-attempts", "1", "--fleet-key", key,
                                     "--backoff-base", "10ms"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--", fixed ? std::string("/bin/cat") : e2e::fixture("mixed_poison")});
    return args;
  }
  // `pillbox quarantine VERB... --amqp URL --queue QUEUE --fleet-key KEY`,
  // as the console's user (lists name the broker with it).
  std::vector<std::string> quarantine(const std::string& queue, const std::vector<std::string>& verb) const {
    std::vector<std::string> args = {"quarantine"};
    args.insert(args.end(), verb.begin(), verb.end());
    args.insert(args.end(), {"--amqp", console_url(), "--queue", queue, "--fleet-key", key});
    return args;
  }
  // Its --json lines.
  json cli(const std::string& queue, const std::vector<std::string>& verb) const {
    auto args = quarantine(queue, verb);
    args.push_back("--json");
    const auto r = run_pillbox(args);
    INFO(r.describe());
    REQUIRE(r.exit_code == 0);
    return json(r.records);
  }
  std::string id_of(const std::string& queue, const std::string& key_name) const {
    for (const json& r : cli(queue, {"list"})) {
      if (r.value("key", "") == key_name) return r["id"].dump();
    }
    FAIL("no record of key " << key_name);
    return "";
  }
  // `tasks` published to `queue` and dead-lettered by a broken worker.
  void dead_letter(const std::string& queue, const std::vector<std::pair<std::string, std::string>>& tasks) {
    const auto declared = run_pillbox(worker(queue, false, {"--exit-when-idle", "200ms", "--quiet"}));
    REQUIRE_MESSAGE(declared.exit_code == 0, declared.describe());
    auto c = e2e::amqp_connect(server);
    REQUIRE(c.confirm_publishes().is_ok());
    for (const auto& [key_name, payload] : tasks) {
      AmqpOutgoing m;
      m.body = payload;
      m.message_id = "msg-" + key_name;
      m.headers = {{"key", key_name}};
      REQUIRE(c.publish(queue, m).is_ok());
    }
    REQUIRE(c.wait_confirmed().is_ok());
    const auto w = run_pillbox(worker(queue, false, {"--exit-when-idle", "1500ms", "--quiet"}));
    REQUIRE_MESSAGE(w.exit_code == 0, w.describe());
  }
};

// A console on `queue` and a client of it that keeps every reply in
// fleet.seen.
struct Console {
  Fleet& fleet;
  std::unique_ptr<Serve> serve;
  std::unique_ptr<httplib::Client> http;

  Console(Fleet& f, const std::string& queue, std::vector<std::string> extra = {},
          std::map<std::string, std::string> env = {}, std::string url = "")
      : fleet(f) {
    std::vector<std::string> args = {"--amqp", url.empty() ? f.console_url() : url, "--queue", queue,
                                     "--fleet-key", f.key, "--listen", "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    for (const auto& [name, value] : f.env()) env.emplace(name, value);
    serve = std::make_unique<Serve>(args, env);
    REQUIRE_MESSAGE(serve->url().rfind("http://127.0.0.1:", 0) == 0, serve->err());
    http = std::make_unique<httplib::Client>("127.0.0.1", serve->port());
    http->set_read_timeout(60, 0);
  }
  ~Console() {
    if (serve) fleet.seen += serve->err();
  }
  void keep(const httplib::Result& r) {
    if (!r) return;
    for (const auto& [name, value] : r->headers) fleet.seen += name + ": " + value + "\n";
    fleet.seen += r->body + "\n";
  }
  httplib::Result get(const std::string& path) {
    auto r = http->Get(path);
    keep(r);
    return r;
  }
  httplib::Result post(const std::string& path, const std::string& body, bool with_token = true) {
    httplib::Headers auth;
    if (with_token) auth.emplace("Authorization", "Bearer " + e2e::token_of(*serve));
    auto r = http->Post(path, auth, body, "application/json");
    keep(r);
    return r;
  }
  // The job of a 202, once it has ended.
  json job_when_ended(const httplib::Result& started) {
    REQUIRE(started);
    REQUIRE_MESSAGE(started->status == 202, started->body);
    const std::string path = "/api/jobs/" + std::to_string(body_of(started)["job"]["id"].get<std::int64_t>());
    json job;
    REQUIRE(e2e::eventually([&] {
      job = body_of(get(path))["job"];
      return job["state"] != "running";
    }));
    return job;
  }
  int stop() {
    const int code = serve->stop(SIGTERM);
    fleet.seen += serve->err();
    return code;
  }
};

// ---- the API answers what the CLI prints ----------------------------------------

void reads_as_the_cli(Fleet& f) {
  Console c(f, "jobs");
  const json listed = body_of(c.get("/api/records"));
  CHECK(listed["records"] == f.cli("jobs", {"list"}));
  CHECK(listed["records"].size() == 3);
  CHECK(listed["total"] == 3);
  CHECK(body_of(c.get("/api/records?kind=crash"))["records"] == f.cli("jobs", {"list", "--kind", "crash"}));
  CHECK(body_of(c.get("/api/records?limit=1&offset=1"))["records"] ==
        f.cli("jobs", {"list", "--limit", "1", "--offset", "1"}));
  const std::string id = f.id_of("jobs", "segv-1");
  const json shown = body_of(c.get("/api/records/" + id));
  CHECK(json::array({shown}) == f.cli("jobs", {"show", id}));
  CHECK(shown["signature"] == "valid");
  CHECK(shown["amqp"]["message_id"] == "msg-segv-1");
  CHECK(body_of(c.get("/api/stats"))["groups"] == f.cli("jobs", {"stats"}));
  CHECK(c.get("/api/records/00" + id)->status == 200);  // one record, one id: 007 is 7

  // Ids are offsets: anything else is 400, an offset with no dead letter 404.
  for (const std::string bad : {"abc", "1-0", "-1", "1x"}) {
    const auto r = c.get("/api/records/" + bad);
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(body_of(r)["error"].get<std::string>().find("offsets in the stream NAME.dlq") != std::string::npos);
  }
  CHECK(c.get("/api/records/99")->status == 404);
  CHECK(c.get("/api/records?source=run")->status == 400);
  for (const char* path : {"/api/tasks", "/api/runs"}) {
    const auto r = c.get(path);
    REQUIRE(r);
    CHECK(r->status == 404);
    CHECK(body_of(r)["error"].get<std::string>().find("--metrics") != std::string::npos);
  }
  CHECK(body_of(c.get("/api/runs"))["error"].get<std::string>().find("the workers of queue jobs") != std::string::npos);

  // The payload, exact; the bundle as `quarantine export --bundle --amqp` writes it.
  const auto payload = c.get("/api/records/" + id + "/payload");
  REQUIRE(payload);
  CHECK(payload->status == 200);
  CHECK(payload->body == "S corrupt");
  const auto bundle = c.get("/api/records/" + id + "/bundle");
  REQUIRE(bundle);
  REQUIRE(bundle->status == 200);
  e2e::TempDir out;
  const auto untar = e2e::run_command("/bin/tar", {"-xzf", out.write("b.tar.gz", bundle->body), "-C", out.path()});
  REQUIRE_MESSAGE(untar.exit_code == 0, untar.describe());
  const auto cli_bundle = run_pillbox(f.quarantine("jobs", {"export", id, "--bundle", "-o", out.path() + "/cli"}));
  REQUIRE_MESSAGE(cli_bundle.exit_code == 0, cli_bundle.describe());
  for (const char* name : {"payload", "policy.policy", "record.json", "reproduce.sh"}) {
    CAPTURE(name);
    CHECK(e2e::read_file(out.path() + "/record-" + id + "/" + name) == e2e::read_file(out.path() + "/cli/" + name));
  }

  // The record's page: the broker's part, a patch form of the payload only
  // (a fleet's task has no handler arguments), minimize; the commands name
  // the broker without the password.
  const auto page = c.get("/records/" + id);
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->body.find(f.shown_url() + " jobs.dlq") != std::string::npos);  // the header
  CHECK(page->body.find("message id <code>msg-segv-1</code>") != std::string::npos);
  CHECK(page->body.find("pillbox reproduce " + id + " --amqp " + f.shown_url() + " --queue jobs --fleet-key " + f.key +
                        "</code>, with PILLBOX_AMQP_PASSWORD set)") != std::string::npos);
  CHECK(page->body.find("patch-form") != std::string::npos);
  CHECK(page->body.find("name=\"set_args\"") == std::string::npos);
  CHECK(page->body.find("pillbox quarantine replay " + id + " --amqp " + f.shown_url() + " --queue jobs") !=
        std::string::npos);
  CHECK(page->body.find("discard-form") != std::string::npos);
  CHECK(page->body.find("/minimize\"") != std::string::npos);  // amqp_minimize_test.cpp runs it
  // The Patch action: the CLI's (fleet_patch_test.cpp tests it), audited as web.
  const auto args = c.post("/api/records/" + id + "/patch", R"({"note": "fix", "set_args": {"mode": "x"}})");
  REQUIRE(args);
  CHECK(args->status == 400);
  CHECK(body_of(args)["error"].get<std::string>().find("--set-arg does not apply on the fleet's quarantine") !=
        std::string::npos);
  const auto patch = c.post("/api/records/" + id + "/patch", R"({"note": "fix", "payload_b64": "QQ=="})");
  REQUIRE(patch);
  CHECK(patch->status == 200);
  CHECK(body_of(patch)["n"] == 1);
  CHECK(body_of(patch)["record_id"] == std::stoll(id));
  CHECK(body_of(patch)["actor"].get<std::string>().rfind("web: ", 0) == 0);
  const auto patched = c.get("/records/" + id);
  REQUIRE(patched);
  CHECK(patched->body.find("<table class=\"revisions\">") != std::string::npos);
  CHECK(c.get("/")->status == 200);
  CHECK(c.get("/groups")->status == 200);

  // /metrics: the dead letters by status and kind, promtool-clean.
  const auto metrics = c.get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  INFO(metrics->body);
  CHECK(metric_sample(metrics->body, "pillbox_fleet_up") == 1);
  CHECK(metric_sample(metrics->body, "pillbox_quarantine_records{status=\"quarantined\",kind=\"crash\"}") == 3);
  CHECK(metric_sample(metrics->body, "pillbox_quarantine_fingerprints") ==
        static_cast<long long>(f.cli("jobs", {"stats"}).size()));
  e2e::check_with_promtool(metrics->body);

  // The token: serve-amqp-HASH.token in the default store directory, made 0700.
  const std::string token_file = e2e::token_file_of(*c.serve);
  CHECK(token_file.rfind(f.home.path() + "/state/pillbox/serve-amqp-", 0) == 0);
  CHECK(token_file.size() == (f.home.path() + "/state/pillbox/serve-amqp-").size() + 12 + 6);
  struct stat st {};
  REQUIRE(::stat((f.home.path() + "/state/pillbox").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  // One console per fleet: a second on the same broker, user, vhost and queue is refused.
  const auto second = run_pillbox({"serve", "--amqp", f.console_url(), "--queue", "jobs", "--listen", "127.0.0.1:0"},
                                  "", f.env());
  f.seen += second.out + second.err;
  CHECK(second.exit_code == 3);
  CHECK(second.err.find(") is serving with the token file " + token_file) != std::string::npos);
  CHECK(c.stop() == 0);
}

// ---- discard ---------------------------------------------------------------------

void discard_needs_the_token(Fleet& f) {
  Console c(f, "jobs");
  const std::string id = f.id_of("jobs", "abort");
  const std::string path = "/api/records/" + id + "/discard";
  const std::string body = R"({"reason": "known bug, fixed upstream"})";
  const json before = f.cli("jobs", {"show", id});
  CHECK(c.post(path, body, false)->status == 401);
  CHECK(c.http->Post(path, {{"Authorization", "Bearer " + std::string(64, '0')}}, body, "application/json")->status ==
        403);
  CHECK(c.post(path, R"({"why": "x"})")->status == 400);
  CHECK(c.post("/api/records/bad/discard", body)->status == 400);
  CHECK(c.post("/api/records/99/discard", body)->status == 404);
  CHECK(f.cli("jobs", {"show", id}) == before);

  // Being replayed (its lock queue held, as `quarantine replay` holds it): refused, unchanged.
  const std::string other = f.id_of("jobs", "segv-1");
  {
    auto replay = e2e::amqp_connect(f.server);
    REQUIRE(replay.declare_exclusive_queue("jobs.dlq.lock." + other).is_ok());
    const json other_before = f.cli("jobs", {"show", other});
    const auto locked = c.post("/api/records/" + other + "/discard", body);
    REQUIRE(locked);
    CHECK(locked->status == 409);
    CHECK(body_of(locked)["error"].get<std::string>().find("is being replayed right now") != std::string::npos);
    CHECK(f.cli("jobs", {"show", other}) == other_before);
  }
  // Allowed, and back to review: the fleet's state, signed, as `quarantine allow --amqp` keeps it.
  const auto allowed = c.post("/api/records/" + other + "/allow", R"({"note": "fixed in 2.3"})");
  REQUIRE(allowed);
  CHECK_MESSAGE(allowed->status == 200, allowed->body);
  CHECK(f.cli("jobs", {"show", other})[0]["status"] == "allowed");
  CHECK(c.post("/api/records/" + other + "/allow", R"({"revoke": true})")->status == 200);
  CHECK(f.cli("jobs", {"show", other})[0]["status"] == "quarantined");

  const auto done = c.post(path, body);
  REQUIRE(done);
  CHECK(done->status == 200);
  CHECK(body_of(done) == json({{"discarded", {{{"id", std::stoll(id)}, {"was", "quarantined"}}}},
                               {"already_discarded", json::array()},
                               {"changed", 1}}));
  const json shown = f.cli("jobs", {"show", id})[0];
  CHECK(shown["status"] == "discarded");
  const json& last = shown["audit"].back();
  CHECK(last["actor"].get<std::string>().rfind("web: 127.0.0.1", 0) == 0);
  CHECK(last["detail"] == "known bug, fixed upstream (was quarantined)");
  CHECK(body_of(c.get("/api/records/" + id))["status"] == "discarded");
  CHECK(body_of(c.post(path, body))["already_discarded"] == json::array({std::stoll(id)}));
  CHECK(c.stop() == 0);
}

// ---- a replay job ----------------------------------------------------------------

// POST /api/replay runs `pillbox quarantine replay ID --amqp URL --queue
// NAME`, the password in its environment only; a fixed worker resolves the
// record, and the job says so (no output: RabbitMQ's replay takes none).
void replay_job(Fleet& f) {
  Console c(f, "jobs");
  const std::string id = f.id_of("jobs", "segv-2");
  e2e::Background fixed(e2e::pillbox_binary(), f.worker("jobs", true));
  CHECK(c.post("/api/replay", R"({"ids": ["x-1"]})")->status == 400);  // not an offset
  const json job = c.job_when_ended(c.post("/api/replay", R"({"ids": [)" + id + R"(], "batch": 1})"));
  INFO(job.dump());
  CHECK(job["state"] == "done");
  CHECK(job["exit_code"] == 0);
  const json command = job["command"];
  const auto at = std::find(command.begin(), command.end(), "--amqp");
  REQUIRE(at != command.end());
  CHECK(*(at + 1) == f.shown_url());
  REQUIRE(job["result"]["results"].size() == 1);
  const json& replayed = job["result"]["results"][0];
  CHECK(replayed["replay"] == "resolved");
  CHECK_FALSE(replayed.contains("output"));
  CHECK(replayed.value("output_omitted", "").find("its output went with its result") == 0);
  const json shown = f.cli("jobs", {"show", id})[0];
  CHECK(shown["status"] == "resolved");
  CHECK(body_of(c.get("/api/records/" + id))["status"] == "resolved");
  const auto page = c.get("/jobs/" + job["id"].dump());
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->body.find("--amqp " + f.shown_url() + " --queue jobs") != std::string::npos);
  CHECK(c.get("/jobs")->status == 200);
  fixed.signal(SIGTERM);
  CHECK(fixed.wait() == 143);
  f.seen += fixed.err();
  CHECK(c.stop() == 0);
}

// ---- the broker stopped mid-serve ------------------------------------------------

void broker_stopped_then_back(Fleet& f) {
  Console c(f, "jobs");
  const std::string id = f.id_of("jobs", "segv-1");
  REQUIRE(c.get("/api/records")->status == 200);
  f.server.stop();
  const std::string said = "RabbitMQ at " + f.shown_url() + " cannot be reached: ";
  for (const std::string& path : std::vector<std::string>{"/api/records", "/api/records/" + id, "/api/stats"}) {
    const auto r = c.get(path);
    REQUIRE(r);
    CHECK(r->status == 503);
    CHECK(body_of(r)["error"].get<std::string>().find(said) == 0);
    CHECK(body_of(r)["error"].get<std::string>().find("the console answers again once it is back") !=
          std::string::npos);
  }
  const auto page = c.get("/records/" + id);
  REQUIRE(page);
  CHECK(page->status == 503);
  CHECK(page->body.find("cannot be reached") != std::string::npos);
  CHECK(c.post("/api/records/" + id + "/discard", R"({"reason": "x"})")->status == 503);
  CHECK(e2e::eventually([&] { return c.get("/metrics")->body.find("\npillbox_fleet_up 0\n") != std::string::npos; }));
  CHECK(c.serve->running());

  f.server.start();
  // The stream may need a moment after the broker says it is ready: each
  // request until then says why it is not answered (503, never a 500).
  std::string last;
  std::map<int, int> statuses;
  const auto ready = std::chrono::steady_clock::now();
  CHECK(e2e::eventually([&] {
    const auto back = c.get("/api/records");
    last = back ? std::to_string(back->status) + " " + back->body : "no answer";
    if (back) ++statuses[back->status];
    if (back && back->status != 200 && statuses[back->status] == 1) MESSAGE("after the restart: " << last);
    return back && back->status == 200;
  }));
  INFO("the last answer: " << last);
  MESSAGE("the console answered 200 " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                             std::chrono::steady_clock::now() - ready).count()
                                      << " ms after the broker was ready; " << statuses.size() - 1
                                      << " other statuses before (" << (statuses.count(503) ? statuses[503] : 0)
                                      << " times 503)");
  CHECK(statuses.count(500) == 0);
  const auto back = c.get("/api/records");
  REQUIRE(back);
  CHECK(body_of(back)["records"] == f.cli("jobs", {"list"}));
  CHECK(json::array({body_of(c.get("/api/records/" + id))}) == f.cli("jobs", {"show", id}));
  CHECK(e2e::eventually([&] { return c.get("/metrics")->body.find("\npillbox_fleet_up 1\n") != std::string::npos; }));
  CHECK(c.stop() == 0);
}

// ---- the password from the environment --------------------------------------------

// A URL without a password takes $PILLBOX_AMQP_PASSWORD's (so that it is on
// no command line); a wrong one is refused at start, without saying it.
void password_from_the_environment(Fleet& f) {
  e2e::TempDir dir;
  const std::string bare = f.shown_url();
  {
    Console c(f, "jobs", {"--token-file", dir.path() + "/t.token"}, {{"PILLBOX_AMQP_PASSWORD", f.secret}}, bare);
    CHECK(body_of(c.get("/api/records"))["records"] == f.cli("jobs", {"list"}));
    CHECK(c.stop() == 0);
  }
  const auto wrong = run_pillbox({"serve", "--amqp", bare, "--queue", "jobs", "--token-file", dir.path() + "/u.token",
                                  "--listen", "127.0.0.1:0"},
                                 "", {{"PILLBOX_AMQP_PASSWORD", "not-" + f.secret}});
  f.seen += wrong.out + wrong.err;
  CHECK(wrong.exit_code == 3);
  CHECK(wrong.err.find("refused the login of user 'console'") != std::string::npos);
  CHECK(wrong.err.find("not-" + f.secret) == std::string::npos);
}

// ---- a hostile dead letter ---------------------------------------------------------

// What anyone allowed to publish to NAME.dlx can put in NAME.dlq: markup in
// the message id, the headers, a forged record (key, kind, fingerprint,
// message, crash state, stderr tail) and the payload; bytes that are not
// UTF-8; headers of tens of KiB; a payload of megabytes. Pages show it as
// text, JSON as valid UTF-8 strings, and headless Chromium runs none of it.
void hostile_dead_letter(Fleet& f) {
  auto conn = e2e::amqp_connect(f.server);
  REQUIRE(pillbox::broker::declare_topology(conn, {.queue = "hostile"}).has_value());
  REQUIRE(conn.confirm_publishes().is_ok());
  const std::string bad_utf8 = "\xff\xfe\xc0\xaf\xed\xa0\x80";
  const std::string stderr_tail = "<script>alert('stderr')</script>" + bad_utf8 + "\x1b[31m red";
  const json record = {
      {"key", "<img src=x onerror=alert('key')>" + std::string("\xe2\x80\xae") + "txt.exe"},  // U+202E: RTL override
      {"kind", "crash"},
      {"fingerprint", "pb1-<svg onload=alert('fp')>"},
      {"message", "</span></dd><script>alert('message')</script>" + std::string(20000, '<')},
      {"crash_state", {"<iframe src=javascript:alert('frame')>", "\"><b>bold</b>"}},
      {"handler", "exec\" onmouseover=\"alert('handler')"},
      {"stderr_tail_b64", pillbox::base64_encode(stderr_tail)},
      {"attempts_history", {{{"run", "<script>alert('run')</script>"}, {"kind", "crash"}, {"message", "<hr>"}}}}};
  const std::string payload = "<script>alert('payload')</script>" + bad_utf8 + std::string(2 << 20, '<');
  AmqpOutgoing m;
  m.body = payload;
  m.message_id = "<script>alert('mid')</script>" + std::string(200, '"');
  m.correlation_id = "</code><script>alert('cid')</script>";
  m.headers = {{"key", "<img src=x onerror=alert('hdr')>"},
               {"pillbox-record", record.dump(-1, ' ', false, json::error_handler_t::replace)},
               {"pillbox-queue", "hostile<script>alert('queue')</script>"},
               {"pillbox-x-death", json({{"deaths", {{{"reason", "<script>alert('xd')</script>"},
                                                          {"queue", "<img src=x onerror=alert('xq')>"},
                                                          {"count", "<b>bold</b>"}}}}})
                                       .dump()},
               {"pillbox-original", json({{"message_id", "<script>alert('orig')</script>"}}).dump()},
               {"evil-header", std::string(60000, '<') + bad_utf8}};
  REQUIRE(conn.publish_to_exchange("hostile.dlx", m).is_ok());
  REQUIRE(conn.wait_confirmed().is_ok());

  Console c(f, "hostile");
  const json listed = f.cli("hostile", {"list"});
  REQUIRE(listed.size() == 1);
  const std::string id = listed[0]["id"].dump();
  const auto list = c.get("/api/records");
  REQUIRE(list);
  CHECK(list->status == 200);
  CHECK(list->get_header_value("Content-Type").rfind("application/json", 0) == 0);
  CHECK(list->get_header_value("X-Content-Type-Options") == "nosniff");
  CHECK(body_of(list)["records"] == listed);  // valid JSON: invalid UTF-8 replaced, as the CLI does
  const auto shown = c.get("/api/records/" + id);
  REQUIRE(shown);
  CHECK(shown->status == 200);
  const json j = body_of(shown);
  CHECK(json::array({j}) == f.cli("hostile", {"show", id}));
  CHECK(j["signature"] == "missing");
  CHECK(j["message"].get<std::string>().rfind("</span></dd><script>alert('message')</script>", 0) == 0);  // as text
  CHECK(shown->body.find('\xff') == std::string::npos);

  for (const std::string& path : {"/records/" + id, std::string("/"), std::string("/groups")}) {
    CAPTURE(path);
    const auto page = c.get(path);
    REQUIRE(page);
    CHECK(page->status == 200);
    const std::string& html = page->body;
    for (const char* injected : {"<script>alert", "<img", "<svg", "<iframe", "<b>bold", "<hr>", "onmouseover=\"",
                                 "\xe2\x80\xae", "\x1b", "\xff"}) {
      CHECK_MESSAGE(html.find(injected) == std::string::npos, path << " has " << injected);
    }
    std::size_t scripts = 0;
    for (auto at = html.find("<script"); at != std::string::npos; at = html.find("<script", at + 1)) ++scripts;
    CHECK(scripts == 1);  // console.js
  }
  const auto page = c.get("/records/" + id);
  CHECK(page->body.find("&lt;script&gt;alert(&#39;stderr&#39;)") != std::string::npos);
  CHECK(page->body.find("&lt;script&gt;alert(&#39;mid&#39;)") != std::string::npos);
  CHECK(page->body.find("payload hex") != std::string::npos);  // not UTF-8: a hex dump of its head
  CHECK(page->body.size() < (1u << 20));  // the payload's head only
  const auto download = c.get("/api/records/" + id + "/payload");
  REQUIRE(download);
  CHECK(download->body == payload);
  CHECK(download->get_header_value("Content-Type") == "application/octet-stream");
  CHECK(download->get_header_value("Content-Disposition") == "attachment; filename=\"record-" + id + ".payload\"");
  // Unsigned: no bundle to run, no job started for it.
  CHECK(c.get("/api/records/" + id + "/bundle")->status == 403);
  const auto metrics = c.get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("<") == std::string::npos);
  e2e::check_with_promtool(metrics->body);

  if (e2e::have_chromium()) {
    const auto dom = e2e::browse(c.serve->url() + "records/" + id);
    INFO(dom.describe());
    REQUIRE(dom.exit_code == 0);
    CHECK(dom.out.find("Record " + id) != std::string::npos);
    for (const char* injected : {"<img", "<svg", "<iframe", "<b>bold", "<hr>"}) {
      CHECK_MESSAGE(dom.out.find(injected) == std::string::npos, "the DOM has " << injected);
    }
    std::size_t scripts = 0;
    for (auto at = dom.out.find("<script"); at != std::string::npos; at = dom.out.find("<script", at + 1)) ++scripts;
    CHECK(scripts == 1);
  }
  CHECK(c.stop() == 0);
}

}  // namespace

TEST_CASE("serve --amqp: the console over RabbitMQ's quarantine; its password shown nowhere") {
  e2e::RabbitServer server;
  REQUIRE_RABBITMQ(server);
  e2e::TempDir keys(0700);
  const std::string key = keys.write("fleet.key", std::string(64, 'k'));
  REQUIRE(::chmod(key.c_str(), 0600) == 0);
  // The console's own user, with a password unlike any other text here.
  const std::string secret = "Pa55-" + std::to_string(::getpid()) + "-q7Zx";
  for (const std::vector<std::string>& step :
       {std::vector<std::string>{"add_user", "console", secret},
        std::vector<std::string>{"set_permissions", "-p", "/", "console", ".*", ".*", ".*"}}) {
    const auto r = server.ctl(step);
    REQUIRE_MESSAGE(r.exit_code == 0, r.out << r.err);
  }
  Fleet f{server, key, secret};
  f.dead_letter("jobs", {{"segv-1", "S corrupt"}, {"abort", "A checksum"}, {"segv-2", "S again"}, {"fine", "fine"}});
  REQUIRE(f.cli("jobs", {"list"}).size() == 3);

  reads_as_the_cli(f);
  discard_needs_the_token(f);
  replay_job(f);
  broker_stopped_then_back(f);
  password_from_the_environment(f);
  hostile_dead_letter(f);

  // Nothing the consoles said or printed, and no job's command, holds the password.
  CHECK(f.seen.size() > 10000);
  CHECK(f.seen.find(secret) == std::string::npos);
}
