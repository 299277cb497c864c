// The console's API called as a library, over a real store in a scratch
// directory: the objects are the CLI's (quarantine_record_json and
// friends), errors carry the HTTP status and say what is allowed, a discard
// changes the record and its trail only when it is allowed to, and the
// pages built on the API escape what the store holds.
#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/ops/store_quarantine_source.h"
#include "supervisor/serve/console_api.h"
#include "supervisor/serve/console_download.h"
#include "supervisor/serve/console_pages.h"
#include "supervisor/serve/store_console_source.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/quarantine_json.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/revision_store.h"
#include "supervisor/store/store.h"
#include "tests/unit/store_fixture.h"

using namespace pillbox;
using namespace pillbox::serve;
using nlohmann::json;

namespace {

struct Env : pillbox::test::StoreFixture {
  Env() : StoreFixture("console-api") {}

  ConsoleStore console() { return ConsoleStore{db(), *qs, store->dir()}; }

  // Quarantines `payload` under `key`; the record's id.
  std::int64_t add(const std::string& key, const std::string& payload, const std::string& fingerprint) {
    const std::int64_t now = store::now_ms();
    REQUIRE(ledger->begin().is_ok());
    store::QuarantineEntry e = entry(key, payload, fingerprint, now);
    e.crash_state = {"parse_<b>header</b>", "main"};
    auto r = qs->insert(e, payload, now, "test");
    REQUIRE_MESSAGE(r.has_value(), r.error());
    REQUIRE(ledger->commit().is_ok());
    return r->id;
  }
};

}  // namespace

TEST_CASE("console api: records are the CLI's objects; filters and paging; errors are 400 and 404") {
  Env env;
  const std::int64_t a = env.add("a", "payload a", "pb1-aaaa");
  const std::int64_t b = env.add("<b>key</b>", "payload \xff b", "pb1-bbbb");
  StoreSource console(env.console());

  const ApiReply all = console.list_records({});
  REQUIRE(all.status == 200);
  REQUIRE(all.body["records"].size() == 2);
  CHECK(all.body["total"] == 2);
  auto record_b = env.qs->get(b);
  REQUIRE((record_b.has_value() && record_b->has_value()));
  CHECK(all.body["records"][0] == json::parse(quarantine_record_json(**record_b, 0, false, env.store->dir())));

  const ApiReply page = console.list_records({{"limit", "1"}, {"offset", "1"}});
  REQUIRE(page.body["records"].size() == 1);
  CHECK(page.body["records"][0]["id"] == a);
  CHECK(page.body["total"] == 2);
  CHECK(console.list_records({{"fingerprint", "pb1-aaaa"}}).body["records"].size() == 1);
  CHECK(console.list_records({{"status", "nope"}}).status == 400);

  const ApiReply shown = console.show_record(std::to_string(b));
  REQUIRE(shown.status == 200);
  CHECK(shown.body["attempt_history"].size() == 1);
  CHECK(shown.body["audit"].is_array());
  CHECK(shown.body.contains("payload_head_b64"));
  CHECK(console.show_record("77").status == 404);
  CHECK(console.show_record("x").status == 404);

  const ApiReply stats = console.record_stats({});
  REQUIRE(stats.status == 200);
  CHECK(stats.body["groups"].size() == 2);
  CHECK(console.list_tasks({}).body["tasks"].size() == 2);

  PendingDownload pending = console.find_download(std::to_string(b), false);
  const DownloadReply payload = finish_download(pending);
  CHECK(payload.error.status == 200);
  CHECK(payload.bytes == "payload \xff b");
  CHECK(payload.file_name == "record-" + std::to_string(b) + ".payload");
}

TEST_CASE("console api: discard checks the body before the record, refuses a replaying record, audits the actor") {
  Env env;
  const std::int64_t id = env.add("k", "p", "pb1-cccc");
  StoreSource console(env.console());
  const std::string path_id = std::to_string(id);
  auto before = env.qs->audit_trail(id);
  REQUIRE(before.has_value());
  const std::size_t entries = before->size();
  CHECK(console.discard(path_id, "{}", "web: 127.0.0.1").status == 400);
  CHECK(console.discard(path_id, R"({"reason": 3})", "web: 127.0.0.1").status == 400);
  CHECK(console.discard(path_id, R"({"reason": ")" + std::string(5000, 'r') + "\"}", "web: x").status == 400);
  CHECK(console.discard("999", R"({"reason": "r"})", "web: 127.0.0.1").status == 404);
  REQUIRE(env.store->db().exec("UPDATE quarantine SET status = 'replaying' WHERE id = " + path_id).is_ok());
  CHECK(console.discard(path_id, R"({"reason": "r"})", "web: 127.0.0.1").status == 409);
  REQUIRE(env.store->db().exec("UPDATE quarantine SET status = 'quarantined' WHERE id = " + path_id).is_ok());
  CHECK(env.qs->get(id)->value().status == store::RecordStatus::kQuarantined);
  auto trail = env.qs->audit_trail(id);
  REQUIRE(trail.has_value());
  CHECK(trail->size() == entries);  // none of the refused ones added an entry

  const ApiReply done = console.discard(path_id, R"({"reason": "seen"})", "web: 127.0.0.1");
  REQUIRE(done.status == 200);
  CHECK(done.body["changed"] == 1);
  trail = env.qs->audit_trail(id);
  REQUIRE(trail.has_value());
  REQUIRE(trail->size() == entries + 1);
  CHECK(trail->back().actor == "web: 127.0.0.1");
  CHECK(trail->back().detail == "seen (was quarantined)");
  CHECK(console.discard(path_id, R"({"reason": "seen"})", "web: 127.0.0.1").body["changed"] == 0);
}

TEST_CASE("console api: allow answers allow --json's object; revoke; 400, 404 and 409 change nothing; the page's form") {
  Env env;
  const std::int64_t id = env.add("k", "p", "pb1-eeee");
  StoreSource console(env.console());
  const std::string path_id = std::to_string(id);
  const std::size_t entries = env.qs->audit_trail(id)->size();
  CHECK(console.allow(path_id, R"({"note": 3})", "web: x").status == 400);
  CHECK(console.allow(path_id, R"({"revoke": "yes"})", "web: x").status == 400);
  CHECK(console.allow(path_id, R"({"other": 1})", "web: x").status == 400);
  CHECK(console.allow(path_id, "[1]", "web: x").status == 400);
  CHECK(console.allow("999", "{}", "web: x").status == 404);
  REQUIRE(env.db().exec("UPDATE quarantine SET status = 'replaying' WHERE id = " + path_id).is_ok());
  CHECK(console.allow(path_id, "{}", "web: x").status == 409);
  REQUIRE(env.db().exec("UPDATE quarantine SET status = 'resolved' WHERE id = " + path_id).is_ok());
  const ApiReply resolved = console.allow(path_id, "{}", "web: x");
  CHECK(resolved.status == 400);
  CHECK(resolved.body["error"].get<std::string>().find("is resolved") != std::string::npos);
  REQUIRE(env.db().exec("UPDATE quarantine SET status = 'quarantined' WHERE id = " + path_id).is_ok());
  CHECK(env.qs->audit_trail(id)->size() == entries);
  // The page offers Allow to a record awaiting review.
  CHECK(record_page(console, path_id).html.find("id=\"allow-form\"") != std::string::npos);

  const ApiReply done = console.allow(path_id, R"({"note": "read it"})", "web: 127.0.0.1");
  REQUIRE(done.status == 200);
  CHECK(done.body == json({{"allowed", {{{"id", id}, {"was", "quarantined"}}}}, {"already_allowed", json::array()},
                           {"changed", 1}}));
  CHECK(env.qs->get(id)->value().status == store::RecordStatus::kAllowed);
  CHECK(env.qs->audit_trail(id)->back().actor == "web: 127.0.0.1");
  CHECK(env.qs->audit_trail(id)->back().detail == "read it (was quarantined)");
  CHECK(console.allow(path_id, "", "web: x").body["already_allowed"] == json::array({id}));
  // ... and Revoke to an allowed one.
  const std::string page = record_page(console, path_id).html;
  CHECK(page.find("Revoke the allowance") != std::string::npos);
  CHECK(page.find("data-revoke=\"true\"") != std::string::npos);
  const ApiReply revoked = console.allow(path_id, R"({"revoke": true})", "web: 127.0.0.1");
  REQUIRE(revoked.status == 200);
  CHECK(revoked.body["revoked"][0]["was"] == "allowed");
  CHECK(env.qs->get(id)->value().status == store::RecordStatus::kQuarantined);
}

TEST_CASE("console api: patch answers patch --json's object; 404, 409 and 400 change nothing; set_args on a handler") {
  Env env;
  const std::int64_t id = env.add("k", "p", "pb1-dddd");
  StoreSource console(env.console());
  const std::string path_id = std::to_string(id);
  auto revisions = [&] { return store::RevisionStore(env.db()).list(id).value().size(); };
  const std::string args = R"({"note": "deeper", "set_args": {"depth": "3"}})";
  CHECK(console.patch("999", args, "web: 127.0.0.1").status == 404);
  CHECK(console.patch("-1", args, "web: 127.0.0.1").status == 404);
  CHECK(console.patch(path_id, R"({"note": "n", "payload_b64": "%%"})", "web: x").status == 400);
  CHECK(console.patch(path_id, R"({"note": "n", "set_args": {}})", "web: x").status == 400);
  CHECK(console.patch(path_id, R"([1])", "web: x").status == 400);
  REQUIRE(env.db().exec("UPDATE quarantine SET status = 'replaying' WHERE id = " + path_id).is_ok());
  const ApiReply busy = console.patch(path_id, args, "web: 127.0.0.1");
  CHECK(busy.status == 409);
  CHECK(busy.body["error"].get<std::string>().find("being replayed") != std::string::npos);
  REQUIRE(env.db().exec("UPDATE quarantine SET status = 'quarantined' WHERE id = " + path_id).is_ok());
  CHECK(revisions() == 0);

  const ApiReply done = console.patch(path_id, args, "web: 127.0.0.1");
  REQUIRE_MESSAGE(done.status == 200, done.body.dump());
  auto stored = store::RevisionStore(env.db()).list(id);
  REQUIRE(stored.has_value());
  REQUIRE(stored->size() == 1);
  CHECK(done.body == patched_record_json(stored->front(), id));  // the CLI's object
  CHECK(done.body["handler_args"]["depth"] == "3");
  CHECK(done.body["actor"] == "web: 127.0.0.1");
}

TEST_CASE("console api: a patch body the patch refuses on its own is 400, whatever record it names") {
  Env env;
  const std::int64_t id = env.add("k", "p", "pb1-eeee");
  StoreSource console(env.console());
  const std::string path_id = std::to_string(id);
  const std::vector<std::string> bodies = {
      R"({"note": "n"})",                           // neither a payload nor arguments
      R"({"note": "  ", "set_args": {"a": "b"}})",  // a blank note
      json{{"note", std::string(4097, 'n')}, {"set_args", {{"a", "b"}}}}.dump(),
      json{{"note", "n"}, {"set_args", {{std::string(129, 'k'), "v"}}}}.dump()};
  for (const auto& body : bodies) {
    CAPTURE(body);
    CHECK(console.patch("999", body, "web: x").status == 400);
    REQUIRE(env.db().exec("UPDATE quarantine SET status = 'replaying' WHERE id = " + path_id).is_ok());
    CHECK(console.patch(path_id, body, "web: x").status == 400);
    REQUIRE(env.db().exec("UPDATE quarantine SET status = 'quarantined' WHERE id = " + path_id).is_ok());
  }
  CHECK(store::RevisionStore(env.db()).list(id).value().empty());
}

TEST_CASE("console api: a record a replay has claimed is held, whatever its status: patch and discard are 409") {
  Env env;
  const std::int64_t id = env.add("k", "p", "pb1-ffff");
  StoreSource console(env.console());
  const std::string path_id = std::to_string(id);
  REQUIRE(env.db().exec("UPDATE quarantine SET replay_claim = 'vm:1:1:x' WHERE id = " + path_id).is_ok());
  const ApiReply busy = console.patch(path_id, R"({"note": "n", "payload_b64": "T2s="})", "web: x");
  CHECK(busy.status == 409);
  CHECK(busy.body["error"].get<std::string>().find("being replayed") != std::string::npos);
  CHECK(console.discard(path_id, R"({"reason": "r"})", "web: x").status == 409);
  CHECK(store::RevisionStore(env.db()).list(id).value().empty());
  CHECK(env.qs->get(id)->value().status == store::RecordStatus::kQuarantined);
}

TEST_CASE("console api and cli: an id is digits only (no sign, whitespace or NUL names a record)") {
  for (const std::string& text : std::vector<std::string>{"\t1", "\n1", "\r1", "\v1", "\f1", " 1", "+1", "1 ", std::string("1\0junk", 6),
                                 std::string("1\0", 2), std::string("-1")}) {
    CAPTURE(text);
    CHECK_FALSE(record_id(text).has_value());
    CHECK_FALSE(parse_record_id(text).has_value());
  }
  CHECK(record_id("01").value() == 1);
  CHECK(parse_record_id("42").value() == 42);
}

TEST_CASE("console pages: store text is escaped everywhere; errors are pages with the status") {
  Env env;
  const std::int64_t id = env.add("<img src=x onerror=alert(1)>", "<script>alert(2)</script>", "pb1-\"><script>");
  StoreSource console(env.console());
  for (const Page& p : {list_page(console, {}), groups_page(console, {}), record_page(console, std::to_string(id)),
                        tasks_page(console, {})}) {
    CHECK(p.status == 200);
    CHECK(p.html.find("<img") == std::string::npos);
    CHECK(p.html.find("<script>") == std::string::npos);
    CHECK(p.html.find("<b>") == std::string::npos);
  }
  const Page record = record_page(console, std::to_string(id));
  CHECK(record.html.find("&lt;script&gt;alert(2)&lt;/script&gt;") != std::string::npos);
  CHECK(record.html.find("parse_&lt;b&gt;header&lt;/b&gt;") != std::string::npos);
  CHECK(record.html.find("href=\"/?fingerprint=pb1-%22%3E%3Cscript%3E\"") != std::string::npos);
  CHECK(record_page(console, "12345").status == 404);
  CHECK(list_page(console, {{"kind", "<i>"}}).status == 400);
  CHECK(list_page(console, {{"kind", "<i>"}}).html.find("&lt;i&gt;") != std::string::npos);
}
