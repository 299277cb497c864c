// Reproducers from the security review of issue 25 (store locks, records as
// claims, signed dead letters). Each TEST_CASE fails on the commit reviewed
// and says what it shows. Fixture: tests/fixtures/forge_module_report.c.
#include <doctest/doctest.h>
#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/e2e/console_client.h"
#include "tests/e2e/live_run.h"
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

void cli_readers_come_and_go(const std::string& store) {
  for (const std::vector<std::string>& verb : {std::vector<std::string>{"tasks"}, {"quarantine", "list"}}) {
    std::vector<std::string> args = verb;
    args.insert(args.end(), {"--store", store});
    const auto r = run_pillbox(args);
    INFO(r.describe());
    CHECK(r.exit_code == 0);
  }
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += s + " ";
  return out;
}

}  // namespace

// Item 1. The symbolizer (supervisor/classify/symbolizer.cpp, ElfFile::open)
// opens every module path a task's crash report names, in the supervisor,
// and closes it again. A task names the store's pillbox.db: run drops its
// POSIX locks, the next CLI reader deletes the live WAL.
TEST_CASE("a task whose crash report names the store's database as its module does not make run drop its locks") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  e2e::LiveRun run({"run", "--json", "--store", store, "--jobs", "1", "--max-attempts", "1", "--no-breaker", "-", "--",
                    e2e::fixture("forge_module_report")});
  run.write(e2e::task_line("before", "ok"));
  REQUIRE_MESSAGE(run.out_line().has_value(), run.err_seen());
  cli_readers_come_and_go(store);
  CHECK_MESSAGE(e2e::deleted_store_files(run.pid()).empty(), "control: readers alone");
  // The hostile task: all it knows is where the store is (the default,
  // ~/.local/state/pillbox/pillbox.db, is a good guess).
  run.write(e2e::task_line("liar", db));
  const auto liar = run.out_line();
  REQUIRE_MESSAGE(liar.has_value(), run.err_seen());
  CHECK(json::parse(*liar)["kind"] == "crash");
  cli_readers_come_and_go(store);
  const auto deleted = e2e::deleted_store_files(run.pid());
  CHECK_MESSAGE(deleted.empty(), "run holds deleted store files: " << joined(deleted));
  run.write(e2e::task_line("after", "ok"));
  REQUIRE_MESSAGE(run.out_line().has_value(), run.err_seen());
  run.close_stdin();
  CHECK(run.wait() == 1);
  CHECK(e2e::sql_int(db, "SELECT count(*) FROM tasks") == 3);
}

// Items 1 and 2. A record's policy text is parsed with import_oci honoured
// (shared/policy_parser.cpp import_profile, base_dir ""): policy_for_record
// opens whatever file the record names. serve builds a bundle's reproduce.sh
// in its own process (console_download.cpp -> record_bundle.cpp), so the
// (unauthenticated) bundle GET of such a record closes a descriptor of
// pillbox.db in serve. The reproduce.sh also tells the client about the file
// ("malformed JSON at byte 16: a NUL byte").
TEST_CASE("serve: the bundle of a record whose policy text has import_oci = the store's database keeps serve's locks") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  const auto made = run_pillbox({"run", "--store", store, "--json", "--max-attempts", "1", "-", "--",
                                 e2e::fixture("forge_module_report")},
                                e2e::task_line("crash", "/nonexistent/module"));
  REQUIRE(made.exit_code == 1);
  const std::string policy =
      e2e::shipped_policy_with("exec", "default = trap\n", "default = trap\nimport_oci = " + db + "\n");
  e2e::sql_write(db, "UPDATE quarantine SET policy = '" + policy + "'");
  e2e::Serve serve(store);
  REQUIRE_MESSAGE(!serve.url().empty(), serve.err());
  httplib::Client http("127.0.0.1", serve.port());
  REQUIRE(http.Get("/api/records"));
  cli_readers_come_and_go(store);
  CHECK_MESSAGE(e2e::deleted_store_files(serve.pid()).empty(), "control: readers alone");
  const auto bundle = http.Get("/api/records/1/bundle");
  REQUIRE(bundle);
  CHECK(bundle->status == 200);
  cli_readers_come_and_go(store);
  const auto deleted = e2e::deleted_store_files(serve.pid());
  CHECK_MESSAGE(deleted.empty(), "serve holds deleted store files: " << joined(deleted));
  serve.stop(SIGKILL);
}

// Item 2. "A record never takes confinement away": yet the record's
// writable paths are taken as they are. A forged dead letter, reproduced
// with --trust-unsigned ("runs it anyway, under this machine's policy for
// it"), writes the host's file system: here a 01777 directory (as root: the
// pool uid may write only such places; without root the task is the
// operator's uid and `writable = /home/USER` writes ~/.bashrc).
TEST_CASE("a forged dead letter's writable path is not how a task gets to write the host's file system") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  e2e::TempDir markers(01777, e2e::host_dir_tasks_see());
  const std::string marker = markers.file("written-by-a-forged-record");
  e2e::add_entries(server, "jobs", {{"c", "/nonexistent/module"}});
  const auto worker = run_pillbox({"worker", "--redis", server.url(), "--stream", "jobs", "--backoff-base", "10ms",
                                   "--exit-when-idle", "500ms", "--quiet", "--", e2e::fixture("forge_module_report")});
  REQUIRE(worker.exit_code == 0);
  const auto letters = e2e::stream_entries(server, "jobs:dlq");
  REQUIRE(!letters.empty());
  json record = json::parse(letters.back().fields.at("record"));
  record["policy"] = e2e::shipped_policy_with("exec", "tmp = 64M\n", "tmp = 64M\nwritable = " + markers.path() + "\n");
  record["exec_argv"] = json::array({"/bin/sh", "-c", "echo escaped > " + marker + "; kill -SEGV $$"});
  record["key"] = "forged";
  auto redis = e2e::connect(server);
  const std::string body = record.dump();
  auto id = redis.command({"XADD", "jobs:dlq", "*", "key", "forged", "payload", "/nonexistent/module", "kind", "crash", "fingerprint",
                           letters.back().fields.at("fingerprint"), "record", body});
  REQUIRE(id.has_value());
  const std::string forged = pillbox::broker::reply_text(id->get());
  const auto r = run_pillbox(
      {"reproduce", forged, "--runs", "1", "--redis", server.url(), "--stream", "jobs", "--trust-unsigned"});
  INFO(r.describe());
  CHECK_FALSE(exists(marker));
}

// Item 2 (and --writable itself). A writable path under /tmp, /var/tmp or
// /dev/shm is opened as root following symlinks (sandbox/private_tmp.cpp,
// keep(path, true)), and nothing checks it first (host_view.cpp checks shared
// paths only). Any local user plants /tmp/NAME -> a directory behind a 0700
// parent; the task's uid then reads what it cannot reach on the host. The
// same path as --share is refused ("goes through a symlink").
TEST_CASE("a writable path that is a symlink in /tmp does not show tasks what their uid cannot reach") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: needs root (a vault only root may enter, and tasks as another uid)");
    return;
  }
  e2e::TempDir vault(0700, e2e::host_dir_tasks_see());  // root's, 0700
  const std::string inner = vault.path() + "/inner";
  REQUIRE(::mkdir(inner.c_str(), 0755) == 0);
  e2e::TempDir scratch;  // /tmp/...
  REQUIRE(::symlink(inner.c_str(), scratch.file("link").c_str()) == 0);
  {
    const std::string file = inner + "/secret.txt";
    FILE* f = std::fopen(file.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("only root reaches this\n", f);
    std::fclose(f);
    ::chmod(file.c_str(), 0644);
  }
  const std::string link = scratch.file("link");
  const auto shared = run_pillbox({"run", "--no-store", "--json", "--share", link, "-", "--", "/bin/sh", "-c",
                                   "cat " + link + "/secret.txt"},
                                  e2e::task_line("t", ""));
  CHECK(contains(shared.err, "goes through a symlink"));
  const auto writable = run_pillbox({"run", "--no-store", "--json", "--writable", link, "-", "--", "/bin/sh", "-c",
                                     "cat " + link + "/secret.txt"},
                                    e2e::task_line("t", ""));
  INFO(writable.describe());
  CHECK_FALSE(contains(writable.out, "only root reaches this"));
}
