// Records are claims, not instructions (issue 25, point 1). A dead letter is
// whatever anyone who can write to the fleet's Redis put there, a store's
// record may come from another version or another machine: none of them
// may make pillbox run a command under a weaker policy than this machine's
// own. The attack is the review's: an XADD to NAME:dlq whose record names its
// own command and a policy that switches everything off (allow_unsafe, user
// root, seccomp off, the host's file system, the network). reproduce,
// minimize, export --bundle (and its reproduce.sh), replay and the console
// must refuse it, say why, and run nothing: the command would write a marker.
// Workers sign their dead letters with the fleet key (PILLBOX_FLEET_KEY, set
// by RedisServer for the fleet tests); a worker's own record still runs.
#include <doctest/doctest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/console_client.h"
#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

namespace {

using e2e::run_pillbox;
using nlohmann::json;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// `text` with each `from` replaced by its `to`; fails the test when one is missing.
std::string edited(std::string text, const std::vector<std::pair<std::string, std::string>>& edits) {
  for (const auto& edit : edits) {
    const std::string& from = edit.first;  // clang 14 cannot capture a structured binding
    const std::string& to = edit.second;
    const auto at = text.find(from);
    REQUIRE_MESSAGE(at != std::string::npos, "'" << from << "' is not in the policy");
    text.replace(at, from.size(), to);
  }
  return text;
}

// The shipped exec policy with every layer of confinement switched off, as
// an attacker would write it; `pillbox policy check` accepts it (so what
// stops it below is the record rule, not a typo).
std::string unsafe_policy_text(const e2e::TempDir& dir) {
  const auto shown = run_pillbox({"policy", "show", "exec"});
  REQUIRE(shown.exit_code == 0);
  const std::string text = edited(shown.out, {{"name = exec\n", "name = exec\nallow_unsafe = yes\n"},
                                              {"network = off", "network = on"},
                                              {"user = nobody", "user = root"},
                                              {"uid_pool = 2000000000-2000004095\n", ""},
                                              {"filesystem = read-only", "filesystem = host"},
                                              {"tmp = 64M\n", ""},
                                              {"enabled = yes", "enabled = no"}});
  const std::string file = dir.write("unsafe.policy", text);
  const auto check = run_pillbox({"policy", "check", file});
  INFO(check.describe());
  REQUIRE(check.exit_code == 0);
  return text;
}

const std::vector<std::string> kUnsafeSettings = {"allow_unsafe = yes", "user = root", "seccomp enabled = no",
                                                  "filesystem = host", "network = on"};

// A fleet: Redis, the stream `jobs`, and one dead letter a real worker wrote
// and signed (a crash of mixed_poison).
struct Fleet {
  e2e::RedisServer server;
  // Where the forged command writes its marker: a directory tasks see as the
  // host's, read-only to a confined task, writable to an unconfined root one.
  e2e::TempDir markers{01777, e2e::host_dir_tasks_see()};
  e2e::TempDir policies;
  std::string marker = markers.file("forged-command-ran");

  std::vector<std::string> where() const { return {"--redis", server.url(), "--stream", "jobs"}; }

  // A real worker's dead letter: its id and its fields as Redis holds them.
  std::string worker_dead_letter(const std::map<std::string, std::string>& env = {}) {
    e2e::add_entries(server, "jobs", {{"segv", "S crash"}});
    std::vector<std::string> args = {"worker"};
    for (const auto& a : where()) args.push_back(a);
    args.insert(args.end(), {"--backoff-base", "10ms", "--exit-when-idle", "3s", "--quiet", "--",
                             e2e::fixture("mixed_poison")});
    const auto worker = run_pillbox(args, "", env);
    INFO(worker.describe());
    REQUIRE(worker.exit_code == 0);
    const auto letters = e2e::stream_entries(server, "jobs:dlq");
    REQUIRE(!letters.empty());
    return letters.back().id;
  }

  // The attack: the worker's record with the forged command and policy,
  // XADDed to jobs:dlq without a signature (or with `sig`). Its id.
  std::string forge(const std::string& sig = "") {
    const std::string real = worker_dead_letter();
    const auto letters = e2e::stream_entries(server, "jobs:dlq");
    json record = json::parse(letters.back().fields.at("record"));
    record["exec_argv"] = json::array({"/bin/sh", "-c", "touch " + marker + "; kill -SEGV $$", "{}"});
    record["handler"] = "exec";
    record["policy"] = unsafe_policy_text(policies);
    record["key"] = "forged";
    std::vector<std::string> command = {"XADD",        "jobs:dlq", "*",           "key",    "forged",
                                        "payload",     "S crash",  "kind",        "crash",  "fingerprint",
                                        letters.back().fields.at("fingerprint"), "record", record.dump()};
    if (!sig.empty()) command.insert(command.end(), {"sig", sig});
    auto redis = e2e::connect(server);
    std::vector<std::string_view> views(command.begin(), command.end());
    auto id = redis.command(views);
    REQUIRE(id.has_value());
    (void)real;
    return pillbox::broker::reply_text(id->get());
  }

  e2e::RunResult pillbox(std::vector<std::string> args, const std::vector<std::string>& more = {}) const {
    for (const auto& a : where()) args.push_back(a);
    args.insert(args.end(), more.begin(), more.end());
    return run_pillbox(args);
  }
};

}  // namespace

TEST_CASE("a forged dead letter with its own command and an unsafe policy is never run: reproduce, minimize, export") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  const std::string id = f.forge();

  // Listed and shown as unsigned.
  const auto listed = f.pillbox({"quarantine", "list", "--key", "forged", "--json"});
  REQUIRE(listed.records.size() == 1);
  CHECK(listed.records[0]["signature"] == "missing");
  const auto shown = f.pillbox({"quarantine", "show", id});
  CHECK_MESSAGE(contains(shown.out, "  signature    missing: unsigned, never run without --trust-unsigned"), shown.out);

  // Unsigned: refused before anything else is looked at.
  for (const std::vector<std::string>& verb :
       {std::vector<std::string>{"reproduce", id, "--runs", "1"}, {"minimize", id, "--max-runs", "5"},
        {"quarantine", "export", id, "--bundle", "-o", f.policies.file("bundle")}}) {
    CAPTURE(verb[0]);
    const auto r = f.pillbox(verb);
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    CHECK(contains(r.err, "record " + id + " is unsigned"));
    CHECK(contains(r.err, "--trust-unsigned"));
  }
  CHECK_FALSE(exists(f.policies.file("bundle")));

  // --trust-unsigned: the record's policy is still only a claim, refused
  // with every setting it asks for named.
  for (const std::vector<std::string>& verb :
       {std::vector<std::string>{"reproduce", id, "--runs", "1"}, {"minimize", id, "--max-runs", "5"}}) {
    CAPTURE(verb[0]);
    const auto r = f.pillbox(verb, {"--trust-unsigned"});
    INFO(r.describe());
    CHECK(r.exit_code == 2);
    for (const auto& setting : kUnsafeSettings) CHECK(contains(r.err, setting));
    CHECK(contains(r.err, "a record never takes confinement away"));
    CHECK(contains(r.err, "--policy"));
  }
  // The bundle is written (the operator asked), but its reproduce.sh names
  // no policy of the record's: it stops and says how to choose one.
  const std::string bundle = f.policies.file("trusted-bundle");
  const auto exported = f.pillbox({"quarantine", "export", id, "--bundle", "-o", bundle, "--trust-unsigned"});
  INFO(exported.describe());
  REQUIRE(exported.exit_code == 0);
  const auto script = e2e::run_command(bundle + "/reproduce.sh", {}, "", {{"PILLBOX", e2e::pillbox_binary()}});
  INFO(script.describe());
  CHECK(script.exit_code == 2);
  CHECK(contains(script.err, "reproduce.sh: the record's policy"));
  CHECK(contains(script.err, "allow_unsafe = yes"));
  CHECK(contains(script.err, "PILLBOX_POLICY="));
  CHECK_FALSE(exists(f.marker));

  // The operator's own choice runs the command in the box: confined, it
  // cannot write the host's file system.
  // (Whether it then crashes as recorded does not matter here: it ran once.)
  const auto chosen = f.pillbox({"reproduce", id, "--runs", "1", "--json", "--trust-unsigned", "--policy", "exec"});
  INFO(chosen.describe());
  CHECK((chosen.exit_code == 0 || chosen.exit_code == 1));
  REQUIRE(chosen.records.size() == 1);
  CHECK(chosen.records[0]["runs"] == 1);
  CHECK_FALSE(exists(f.marker));
}

TEST_CASE("a forged policy that only differs from a shipped one in its allow list is refused too; a raised limit needs its flag") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  const std::string real = f.worker_dead_letter();
  const auto letters = e2e::stream_entries(f.server, "jobs:dlq");
  const json record = json::parse(letters.back().fields.at("record"));
  const std::string text = record["policy"].get<std::string>();
  auto forge_with = [&](const std::string& policy) {
    json r = record;
    r["policy"] = policy;
    r["key"] = "forged";
    auto redis = e2e::connect(f.server);
    const std::string body = r.dump();
    auto id = redis.command({"XADD", "jobs:dlq", "*", "key", "forged", "payload", "S crash", "kind", "crash",
                             "fingerprint", letters.back().fields.at("fingerprint"), "record", body});
    REQUIRE(id.has_value());
    return pillbox::broker::reply_text(id->get());
  };
  // ptrace added to the allow list: another policy than exec.
  const std::string ptrace = forge_with(edited(text, {{"enabled = yes\n", "enabled = yes\nallow = ptrace\n"}}));
  const auto refused = f.pillbox({"reproduce", ptrace, "--runs", "1", "--trust-unsigned"});
  INFO(refused.describe());
  CHECK(refused.exit_code == 2);
  CHECK(contains(refused.err, "is none of this machine's shipped policies exec (exec@"));
  CHECK(contains(refused.err, "--policy NAME (shipped: exec, strict) or --policy FILE"));
  // A wall limit above the shipped one (what --timeout sets): the shipped
  // exec policy with it, once the operator says it again; a lower one as it is.
  const std::string slower = forge_with(edited(text, {{"wall = 30s", "wall = 45s"}}));
  const auto raised = f.pillbox({"reproduce", slower, "--runs", "1", "--trust-unsigned"});
  INFO(raised.describe());
  CHECK(raised.exit_code == 2);
  CHECK(contains(raised.err, "asks for wall = 45000ms, above the shipped 30000ms (--timeout 45000ms)"));
  const auto runs = f.pillbox({"reproduce", slower, "--runs", "1", "--json", "--trust-unsigned", "--timeout", "45s"});
  INFO(runs.describe());
  CHECK(runs.exit_code == 0);
  REQUIRE(runs.records.size() == 1);
  CHECK(runs.records[0]["verdict"] == "reliable");
  (void)real;
}

TEST_CASE("signatures: a worker's own dead letter is valid and reproduces; changed after, or signed with another key, it is bad") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  const std::string id = f.worker_dead_letter();
  const auto letters = e2e::stream_entries(f.server, "jobs:dlq");
  REQUIRE(letters.back().fields.count("sig") == 1);
  CHECK(letters.back().fields.at("sig").size() == 64);

  const auto listed = f.pillbox({"quarantine", "list", "--json"});
  REQUIRE(listed.records.size() == 1);
  CHECK(listed.records[0]["signature"] == "valid");
  const auto reproduced = f.pillbox({"reproduce", id, "--runs", "2", "--json"});
  INFO(reproduced.describe());
  CHECK(reproduced.exit_code == 0);
  REQUIRE(reproduced.records.size() == 1);
  CHECK(reproduced.records[0]["verdict"] == "reliable");

  // Its fields copied with the signature, one of them changed: bad.
  auto redis = e2e::connect(f.server);
  std::vector<std::string> copy = {"XADD", "jobs:dlq", "*"};
  for (const auto& [name, value] : letters.back().fields) {
    copy.push_back(name);
    copy.push_back(name == "payload" ? "S crash, changed" : value);
  }
  std::vector<std::string_view> views(copy.begin(), copy.end());
  auto changed = redis.command(views);
  REQUIRE(changed.has_value());
  const std::string changed_id = pillbox::broker::reply_text(changed->get());
  const auto bad = f.pillbox({"reproduce", changed_id, "--runs", "1"});
  INFO(bad.describe());
  CHECK(bad.exit_code == 2);
  CHECK(contains(bad.err, "record " + changed_id + "'s signature does not match the fleet key"));

  // Read with another key: every signature is bad; without one, unchecked.
  e2e::TempDir other(0700);
  const std::string other_key = other.write("other.key", std::string(64, 'f'));
  REQUIRE(::chmod(other_key.c_str(), 0600) == 0);
  const auto with_other = f.pillbox({"quarantine", "list", "--json", "--fleet-key", other_key});
  for (const auto& r : with_other.records) CHECK(r["signature"] == "bad");
  const auto without = e2e::run_pillbox({"quarantine", "list", "--json", "--redis", f.server.url(), "--stream", "jobs"},
                                        "", {{"PILLBOX_FLEET_KEY", ""}});
  for (const auto& r : without.records) CHECK(r["signature"] == "unchecked");
  const auto unchecked = e2e::run_pillbox({"reproduce", id, "--redis", f.server.url(), "--stream", "jobs"}, "",
                                          {{"PILLBOX_FLEET_KEY", ""}});
  CHECK(unchecked.exit_code == 2);
  CHECK(contains(unchecked.err, "signature was not checked: give the fleet's key (--fleet-key FILE"));

  // A worker refuses a key its tasks could read: one owned by the uid they
  // run as. Without root that is always so (they run as the worker's uid);
  // as root, a policy file of the operator's with user = root does it.
  {
    const std::string own_key = other.write("own.key", std::string(64, 'o'));
    REQUIRE(::chmod(own_key.c_str(), 0600) == 0);
    std::vector<std::string> args = {"worker", "--redis", f.server.url(), "--stream", "jobs", "--fleet-key", own_key,
                                     "--exit-when-idle", "100ms"};
    if (e2e::is_root()) {
      unsafe_policy_text(f.policies);
      args.insert(args.end(), {"--policy", f.policies.file("unsafe.policy")});
    }
    args.insert(args.end(), {"--", e2e::fixture("mixed_poison")});
    const auto worker = e2e::run_pillbox(args);
    INFO(worker.describe());
    CHECK(worker.exit_code == 2);
    CHECK(contains(worker.err, "the fleet key's file belongs to uid " + std::to_string(::geteuid()) +
                                   ", which this worker's tasks run as"));
  }

  // A key file others may read, or too short, is refused with what to do.
  REQUIRE(::chmod(other_key.c_str(), 0644) == 0);
  const auto readable = f.pillbox({"quarantine", "list", "--fleet-key", other_key});
  CHECK(readable.exit_code == 2);
  CHECK(contains(readable.err, "has mode 0644: others may read the secret; chmod 600"));
  const std::string short_key = other.write("short.key", "0123");
  REQUIRE(::chmod(short_key.c_str(), 0600) == 0);
  const auto too_short = f.pillbox({"quarantine", "list", "--fleet-key", short_key});
  CHECK(too_short.exit_code == 2);
  CHECK(contains(too_short.err, "holds 4 bytes; a key has at least 32 (make one with: (umask 077; openssl rand"));
}

TEST_CASE("a worker without a key says at start that its dead letters are unsigned; replay --redis skips unsigned ones") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  e2e::add_entries(f.server, "jobs", {{"segv", "S crash"}});
  const auto worker = e2e::run_pillbox({"worker", "--redis", f.server.url(), "--stream", "jobs", "--backoff-base",
                                        "10ms", "--exit-when-idle", "3s", "--quiet", "--", e2e::fixture("mixed_poison")},
                                       "", {{"PILLBOX_FLEET_KEY", ""}});
  INFO(worker.describe());
  REQUIRE(worker.exit_code == 0);
  CHECK(contains(worker.err, "pillbox worker: no --fleet-key (nor PILLBOX_FLEET_KEY): the dead letters of this worker "
                             "are unsigned"));
  const auto letters = e2e::stream_entries(f.server, "jobs:dlq");
  REQUIRE(letters.size() == 1);
  CHECK(letters[0].fields.count("sig") == 0);
  const std::string id = letters[0].id;
  const auto replay = f.pillbox({"quarantine", "replay", id, "--batch-timeout", "2s"});
  INFO(replay.describe());
  CHECK(contains(replay.err, "record " + id + " is unsigned"));
  CHECK(e2e::redis_integer(f.server, {"XLEN", "jobs"}) == 0);  // the worker's entry is gone; nothing redriven
}

TEST_CASE("console: the Reproduce job and the bundle of a forged dead letter are refused; nothing runs") {
  Fleet f;
  REQUIRE_REDIS(f.server);
  const std::string id = f.forge();
  e2e::TempDir home;
  for (const bool trusting : {false, true}) {
    CAPTURE(trusting);
    std::vector<std::string> args = {"--redis", f.server.url(), "--stream", "jobs", "--listen", "127.0.0.1:0",
                                     "--token-file", home.file(trusting ? "t2.token" : "t1.token")};
    if (trusting) args.push_back("--trust-unsigned");
    e2e::Serve serve(args);
    REQUIRE_MESSAGE(serve.url().rfind("http://127.0.0.1:", 0) == 0, serve.err());
    httplib::Client http("127.0.0.1", serve.port());
    std::string token = e2e::read_file(home.file(trusting ? "t2.token" : "t1.token"));
    while (!token.empty() && token.back() == '\n') token.pop_back();
    const httplib::Headers auth = {{"Authorization", "Bearer " + token}};

    const auto shown = http.Get("/api/records/" + id);
    REQUIRE(shown);
    CHECK(json::parse(shown->body)["signature"] == "missing");
    const auto bundle = http.Get("/api/records/" + id + "/bundle");
    REQUIRE(bundle);
    if (trusting) {
      CHECK(bundle->status == 200);  // its reproduce.sh refuses the policy (above)
    } else {
      CHECK(bundle->status == 403);
      CHECK(contains(bundle->body, "is unsigned"));
    }
    const auto started = http.Post("/api/records/" + id + "/reproduce", auth, R"({"runs": 1})", "application/json");
    REQUIRE(started);
    REQUIRE(started->status == 202);
    const std::string job = "/api/jobs/" + std::to_string(json::parse(started->body)["job"]["id"].get<std::int64_t>());
    json ended;
    REQUIRE(e2e::eventually([&] {
      ended = json::parse(http.Get(job)->body)["job"];
      return ended["state"] != "running";
    }));
    INFO(ended.dump());
    CHECK(ended["state"] == "failed");
    CHECK(ended["exit_code"] == 2);
    CHECK(contains(ended["stderr_tail"].get<std::string>(), trusting ? "a record never takes confinement away"
                                                                     : "is unsigned"));
    CHECK(serve.stop(SIGTERM) == 0);
  }
  CHECK_FALSE(exists(f.marker));
}

TEST_CASE("a store's record whose policy text asks for root is refused by reproduce; --policy FILE of the operator's runs it") {
  e2e::TempDir dir;
  e2e::TempDir markers(01777, e2e::host_dir_tasks_see());
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const auto run = run_pillbox({"run", "--store", store, "--json", "-", "--", e2e::fixture("mixed_poison")},
                               e2e::task_line("segv", "S crash"));
  REQUIRE(run.exit_code == 1);
  // As another version's store, an imported record, or an edit would say it.
  e2e::TempDir policies;
  const std::string unsafe = unsafe_policy_text(policies);
  const std::string marker = markers.file("forged-command-ran");
  const json argv = json::array({"/bin/sh", "-c", "touch " + marker + "; kill -SEGV $$", "{}"});
  std::string quoted_policy;
  for (char c : unsafe) quoted_policy += c == '\'' ? std::string("''") : std::string(1, c);
  e2e::sql_write(db, "UPDATE quarantine SET policy = '" + quoted_policy + "', exec_argv = '" + argv.dump() + "'");
  const auto refused = run_pillbox({"reproduce", "1", "--runs", "1", "--store", store});
  INFO(refused.describe());
  CHECK(refused.exit_code == 2);
  for (const auto& setting : kUnsafeSettings) CHECK(contains(refused.err, setting));
  CHECK_FALSE(exists(marker));
  const auto minimized = run_pillbox({"minimize", "1", "--max-runs", "5", "--store", store});
  CHECK(minimized.exit_code == 2);
  CHECK_FALSE(exists(marker));
  // The bundle's reproduce.sh stops too.
  const std::string bundle = dir.file("bundle");
  REQUIRE(run_pillbox({"quarantine", "export", "1", "--bundle", "-o", bundle, "--store", store}).exit_code == 0);
  const auto script = e2e::run_command(bundle + "/reproduce.sh", {}, "", {{"PILLBOX", e2e::pillbox_binary()}});
  CHECK(script.exit_code == 2);
  CHECK_FALSE(exists(marker));
  // The operator names the shipped exec policy: the command runs confined,
  // in its private /tmp, and the host's marker directory stays empty.
  const auto chosen = run_pillbox({"reproduce", "1", "--runs", "1", "--json", "--store", store, "--policy", "exec"});
  INFO(chosen.describe());
  CHECK((chosen.exit_code == 0 || chosen.exit_code == 1));
  REQUIRE(chosen.records.size() == 1);
  CHECK(chosen.records[0]["runs"] == 1);
  CHECK_FALSE(exists(marker));
  // (Control) The same policy from a file the operator names does run as
  // written: what stopped the record above was the rule, nothing else.
  const auto own = run_pillbox({"reproduce", "1", "--runs", "1", "--json", "--store", store, "--policy",
                                policies.file("unsafe.policy")});
  INFO(own.describe());
  REQUIRE(own.records.size() == 1);
  CHECK(exists(marker));
}
