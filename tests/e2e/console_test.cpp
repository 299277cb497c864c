// pillbox serve (issue 16): the web console over a real store, on a free
// loopback port, over real HTTP. The API agrees with the CLI's --json; bad
// ids and filters are clear errors; an action without the access token is
// refused and leaves the store as it was, with it lands in the audit trail;
// a payload of markup and bytes that are not UTF-8 is shown escaped, never
// as markup, in the pages as headless Chromium renders them.
#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <httplib.h>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shared/base64.h"
#include "tests/e2e/background.h"
#include "tests/e2e/console_client.h"
#include "tests/e2e/console_serve.h"
#include "tests/e2e/live_run.h"
#include "tests/e2e/support.h"

using e2e::body_of;
using e2e::browse;
using e2e::chromium;
using e2e::have_chromium;
using e2e::run_pillbox;
using e2e::Serve;
using e2e::sql_int;
using e2e::sql_rows;
using e2e::task_line;
using nlohmann::json;
using namespace e2e::console;

namespace {

using e2e::Browser;


}  // namespace

TEST_CASE("serve: the API returns what the CLI's --json says, for records, one record, stats and tasks") {
  ConsoleStore s;
  Serve serve(s.store);
  REQUIRE_MESSAGE(serve.url().rfind("http://127.0.0.1:", 0) == 0, serve.err());
  httplib::Client http("127.0.0.1", serve.port());

  const json records = body_of(http.Get("/api/records"));
  CHECK(records["records"] == s.cli({"quarantine", "list"}));
  CHECK(records["total"] == 4);
  CHECK(body_of(http.Get("/api/records?kind=crash&status=quarantined"))["records"] ==
        s.cli({"quarantine", "list", "--kind", "crash", "--status", "quarantined"}));
  CHECK(body_of(http.Get("/api/records?limit=1&offset=1"))["records"] ==
        s.cli({"quarantine", "list", "--limit", "1", "--offset", "1"}));
  const std::string hostile = s.id_of(kHostileKey);
  const json shown = body_of(http.Get("/api/records/" + hostile));
  CHECK(json::array({shown}) == s.cli({"quarantine", "show", hostile}));
  CHECK(shown["key"] == kHostileKey);
  CHECK(body_of(http.Get("/api/stats"))["groups"] == s.cli({"quarantine", "stats"}));
  CHECK(body_of(http.Get("/api/tasks"))["tasks"] == s.cli({"tasks"}));
  CHECK(body_of(http.Get("/api/tasks?state=ok"))["tasks"].size() == 1);

  // The token: 64 hex digits, mode 0600.
  struct stat st {};
  REQUIRE(::stat((s.store + "/serve.token").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(read_token(s.store).size() == 64);
  CHECK(read_token(s.store).find_first_not_of("0123456789abcdef") == std::string::npos);

  CHECK(serve.stop(SIGTERM) == 0);
  CHECK(serve.err().find("stopped (SIGTERM)") != std::string::npos);

  // A new start, a new token: the old one is refused.
  const std::string old_token = read_token(s.store);
  Serve again(s.store);
  REQUIRE(!again.url().empty());
  CHECK(read_token(s.store) != old_token);
  httplib::Client http2("127.0.0.1", again.port());
  auto stale = http2.Post("/api/records/" + hostile + "/discard", {{"Authorization", "Bearer " + old_token}},
                          R"({"reason": "stale token"})", "application/json");
  REQUIRE(stale);
  CHECK(stale->status == 403);
  CHECK(again.stop(SIGINT) == 0);
}

TEST_CASE("serve: /metrics has the store's records and tasks, as the store counts them; promtool accepts it") {
  ConsoleStore s;
  Serve serve(s.store);
  REQUIRE_MESSAGE(!serve.url().empty(), serve.err());
  httplib::Client http("127.0.0.1", serve.port());
  const auto got = http.Get("/metrics");
  REQUIRE(got);
  CHECK(got->status == 200);
  CHECK(got->get_header_value("Content-Type").find("version=0.0.4") != std::string::npos);
  const std::string& text = got->body;
  INFO(text);
  CHECK(text.find("pillbox_store_up 1\n") != std::string::npos);
  const std::string db = s.store + "/pillbox.db";
  const long long crashes = sql_int(db, "SELECT count(*) FROM quarantine WHERE status = 'quarantined' AND kind = 'crash'");
  CHECK(crashes > 0);
  CHECK(text.find("pillbox_quarantine_records{status=\"quarantined\",kind=\"crash\"} " + std::to_string(crashes) +
                  "\n") != std::string::npos);
  CHECK(text.find("pillbox_store_tasks{state=\"ok\"} " +
                  std::to_string(sql_int(db, "SELECT count(*) FROM tasks WHERE state = 'ok'")) + "\n") !=
        std::string::npos);
  e2e::check_with_promtool(text);
  CHECK(serve.stop(SIGTERM) == 0);
}

// Issue 25: serve's /metrics connection once dropped SQLite's locks on the
// store (a plain descriptor of pillbox.db closed in the same process); the
// CLI reader after it deleted the WAL, and serve's later writes went into
// the deleted file, seen by no other process until serve exited.
TEST_CASE("serve scraped on /metrics, then read by the CLI: an API discard is visible to the CLI at once") {
  ConsoleStore s;
  Serve serve(s.store);
  REQUIRE_MESSAGE(!serve.url().empty(), serve.err());
  httplib::Client http("127.0.0.1", serve.port());
  const auto scraped = http.Get("/metrics");
  REQUIRE(scraped);
  REQUIRE(scraped->status == 200);
  // Two readers: each opens, reads and closes its own connection.
  CHECK(s.cli({"quarantine", "list"}).size() == 4);
  CHECK(s.cli({"tasks"}).size() == 5);
  const httplib::Headers auth = {{"Authorization", "Bearer " + read_token(s.store)}};
  for (const std::string key : {"segv", "abort"}) {
    const std::string id = s.id_of(key);
    auto done = http.Post("/api/records/" + id + "/discard", auth, R"({"reason": "seen"})", "application/json");
    REQUIRE(done);
    CHECK(done->status == 200);
    CHECK(s.cli({"quarantine", "show", id})[0]["status"] == "discarded");
    CHECK(http.Get("/metrics"));  // and scraped again between the two
  }
  e2e::check_no_deleted_store_files(serve.pid());
  CHECK(serve.stop(SIGKILL) == 128 + SIGKILL);
  CHECK(sql_int(s.db, "SELECT count(*) FROM quarantine WHERE status = 'discarded'") == 2);
}

TEST_CASE("serve: unknown ids are 404 and bad filters 400, with JSON that says what is allowed; nothing changes") {
  ConsoleStore s;
  const std::string before = s.state();
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  for (const char* path : {"/api/records/999", "/api/records/0", "/api/records/abc", "/api/records/-1",
                           "/api/records/99999999999999999999", "/api/records/999/payload"}) {
    INFO(path);
    auto r = http.Get(path);
    REQUIRE(r);
    CHECK(r->status == 404);
    CHECK(body_of(r)["error"].get<std::string>().find("no quarantine record") != std::string::npos);
  }
  struct Bad {
    const char* path;
    const char* says;
  } bad[] = {
      {"/api/records?status=bogus", "quarantined, allowed, replaying, resolved, failed-again, discarded"},
      {"/api/records?kind=segfault", "crash"},
      {"/api/records?limit=-1", "whole number"},
      {"/api/records?limit=1000000", "0 to 1000"},
      {"/api/records?offset=x", "whole number"},
      {"/api/records?colour=red", "allowed: fingerprint, handler, key, kind, limit, offset, raise_site, source, status"},
      {"/api/records?raise_site=ValueError%20at%20f", "raise_site is a raise site's id"},
      {"/api/records?status=quarantined&status=resolved", "given twice"},
      {"/api/stats?limit=3", "allowed"},
      {"/api/tasks?state=sleeping", "pending, retrying, held, gave-up, ok, quarantined"},
  };
  for (const auto& b : bad) {
    INFO(b.path);
    auto r = http.Get(b.path);
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(body_of(r)["error"].get<std::string>().find(b.says) != std::string::npos);
  }
  auto unknown = http.Get("/api/nothing");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  CHECK(body_of(unknown).contains("error"));
  auto page = http.Get("/records/999");
  REQUIRE(page);
  CHECK(page->status == 404);
  CHECK(page->get_header_value("Content-Type").rfind("text/html", 0) == 0);
  // A value from the URL is escaped in the error page.
  auto hostile_filter = http.Get("/?kind=%3Cscript%3Ealert(3)%3C/script%3E");
  REQUIRE(hostile_filter);
  CHECK(hostile_filter->status == 400);
  CHECK(hostile_filter->body.find("<script>alert(3)") == std::string::npos);
  CHECK(hostile_filter->body.find("&lt;script&gt;alert(3)") != std::string::npos);
  // A page of another site rebound to 127.0.0.1 names its own host.
  auto rebound = http.Get("/api/records", {{"Host", "attacker.example:" + std::to_string(serve.port())}});
  REQUIRE(rebound);
  CHECK(rebound->status == 403);
  CHECK(serve.stop(SIGINT) == 0);
  CHECK(s.state() == before);
}

TEST_CASE("serve: discard without the token is 401, with a wrong one 403, store unchanged; with it, audited as web") {
  ConsoleStore s;
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  const std::string id = s.id_of("segv");
  const std::string path = "/api/records/" + id + "/discard";
  const std::string body = R"({"reason": "known bug, fixed upstream"})";
  const std::string before = s.state();

  auto none = http.Post(path, body, "application/json");
  REQUIRE(none);
  CHECK(none->status == 401);
  CHECK(none->get_header_value("WWW-Authenticate") == "Bearer");
  auto wrong = http.Post(path, {{"Authorization", "Bearer " + std::string(64, '0')}}, body, "application/json");
  REQUIRE(wrong);
  CHECK(wrong->status == 403);
  auto not_bearer = http.Post(path, {{"Authorization", "Basic " + read_token(s.store)}}, body, "application/json");
  REQUIRE(not_bearer);
  CHECK(not_bearer->status == 401);
  CHECK(s.state() == before);

  const httplib::Headers auth = {{"Authorization", "Bearer " + read_token(s.store)}};
  for (const std::string& bad : {std::string("not json"), std::string(R"({"reason": ""})"), std::string(R"({"why": "x"})"),
                                 std::string("{\"reason\": \"\xff\xfe\"}")}) {
    auto r = http.Post(path, auth, bad, "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
  }
  auto missing = http.Post("/api/records/999/discard", auth, body, "application/json");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  CHECK(s.state() == before);

  auto done = http.Post(path, auth, body, "application/json");
  REQUIRE(done);
  CHECK(done->status == 200);
  CHECK(body_of(done)["changed"] == 1);
  CHECK(body_of(done)["discarded"][0]["was"] == "quarantined");
  CHECK(sql_rows(s.db, "SELECT status FROM quarantine WHERE id = " + id)[0][0] == "discarded");
  const auto audit = sql_rows(s.db, "SELECT actor, action, detail FROM audit WHERE record_id = " + id +
                                        " ORDER BY id DESC LIMIT 1");
  REQUIRE(audit.size() == 1);
  CHECK(audit[0][0].rfind("web: 127.0.0.1", 0) == 0);
  CHECK(audit[0][1] == "discarded");
  CHECK(audit[0][2] == "known bug, fixed upstream (was quarantined)");
  // The CLI's show sees the same trail.
  const json shown = s.cli({"quarantine", "show", id})[0];
  CHECK(shown["status"] == "discarded");
  CHECK(shown["audit"].back()["actor"].get<std::string>().rfind("web: ", 0) == 0);
  // Again: already discarded, nothing more written.
  const std::string after = s.state();
  auto again = http.Post(path, auth, body, "application/json");
  REQUIRE(again);
  CHECK(body_of(again)["changed"] == 0);
  CHECK(s.state() == after);
}

TEST_CASE("serve: the payload downloads as its exact bytes; pages escape it and send the protective headers") {
  ConsoleStore s;
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  const std::string id = s.id_of(kHostileKey);
  auto payload = http.Get("/api/records/" + id + "/payload");
  REQUIRE(payload);
  CHECK(payload->status == 200);
  CHECK(payload->body == kHostilePayload);
  CHECK(payload->get_header_value("Content-Type") == "application/octet-stream");
  CHECK(payload->get_header_value("Content-Disposition") == "attachment; filename=\"record-" + id + ".payload\"");

  auto page = http.Get("/records/" + id);
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(page->get_header_value("Content-Security-Policy").find("default-src 'self'") != std::string::npos);
  CHECK(page->get_header_value("X-Content-Type-Options") == "nosniff");
  // Not UTF-8: a hex dump, whose ASCII column shows the markup escaped.
  CHECK(page->body.find("payload hex") != std::string::npos);
  CHECK(page->body.find("<script>alert") == std::string::npos);
  CHECK(page->body.find("<img src=x") == std::string::npos);
  CHECK(page->body.find("&lt;img src=x onerror=alert(2)&gt;") != std::string::npos);
  CHECK(count_of(page->body, "<script") == 1);  // /static/console.js only
  auto list = http.Get("/");
  REQUIRE(list);
  CHECK(list->body.find("&lt;img src=x onerror=alert(2)&gt;") != std::string::npos);
  CHECK(list->body.find("<img") == std::string::npos);
  auto js = http.Get("/static/console.js");
  REQUIRE(js);
  CHECK(js->get_header_value("Content-Type").rfind("text/javascript", 0) == 0);

  // A body past the limit is refused before any handler reads it.
  auto huge = http.Post("/api/records/" + id + "/discard", std::string(100 * 1024, 'x'), "application/json");
  REQUIRE(huge);
  CHECK(huge->status == 413);
  CHECK(body_of(huge).contains("error"));

  // A payload of 200 KB: the page previews its first 4 KiB and says so.
  const std::string big = "S" + std::string(200'000, 'x');
  const auto run = run_pillbox({"run", "--store", s.store, "--json", "-", "--", e2e::fixture("poison_corpus"),
                                s.work.path()},
                               task_line("big", big));
  REQUIRE_MESSAGE(run.exit_code == 1, run.describe());
  auto big_page = http.Get("/records/" + s.id_of("big"));
  REQUIRE(big_page);
  CHECK(big_page->status == 200);
  CHECK(big_page->body.find("first 4096 of 200001 bytes shown (text)") != std::string::npos);
  CHECK(big_page->body.size() < 16 * 1024);
  auto big_payload = http.Get("/api/records/" + s.id_of("big") + "/payload");
  REQUIRE(big_payload);
  CHECK(big_payload->body == big);
}

TEST_CASE("serve: a second serve on the same port fails clearly and leaves the first one's token; a missing store") {
  ConsoleStore s;
  Serve first(s.store);
  REQUIRE(!first.url().empty());
  const std::string token = read_token(s.store);
  const std::string before = s.state();
  Serve second(s.store, "127.0.0.1:" + std::to_string(first.port()));
  CHECK(second.url().empty());
  const int code = second.wait();
  CHECK(code == 3);
  CHECK(second.err().find("cannot listen on 127.0.0.1:" + std::to_string(first.port())) != std::string::npos);
  CHECK(read_token(s.store) == token);
  CHECK(s.state() == before);
  // The first still serves.
  httplib::Client http("127.0.0.1", first.port());
  auto r = http.Get("/api/stats");
  REQUIRE(r);
  CHECK(r->status == 200);

  e2e::TempDir empty;
  const std::string missing = empty.path() + "/no-store";
  const auto none = run_pillbox({"serve", "--store", missing, "--listen", "127.0.0.1:0"});
  CHECK((none.exit_code == 2 || none.exit_code == 3));
  CHECK(none.err.find("pillbox serve:") != std::string::npos);
  CHECK(none.out.empty());
  CHECK(::access(missing.c_str(), F_OK) != 0);  // not created

  const auto bad_listen = run_pillbox({"serve", "--store", s.store, "--listen", "localhost"});
  CHECK(bad_listen.exit_code == 2);
  CHECK(bad_listen.err.find("HOST:PORT") != std::string::npos);
}

TEST_CASE("serve: headless Chromium shows the records and the fingerprint, and the hostile payload only as text") {
  if (!have_chromium()) return;
  ConsoleStore s;
  Serve serve(s.store);
  const std::string fingerprint =
      sql_rows(s.db, "SELECT fingerprint FROM quarantine WHERE key = 'segv'")[0][0];
  const std::string id = s.id_of(kHostileKey);

  const auto list = browse(serve.url());
  INFO(list.describe());
  REQUIRE(list.exit_code == 0);
  CHECK(list.out.find(fingerprint) != std::string::npos);
  CHECK(list.out.find("&lt;img src=x onerror=alert(2)&gt;") != std::string::npos);
  CHECK(list.out.find("<img") == std::string::npos);

  const auto record = browse(serve.url() + "records/" + id);
  INFO(record.describe());
  REQUIRE(record.exit_code == 0);
  CHECK(record.out.find(fingerprint) != std::string::npos);
  CHECK(record.out.find("corrupt_record") != std::string::npos);  // a frame of the crash state
  // Not UTF-8: a hex dump whose ASCII column holds the markup as text.
  CHECK(record.out.find("payload hex") != std::string::npos);
  CHECK(record.out.find("S&lt;script&gt;alert(1") != std::string::npos);
  CHECK(count_of(record.out, "<script") == 1);  // console.js, no element from the payload
  CHECK(record.out.find("discard-form") != std::string::npos);

  const auto markup = browse(serve.url() + "records/" + s.id_of("markup"));
  INFO(markup.describe());
  REQUIRE(markup.exit_code == 0);
  CHECK(markup.out.find("payload text") != std::string::npos);
  CHECK(markup.out.find("S&lt;script&gt;alert(1)&lt;/script&gt; as text") != std::string::npos);
  CHECK(count_of(markup.out, "<script") == 1);

  // PILLBOX_CONSOLE_SCREENSHOTS=DIR: the pages of docs/console.md, taken here.
  if (const char* dir = std::getenv("PILLBOX_CONSOLE_SCREENSHOTS")) {
    const std::pair<std::string, std::string> pages[] = {
        {"quarantine.png", serve.url()}, {"fingerprints.png", serve.url() + "groups"},
        {"record.png", serve.url() + "records/" + id}, {"tasks.png", serve.url() + "tasks"}};
    for (const auto& [file, url] : pages) {
      const auto shot = browse(url, std::string(dir) + "/" + file);
      CHECK_MESSAGE(shot.exit_code == 0, shot.describe());
    }
  }
}

TEST_CASE("serve: in Chromium, the record page's discard is refused without the token and done with it, as web") {
  if (!have_chromium()) return;
  ConsoleStore s;
  Serve serve(s.store);
  const std::string id = s.id_of("abort");
  const std::string before = s.state();
  Browser browser;
  const std::string page = browser.open(serve.url() + "records/" + id);
  // Fills the form, clicks Discard, and returns what the form says once the
  // server has answered (the text after "discarding…").
  auto click = [&](const std::string& token) {
    return browser.evaluate(page, "(() => {"
                                  "  const result = document.getElementById('discard-result');"
                                  "  document.getElementById('token').value = " + json(token).dump() + ";"
                                  "  document.querySelector('#discard-form [name=reason]').value = 'clicked in a browser';"
                                  "  const answered = new Promise(done => new MutationObserver(() => {"
                                  "    if (result.textContent !== 'discarding…') done(result.textContent);"
                                  "  }).observe(result, {childList: true, characterData: true, subtree: true}));"
                                  "  document.querySelector('#discard-form button').click();"
                                  "  return answered;"
                                  "})()");
  };
  const json refused = click("");
  CHECK(refused.get<std::string>().rfind("401: ", 0) == 0);
  const json wrong = click(std::string(64, 'f'));
  CHECK(wrong.get<std::string>().rfind("403: ", 0) == 0);
  CHECK(s.state() == before);

  CHECK(click(read_token(s.store)) == "discarded");
  CHECK(sql_rows(s.db, "SELECT status FROM quarantine WHERE id = " + id)[0][0] == "discarded");
  const auto audit = sql_rows(s.db, "SELECT actor, detail FROM audit WHERE record_id = " + id + " ORDER BY id DESC LIMIT 1");
  REQUIRE(audit.size() == 1);
  CHECK(audit[0][0].rfind("web: 127.0.0.1", 0) == 0);
  CHECK(audit[0][1] == "clicked in a browser (was quarantined)");
  // The page reloads: it shows the new status and trail, and the tab kept the token.
  browser.wait_for("Page.loadEventFired", page);
  CHECK(browser.evaluate(page, "document.querySelector('h1 .status').textContent") == "discarded");
  CHECK(browser.evaluate(page, "document.querySelector('table.audit').innerText.includes('web: 127.0.0.1')") == true);
  CHECK(browser.evaluate(page, "sessionStorage.getItem('pillbox-token')") == read_token(s.store));
}

TEST_CASE("serve: in Chromium, the record page's Allow allows it, as web; the reloaded page offers Revoke") {
  if (!have_chromium()) return;
  ConsoleStore s;
  Serve serve(s.store);
  const std::string id = s.id_of("abort");
  Browser browser;
  const std::string page = browser.open(serve.url() + "records/" + id);
  // Fills the allow form, clicks its button, and returns what the form says
  // once the server has answered.
  auto click = [&](const std::string& working) {
    return browser.evaluate(page, "(() => {"
                                  "  const result = document.getElementById('allow-result');"
                                  "  document.getElementById('allow-token').value = " + json(read_token(s.store)).dump() + ";"
                                  "  document.querySelector('#allow-form [name=note]').value = 'read in a browser';"
                                  "  const answered = new Promise(done => new MutationObserver(() => {"
                                  "    if (result.textContent !== " + json(working).dump() + ") done(result.textContent);"
                                  "  }).observe(result, {childList: true, characterData: true, subtree: true}));"
                                  "  document.querySelector('#allow-form button').click();"
                                  "  return answered;"
                                  "})()");
  };
  CHECK(click("allowing…") == "allowed");
  CHECK(sql_rows(s.db, "SELECT status FROM quarantine WHERE id = " + id)[0][0] == "allowed");
  const auto audit = sql_rows(s.db, "SELECT actor, action, detail FROM audit WHERE record_id = " + id +
                                        " ORDER BY id DESC LIMIT 1");
  REQUIRE(audit.size() == 1);
  CHECK(audit[0][0].rfind("web: 127.0.0.1", 0) == 0);
  CHECK(audit[0][1] == "allowed");
  CHECK(audit[0][2] == "read in a browser (was quarantined)");
  browser.wait_for("Page.loadEventFired", page);
  CHECK(browser.evaluate(page, "document.querySelector('h1 .status').textContent") == "allowed");
  CHECK(browser.evaluate(page, "document.querySelector('#allow-form button').textContent") == "Revoke");
  CHECK(click("revoking…") == "revoked");
  CHECK(sql_rows(s.db, "SELECT status FROM quarantine WHERE id = " + id)[0][0] == "quarantined");
}

namespace {

// A patch's JSON body.
std::string patch_body(const std::string& note, const std::string& payload) {
  return json({{"note", note}, {"payload_b64", pillbox::base64_encode(payload)}}).dump();
}

// What a refused patch must not change: the records, the audit trail and the revisions.
std::string patch_state(const ConsoleStore& s) {
  return s.state() + "|" + std::to_string(sql_int(s.db, "SELECT count(*) FROM revisions"));
}

}  // namespace

TEST_CASE("serve: a patch needs the token, refuses bad bodies; with it, a revision, audited as web, that replay runs") {
  ConsoleStore s;
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  const std::string id = s.id_of("segv");
  const std::string path = "/api/records/" + id + "/patch";
  // Not 'S': poison_corpus takes it without crashing, so a replay of it resolves the record.
  const std::string fixed = "fixed: the header is whole again";
  const std::string body = patch_body("header repaired", fixed);
  const std::string before = patch_state(s);

  auto none = http.Post(path, body, "application/json");
  REQUIRE(none);
  CHECK(none->status == 401);
  CHECK(body_of(none).contains("error"));
  auto wrong = http.Post(path, {{"Authorization", "Bearer " + std::string(64, '0')}}, body, "application/json");
  REQUIRE(wrong);
  CHECK(wrong->status == 403);
  CHECK(patch_state(s) == before);

  const httplib::Headers auth = {{"Authorization", "Bearer " + read_token(s.store)}};
  const std::string b64 = pillbox::base64_encode(fixed);
  const std::pair<std::string, std::string> bad[] = {
      {"not JSON", "not json"},
      {"not base64", R"({"note": "n", "payload_b64": "***"})"},
      {"no note", json({{"payload_b64", b64}}).dump()},
      {"an empty note", json({{"note", " "}, {"payload_b64", b64}}).dump()},
      {"both", json({{"note", "n"}, {"payload_b64", b64}, {"set_args", {{"mode", "x"}}}}).dump()},
      {"neither", R"({"note": "n"})"},
      {"set_args on an exec record", json({{"note", "n"}, {"set_args", {{"mode", "lenient"}}}}).dump()},
      {"a set_args value not a string", json({{"note", "n"}, {"set_args", {{"mode", 3}}}}).dump()},
      {"an unknown field", json({{"note", "n"}, {"payload_b64", b64}, {"extra", 1}}).dump()},
  };
  for (const auto& item : bad) {
    const auto& what = item.first;  // clang 14 cannot capture a structured binding
    const auto& text = item.second;
    INFO(what);
    auto r = http.Post(path, auth, text, "application/json");
    REQUIRE(r);
    CHECK(r->status == 400);
    CHECK(body_of(r)["error"].is_string());
  }
  auto missing = http.Post("/api/records/999/patch", auth, body, "application/json");
  REQUIRE(missing);
  CHECK(missing->status == 404);
  auto not_an_id = http.Post("/api/records/x1/patch", auth, body, "application/json");
  REQUIRE(not_an_id);
  CHECK(not_an_id->status == 404);
  CHECK(patch_state(s) == before);

  auto done = http.Post(path, auth, body, "application/json");
  REQUIRE(done);
  REQUIRE_MESSAGE(done->status == 200, done->body);
  const json patched = body_of(done);
  CHECK(patched["record_id"] == std::stoll(id));
  CHECK(patched["n"] == 1);
  CHECK(patched["note"] == "header repaired");
  CHECK(patched["payload_size"] == fixed.size());
  CHECK(patched["actor"].get<std::string>().rfind("web: 127.0.0.1", 0) == 0);
  // The CLI's show lists it as the API answered it, and the API's show agrees.
  const json shown = s.cli({"quarantine", "show", id})[0];
  REQUIRE(shown["revisions"].size() == 1);
  json expected = patched;
  expected.erase("record_id");
  CHECK(shown["revisions"][0] == expected);
  CHECK(body_of(http.Get("/api/records/" + id))["revisions"] == shown["revisions"]);
  const auto audit = sql_rows(s.db, "SELECT actor, action FROM audit WHERE record_id = " + id +
                                        " ORDER BY id DESC LIMIT 1");
  REQUIRE(audit.size() == 1);
  CHECK(audit[0][0].rfind("web: 127.0.0.1", 0) == 0);
  CHECK(audit[0][1] == "patched");
  // The same patch again is identical to the newest revision: refused, 400.
  const std::string after = patch_state(s);
  auto again = http.Post(path, auth, body, "application/json");
  REQUIRE(again);
  CHECK(again->status == 400);
  CHECK(patch_state(s) == after);

  // The CLI's replay runs the revision, which no longer crashes.
  const auto replay = run_pillbox({"quarantine", "replay", id, "--store", s.store});
  INFO(replay.describe());
  CHECK(replay.exit_code == 0);
  CHECK(sql_rows(s.db, "SELECT status FROM quarantine WHERE id = " + id)[0][0] == "resolved");
  // Resolved: a patch now is refused (400) and changes nothing.
  const std::string resolved = patch_state(s);
  auto late = http.Post(path, auth, patch_body("too late", "other"), "application/json");
  REQUIRE(late);
  CHECK(late->status == 400);
  CHECK(patch_state(s) == resolved);
}

TEST_CASE("serve: a patch body over the console's limit is 413 and names the CLI; other routes keep 64 KiB") {
  ConsoleStore s;
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  const httplib::Headers auth = {{"Authorization", "Bearer " + read_token(s.store)}};
  const std::string id = s.id_of("segv");
  const std::string before = patch_state(s);
  // 8 MiB and one byte: under the body limit as base64, over the payload limit.
  auto over = http.Post("/api/records/" + id + "/patch", auth, patch_body("big", std::string((8u << 20) + 1, 'x')),
                        "application/json");
  REQUIRE(over);
  CHECK(over->status == 413);
  CHECK(body_of(over)["error"].get<std::string>().find("--payload-file") != std::string::npos);
  // A body far over it: refused by its Content-Length, before it is read
  // (only the headers are sent here, and the answer comes).
  const std::string answer =
      raw_exchange(serve.port(), "POST /api/records/" + id + "/patch HTTP/1.1\r\nHost: 127.0.0.1:" +
                                     std::to_string(serve.port()) +
                                     "\r\nContent-Type: application/json\r\nContent-Length: " +
                                     std::to_string(13u << 20) + "\r\n\r\n");
  CHECK(answer.rfind("HTTP/1.1 413", 0) == 0);
  CHECK(answer.find("--payload-file") != std::string::npos);
  auto discard = http.Post("/api/records/" + id + "/discard", auth, std::string(65 * 1024, ' '), "application/json");
  REQUIRE(discard);
  CHECK(discard->status == 413);
  CHECK(patch_state(s) == before);
  // 8 MiB exactly is taken.
  auto most = http.Post("/api/records/" + id + "/patch", auth, patch_body("big", std::string(8u << 20, 'x')),
                        "application/json");
  REQUIRE(most);
  CHECK(most->status == 200);
  CHECK(body_of(most)["payload_size"] == (8u << 20));
}

TEST_CASE("serve: a refused request's body is never read as more requests; another Host is refused on any address") {
  ConsoleStore s;
  Serve serve(s.store);
  const std::string port = std::to_string(serve.port());
  // A discard whose body (over the 64 KiB a discard may send) is a run of
  // GET requests, as a page of another site would smuggle them: one answer.
  std::string smuggled;
  while (smuggled.size() < 70'000) smuggled += "GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1:" + port + "\r\n\r\n";
  const std::string answer =
      raw_exchange(serve.port(), "POST /api/records/1/discard HTTP/1.1\r\nHost: evil.example:" + port +
                                     "\r\nContent-Type: application/json\r\nContent-Length: " +
                                     std::to_string(smuggled.size()) + "\r\n\r\n" + smuggled);
  INFO(answer.substr(0, 600));
  CHECK(count_of(answer, "HTTP/1.1 ") == 1);
  CHECK(answer.find("\"groups\"") == std::string::npos);
  CHECK(serve.stop(SIGTERM) == 0);

  // Listening on every address: a name other than this host's is refused
  // (a DNS name rebound to it), an IP address is answered.
  Serve wide(s.store, "0.0.0.0:0");
  REQUIRE_MESSAGE(!wide.url().empty(), wide.err());
  const std::string wide_port = std::to_string(wide.port());
  const std::string refused = raw_exchange(
      wide.port(), "GET /api/stats HTTP/1.1\r\nHost: evil.example:" + wide_port + "\r\nConnection: close\r\n\r\n");
  CHECK(refused.rfind("HTTP/1.1 403", 0) == 0);
  CHECK(refused.find("\"groups\"") == std::string::npos);
  const std::string answered = raw_exchange(
      wide.port(), "GET /api/stats HTTP/1.1\r\nHost: 127.0.0.1:" + wide_port + "\r\nConnection: close\r\n\r\n");
  CHECK(answered.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(wide.stop(SIGTERM) == 0);
}

TEST_CASE("serve: in Chromium, the record page lists revisions with the note as text and patches from a file") {
  if (!have_chromium()) return;
  ConsoleStore s;
  Serve serve(s.store);
  httplib::Client http("127.0.0.1", serve.port());
  const httplib::Headers auth = {{"Authorization", "Bearer " + read_token(s.store)}};
  const std::string id = s.id_of("segv");
  const std::string note = "<script>alert(3)</script> & <img src=x onerror=alert(4)>";
  auto patched = http.Post("/api/records/" + id + "/patch", auth, patch_body(note, "first fix"), "application/json");
  REQUIRE(patched);
  REQUIRE(patched->status == 200);

  const auto page = browse(serve.url() + "records/" + id);
  INFO(page.describe());
  REQUIRE(page.exit_code == 0);
  CHECK(page.out.find("class=\"revisions\"") != std::string::npos);
  CHECK(page.out.find("&lt;script&gt;alert(3)&lt;/script&gt; &amp; &lt;img src=x onerror=alert(4)&gt;") !=
        std::string::npos);
  CHECK(count_of(page.out, "<script") == 1);  // console.js only
  CHECK(count_of(page.out, "<img") == 0);
  CHECK(page.out.find("patch-form") != std::string::npos);

  // The form: a file chosen as an operator would, sent with the token.
  e2e::TempDir files;
  const std::string file = files.file("fixed.bin");
  const std::string bytes = std::string("fixed\0\xff bytes", 13);
  {
    FILE* f = std::fopen(file.c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size());
    std::fclose(f);
  }
  Browser browser;
  const std::string tab = browser.open(serve.url() + "records/" + id);
  CHECK(browser.evaluate(tab, "document.querySelector('table.revisions td.note-text').textContent") == note);
  const json root = browser.call("DOM.getDocument", json::object(), tab);
  const json input = browser.call("DOM.querySelector",
                                  {{"nodeId", root["root"]["nodeId"]}, {"selector", "#patch-form [name=payload]"}}, tab);
  browser.call("DOM.setFileInputFiles", {{"files", {file}}, {"nodeId", input["nodeId"]}}, tab);
  const json answer = browser.evaluate(
      tab, "(() => {"
           "  const result = document.getElementById('patch-result');"
           "  document.getElementById('patch-token').value = " + json(read_token(s.store)).dump() + ";"
           "  document.querySelector('#patch-form [name=note]').value = 'from the browser';"
           "  const answered = new Promise(done => new MutationObserver(() => {"
           "    if (result.textContent !== 'patching…') done(result.textContent);"
           "  }).observe(result, {childList: true, characterData: true, subtree: true}));"
           "  document.querySelector('#patch-form button').click();"
           "  return answered;"
           "})()");
  CHECK(answer.get<std::string>().rfind("revision 2 stored: ", 0) == 0);
  const json shown = s.cli({"quarantine", "show", id})[0];
  REQUIRE(shown["revisions"].size() == 2);
  CHECK(shown["revisions"][1]["note"] == "from the browser");
  browser.evaluate(tab, "location.reload(); true");
  browser.wait_for("Page.loadEventFired", tab);
  browser.screenshot_for_docs(tab, "record-whole.png");
  CHECK(shown["revisions"][1]["payload_size"] == bytes.size());
  CHECK(shown["revisions"][1]["actor"].get<std::string>().rfind("web: 127.0.0.1", 0) == 0);
  // The exact bytes: exported from revision 2 by the CLI.
  const std::string out = files.file("out.bin");
  const auto exported = run_pillbox({"quarantine", "export", id, "--revision", "2", "-o", out, "--store", s.store});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);
  CHECK(e2e::read_file(out) == bytes);
}

// A run with a store is on /api/runs and /runs while it runs (issue 16, the
// live view), with the counts it printed; it is gone when it ends; a run
// killed with SIGKILL leaves its file, which serve ignores and deletes.
TEST_CASE("serve: /api/runs and /runs show a live run's counts; it goes when the run ends; a SIGKILLed run's is ignored") {
  e2e::TempDir dir;
  e2e::TempDir work(01777);  // poison_corpus's marker directory
  const std::string store = dir.path() + "/store";
  {
    const auto first = run_pillbox({"run", "--store", store, "--json", "--handler", "echo", "-"}, task_line("a", "a"));
    INFO(first.describe());
    REQUIRE(first.exit_code == 0);
  }
  Serve serve(store);
  REQUIRE(!serve.url().empty());
  httplib::Client http("127.0.0.1", serve.port());
  CHECK(body_of(http.Get("/api/runs")) == json::parse(R"({"runs": []})"));
  {
    auto page = http.Get("/runs");
    REQUIRE(page);
    CHECK(page->status == 200);
    CHECK(page->body.find("<p class=\"paging\" id=\"live-runs-empty\">no run is attached to this store</p>") !=
          std::string::npos);
    CHECK(page->body.find("<a href=\"/runs\" class=\"active\">Runs</a>") != std::string::npos);
  }
  // In Chromium, the page is opened before the run starts: what it shows of
  // the run comes from console.js's refreshes.
  const char* kEmptyShown = "document.getElementById('live-runs-empty').hidden === false";
  std::optional<Browser> browser;
  std::string tab;
  if (chromium().empty()) {
    MESSAGE("skipped: the /runs page in Chromium (chromium is not installed, apt package chromium)");
  } else {
    browser.emplace();
    tab = browser->open(serve.url() + "runs");
    CHECK(browser->evaluate(tab, kEmptyShown) == true);
  }

  e2e::LiveRun run({"run", "--json", "--store", store, "--jobs", "2", "--no-breaker", "--backoff-base", "20ms", "-",
                    "--writable", work.path(), "--", e2e::fixture("poison_corpus"), work.path()});
  std::string input;
  for (int i = 1; i <= 3; ++i) input += task_line("good-" + std::to_string(i), "good payload " + std::to_string(i));
  for (int i = 1; i <= 2; ++i) input += task_line("segv-" + std::to_string(i), "S crasher " + std::to_string(i));
  run.write(input);
  for (int seen = 0; seen < 5; ++seen) REQUIRE_MESSAGE(run.out_line().has_value(), run.err_seen());
  // The file is rewritten once a second: polled until it has all five.
  json runs;
  REQUIRE(e2e::eventually([&] {
    runs = body_of(http.Get("/api/runs"))["runs"];
    return runs.size() == 1 && runs[0]["tasks_total"] == 5;
  }));
  INFO(runs.dump());
  const json& r = runs[0];
  CHECK(r["pid"] == run.pid());
  CHECK(r["claim"].get<std::string>().find(":" + std::to_string(run.pid()) + ":") != std::string::npos);
  CHECK(r["holder"] == "live");
  CHECK(r["tasks"] == json::parse(R"([{"kind":"ok","verdict":"ok","count":3},
                                       {"kind":"crash","verdict":"quarantined","count":2}])"));
  CHECK(r["attempts"] == json::parse(R"({"ok":3,"crash":4})"));  // a crasher twice: the same failure again
  CHECK(r["slots"] == json::parse(R"({"busy":0,"total":2})"));
  CHECK(r["breaker"] == "closed");
  const std::string file = store + "/live/" + r["run_id"].dump() + ".json";
  struct stat st{};
  REQUIRE(::stat(file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  {
    auto page = http.Get("/runs");
    REQUIRE(page);
    CHECK(page->body.find("ok ok: 3, crash quarantined: 2") != std::string::npos);
    CHECK(page->body.find("id=\"live-runs-empty\" hidden") != std::string::npos);
  }
  if (browser) {
    REQUIRE(e2e::eventually([&] {
      return browser->evaluate(tab, "document.getElementById('live-runs').tBodies[0].innerText"
                                    ".includes('ok ok: 3, crash quarantined: 2')") == true;
    }));
    CHECK(browser->evaluate(tab, "document.getElementById('live-runs').tBodies[0].innerText"
                                 ".includes('crash: 4, ok: 3')") == true);
    CHECK(browser->evaluate(tab, kEmptyShown) == false);
    browser->screenshot_for_docs(tab, "runs.png");
  }

  // Its input ends, the run ends, and its file goes with it.
  run.close_stdin();
  CHECK(run.wait() == 1);  // some tasks failed
  CHECK(::access(file.c_str(), F_OK) != 0);
  CHECK(body_of(http.Get("/api/runs"))["runs"].empty());
  if (browser) {
    REQUIRE(e2e::eventually([&] {
      return browser->evaluate(tab, std::string(kEmptyShown) +
                                        " && document.getElementById('live-runs').tBodies[0].rows.length === 0") == true;
    }));
  }

  // Killed with SIGKILL, a run cannot remove its file: serve ignores it (its
  // claim names a gone process) and deletes it.
  e2e::LiveRun killed({"run", "--json", "--store", store, "--handler", "echo", "-"});
  killed.write(task_line("k", "k"));
  REQUIRE_MESSAGE(killed.out_line().has_value(), killed.err_seen());
  std::string killed_file;
  REQUIRE(e2e::eventually([&] {
    runs = body_of(http.Get("/api/runs"))["runs"];
    if (runs.size() != 1 || runs[0]["tasks_total"] != 1) return false;
    killed_file = store + "/live/" + runs[0]["run_id"].dump() + ".json";
    return true;
  }));
  killed.signal(SIGKILL);
  CHECK(killed.wait() == 128 + SIGKILL);
  CHECK(::access(killed_file.c_str(), F_OK) == 0);
  CHECK(body_of(http.Get("/api/runs"))["runs"].empty());
  CHECK(::access(killed_file.c_str(), F_OK) != 0);
}

