// The store's directory and database: permissions, WAL, schema versions,
// two processes opening one store at once. Real files, real SQLite.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "supervisor/store/schema.h"
#include "supervisor/store/store.h"
#include "supervisor/store/store_dir.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox::store;

namespace {

unsigned mode_of(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// Sets an environment variable for one scope, restoring the old value.
struct EnvVar {
  std::string name;
  std::string old;
  bool had;
  EnvVar(const char* n, const char* value) : name(n), had(std::getenv(n) != nullptr) {
    if (had) old = std::getenv(n);
    if (value != nullptr) ::setenv(n, value, 1);
    else ::unsetenv(n);
  }
  ~EnvVar() {
    if (had) ::setenv(name.c_str(), old.c_str(), 1);
    else ::unsetenv(name.c_str());
  }
};

}  // namespace

TEST_CASE("store: the directory comes from --store, then PILLBOX_STORE, then XDG_STATE_HOME, then HOME") {
  EnvVar store("PILLBOX_STORE", "/from/env");
  EnvVar xdg("XDG_STATE_HOME", "/xdg/state");
  EnvVar home("HOME", "/home/op");
  CHECK(*resolve_store_dir("/from/flag") == "/from/flag");
  CHECK(*resolve_store_dir("") == "/from/env");
  ::unsetenv("PILLBOX_STORE");
  CHECK(*resolve_store_dir("") == "/xdg/state/pillbox");
  ::unsetenv("XDG_STATE_HOME");
  CHECK(*resolve_store_dir("") == "/home/op/.local/state/pillbox");
  ::unsetenv("HOME");
  CHECK(resolve_store_dir("").error() ==
        "no store directory: give --store DIR or set PILLBOX_STORE (HOME is not set either)");
}

TEST_CASE("store: a new directory is 0700; one that others can read, a symlink or a file is refused") {
  pillbox::test::ScratchDir s{"store-test"};
  const std::string dir = s.path + "/a/b/store";
  REQUIRE(prepare_store_dir(dir).is_ok());
  CHECK(mode_of(dir) == 0700);
  CHECK(prepare_store_dir(dir).is_ok());  // again: nothing to do

  const std::string open_dir = s.path + "/open";
  REQUIRE(::mkdir(open_dir.c_str(), 0755) == 0);
  ::chmod(open_dir.c_str(), 0755);
  CHECK(prepare_store_dir(open_dir).message() ==
        "store directory " + open_dir + " is readable or writable by others (mode 0755); it holds poison payloads: "
        "run chmod 700 " + open_dir);

  const std::string link = s.path + "/link";
  REQUIRE(::symlink(dir.c_str(), link.c_str()) == 0);
  CHECK(prepare_store_dir(link).message() ==
        "store directory " + link + " is a symbolic link; give the real path with --store");

  const std::string file = s.path + "/file";
  { std::FILE* f = std::fopen(file.c_str(), "w"); REQUIRE(f != nullptr); std::fclose(f); }
  CHECK(prepare_store_dir(file).message() == "store directory " + file + " exists and is not a directory");
}

TEST_CASE("store: the database is 0600, in WAL mode, at the current schema version") {
  pillbox::test::ScratchDir s{"store-test"};
  const std::string dir = s.path + "/store";
  {
    auto store = Store::open(dir);
    REQUIRE_MESSAGE(store.has_value(), store.error());
    CHECK(*store->db().query_text("PRAGMA journal_mode") == "wal");
    CHECK(*store->db().query_int("PRAGMA user_version") == schema_version());
    CHECK(*store->db().query_int("PRAGMA foreign_keys") == 1);
    CHECK(store->db().query_text("SELECT value FROM store_info WHERE key = 'created_by'")->starts_with("pillbox "));
    REQUIRE(store->db().exec("CREATE TABLE scratch (x INTEGER); INSERT INTO scratch VALUES (1);").is_ok());
    CHECK(mode_of(dir + "/pillbox.db") == 0600);
    CHECK(mode_of(dir + "/pillbox.db-wal") == 0600);
    CHECK(mode_of(dir + "/pillbox.db-shm") == 0600);
  }
  // Reopening keeps what was written and migrates nothing twice.
  auto again = Store::open(dir);
  REQUIRE_MESSAGE(again.has_value(), again.error());
  CHECK(*again->db().query_int("SELECT count(*) FROM scratch") == 1);
  CHECK(*again->db().query_int("SELECT count(*) FROM store_info WHERE key = 'created_at'") == 1);
  CHECK(*again->db().query_text("PRAGMA integrity_check") == "ok");
}

TEST_CASE("store: a store written by a newer pillbox is refused and left as it is") {
  pillbox::test::ScratchDir s{"store-test"};
  const std::string dir = s.path + "/store";
  {
    auto store = Store::open(dir);
    REQUIRE(store.has_value());
    REQUIRE(store->db().exec("PRAGMA user_version = " + std::to_string(schema_version() + 5)).is_ok());
  }
  auto newer = Store::open(dir);
  REQUIRE_FALSE(newer.has_value());
  CHECK(newer.error() == "store " + dir + "/pillbox.db has schema version " + std::to_string(schema_version() + 5) +
                             ", newer than this pillbox understands (" + std::to_string(schema_version()) +
                             "); use a newer pillbox, or another --store");
  auto db = Database::open(dir + "/pillbox.db");
  REQUIRE(db.has_value());
  CHECK(*db->query_int("PRAGMA user_version") == schema_version() + 5);
}

TEST_CASE("store: a version 3 store with records migrates to the current version, records intact") {
  pillbox::test::ScratchDir s{"store-test"};
  const std::string dir = s.path + "/store";
  std::filesystem::create_directory(dir);
  ::chmod(dir.c_str(), 0700);
  {
    auto db = Database::open(dir + "/pillbox.db");
    REQUIRE_MESSAGE(db.has_value(), db.error());
    REQUIRE(migrate(*db, 3).is_ok());
    const pillbox::Status filled = db->exec(
        "INSERT INTO runs VALUES (1, 0, 1, 'h', 'echo', 'p');"
        "INSERT INTO tasks VALUES (1, 'echo', 'k', 'ab', 1, 'quarantined', 1, 0);"
        "INSERT INTO payloads VALUES ('ab', 1, x'41', 0);"
        "INSERT INTO quarantine (id, task_id, key, source, handler, handler_identity, handler_args, exec_argv, "
        "policy_identity, policy, payload_sha256, payload_size, kind, fingerprint, crash_state, message, signal, "
        "syscall, exit_code, cpu_ms, wall_ms, max_rss_kb, status, created_at, updated_at) VALUES (1, 1, 'k', 'run', "
        "'echo', 'echo', '{}', '[]', 'p', '', 'ab', 1, 'crash', 'fp', '[]', 'm', 11, '', -1, 0, 0, 0, "
        "'quarantined', 0, 0);");
    REQUIRE_MESSAGE(filled.is_ok(), filled.message());
  }
  auto store = Store::open(dir);
  REQUIRE_MESSAGE(store.has_value(), store.error());
  CHECK(*store->db().query_int("PRAGMA user_version") == schema_version());
  CHECK(*store->db().query_text("SELECT key || ':' || source || ':' || origin || ':' || status FROM quarantine") ==
        "k:run::quarantined");
  // Records made before pillbox kept the working directory have none.
  CHECK(*store->db().query_text("SELECT '[' || working_dir || ']' FROM quarantine") == "[]");
}

TEST_CASE("store: a version 13 store (before 'allowed') migrates with every record, trail, revision and search kept") {
  pillbox::test::ScratchDir s{"store-test"};
  const std::string dir = s.path + "/store";
  std::filesystem::create_directory(dir);
  ::chmod(dir.c_str(), 0700);
  // What the tables hold, as one text, before and after.
  const std::string everything =
      "SELECT (SELECT group_concat(id || ':' || task_id || ':' || key || ':' || status || ':' || "
      "coalesce(replay_claim, '-') || ':' || coalesce(status_before_replay, '-') || ':' || "
      "coalesce(reproduce_outcome, '-') || ':' || coalesce(minimized_sha256, '-') || ':' || origin || ':' || "
      "working_dir || ':' || hex(stderr_tail) || ':' || repeats || ':' || updated_at, ' ') FROM "
      "(SELECT * FROM quarantine ORDER BY id)) || ' | ' || (SELECT group_concat(record_id || ':' || action, ' ') "
      "FROM (SELECT * FROM audit ORDER BY id)) || ' | ' || (SELECT group_concat(record_id || ':' || n, ' ') FROM "
      "revisions) || ' | ' || (SELECT group_concat(record_id || ':' || best_sha256, ' ') FROM minimize_state)";
  std::string before;
  {
    auto db = Database::open(dir + "/pillbox.db");
    REQUIRE_MESSAGE(db.has_value(), db.error());
    REQUIRE(migrate(*db, 13).is_ok());
    std::string sql =
        "INSERT INTO runs VALUES (1, 0, 1, 'h', 'echo', 'p', NULL);"
        "INSERT INTO payloads VALUES ('ab', 1, x'41', 0), ('cd', 1, x'42', 0);";
    // One record in each status the old schema knew (its CHECK takes no other).
    const char* statuses[] = {"quarantined", "replaying", "resolved", "failed-again", "discarded"};
    for (int i = 1; i <= 5; ++i) {
      const std::string n = std::to_string(i);
      sql += "INSERT INTO tasks (id, job, key, payload_sha256, payload_size, state, attempts, updated_at) VALUES (" +
             n + ", 'echo', 'k" + n + "', 'ab', 1, 'quarantined', 1, 0);"
             "INSERT INTO quarantine (id, task_id, key, source, handler, handler_identity, handler_args, exec_argv, "
             "policy_identity, policy, payload_sha256, payload_size, kind, fingerprint, crash_state, message, signal, "
             "syscall, exit_code, cpu_ms, wall_ms, max_rss_kb, status, created_at, updated_at, origin, working_dir, "
             "stderr_tail, repeats) VALUES (" + n + ", " + n + ", 'k" + n + "', 'run', 'echo', 'echo', '{}', '[]', 'p', "
             "'', 'ab', 1, 'crash', 'fp', '[]', 'm', 11, '', -1, 0, 0, 0, '" + statuses[i - 1] + "', " + n + ", " + n +
             "0, '{\"file\":\"x\"}', '/srv', x'00ff', " + n + ");"
             "INSERT INTO audit (record_id, at, actor, action, detail) VALUES (" + n + ", 1, 'op', 'quarantined', ''), (" +
             n + ", 2, 'op', 'note " + n + "', '');";
    }
    sql += "UPDATE quarantine SET replay_claim = 'h:1:2', status_before_replay = 'failed-again' WHERE id = 2;"
           "UPDATE quarantine SET reproduce_outcome = 'flaky', minimized_sha256 = 'cd' WHERE id = 1;"
           "INSERT INTO minimize_state VALUES (1, 'cd', 7, 8, 1, 9);"
           "INSERT INTO revisions VALUES (4, 1, 'cd', 1, '{}', 5, 'op', 'n', 's');";
    const pillbox::Status filled = db->exec(sql);
    REQUIRE_MESSAGE(filled.is_ok(), filled.message());
    auto text = db->query_text(everything);
    REQUIRE(text.has_value());
    before = *text;
    // The old CHECK: 'allowed' is not a status yet.
    CHECK_FALSE(db->exec("UPDATE quarantine SET status = 'allowed' WHERE id = 1").is_ok());
  }
  // A migration SIGKILLed at any moment, read meanwhile by another
  // connection: the store is version 13 or the current one, never between,
  // and holds the same either way (one IMMEDIATE transaction). Each round
  // starts again from the version 13 file.
  const std::string v13 = s.path + "/v13.db";
  std::filesystem::copy_file(dir + "/pillbox.db", v13);
  int killed_at_13 = 0, killed_migrated = 0;
  for (int round = 0; round < 12; ++round) {
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(dir + "/pillbox.db" + suffix);
    std::filesystem::copy_file(v13, dir + "/pillbox.db");
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      auto opened = Store::open(dir);
      ::_exit(opened ? 0 : 1);
    }
    {
      // Read for round x 0.4 ms (0 to 4.4 ms: before, during and after the
      // migration on this machine), then the kill.
      auto reader = Database::open(dir + "/pillbox.db");
      REQUIRE(reader.has_value());
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(400 * round);
      do {
        auto text = reader->query_text(everything);
        if (text) CHECK(*text == before);  // busy while the migration holds the lock: no claim either way
      } while (std::chrono::steady_clock::now() < until);
    }
    ::kill(child, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    auto db = Database::open(dir + "/pillbox.db");
    REQUIRE(db.has_value());
    const auto version = *db->query_int("PRAGMA user_version");
    CHECK((version == 13 || version == schema_version()));
    (version == 13 ? killed_at_13 : killed_migrated) += 1;
    CHECK(*db->query_text(everything) == before);
    CHECK(*db->query_text("PRAGMA integrity_check") == "ok");
  }
  MESSAGE("migration SIGKILLed: " << killed_at_13 << " rounds left at 13, " << killed_migrated << " migrated");
  auto store = Store::open(dir);
  REQUIRE_MESSAGE(store.has_value(), store.error());
  Database& db = store->db();
  CHECK(*db.query_int("PRAGMA user_version") == schema_version());
  // Nothing lost: the records with their ids and every column, and what
  // references them (no cascade while the table was made again).
  CHECK(*db.query_text(everything) == before);
  CHECK(*db.query_int("SELECT count(*) FROM audit") == 10);
  CHECK(*db.query_text("PRAGMA integrity_check") == "ok");
  CHECK(*db.query_int("SELECT count(*) FROM pragma_foreign_key_check") == 0);
  CHECK(*db.query_int("PRAGMA foreign_keys") == 1);
  // Its indexes are back.
  CHECK(*db.query_text("SELECT group_concat(name, ' ') FROM (SELECT name FROM sqlite_schema WHERE type = 'index' "
                       "AND tbl_name = 'quarantine' AND sql IS NOT NULL ORDER BY name)") ==
        "quarantine_by_created quarantine_by_fingerprint quarantine_by_key quarantine_by_minimized "
        "quarantine_by_payload quarantine_by_status quarantine_by_task");
  // The new CHECK takes 'allowed' and still refuses a word it does not know.
  CHECK(db.exec("UPDATE quarantine SET status = 'allowed' WHERE id = 1").is_ok());
  CHECK_FALSE(db.exec("UPDATE quarantine SET status = 'approved' WHERE id = 1").is_ok());
  // The foreign keys still hold: deleting a record takes its trail with it.
  REQUIRE(db.exec("DELETE FROM quarantine WHERE id = 3").is_ok());
  CHECK(*db.query_int("SELECT count(*) FROM audit WHERE record_id = 3") == 0);
  CHECK_FALSE(db.exec("INSERT INTO audit (record_id, at, actor, action, detail) VALUES (99, 1, 'a', 'b', '')").is_ok());
}

TEST_CASE("store: a database file that is not SQLite is a clear error") {
  pillbox::test::ScratchDir s{"store-test"};
  const std::string dir = s.path + "/store";
  REQUIRE(prepare_store_dir(dir).is_ok());
  { std::FILE* f = std::fopen((dir + "/pillbox.db").c_str(), "w"); REQUIRE(f != nullptr); std::fputs("not a database, just text that is long enough to have a header", f); std::fclose(f); }
  auto store = Store::open(dir);
  REQUIRE_FALSE(store.has_value());
  CHECK(store.error().find("store database " + dir + "/pillbox.db") == 0);
  CHECK(store.error().find("file is not a database") != std::string::npos);
}

TEST_CASE("store: processes opening one new store at once all get it, migrated once") {
  // The switch to WAL does not wait on SQLite's busy handler: creators that
  // race used to see "database is locked" now and then (CI run 7). Many
  // rounds, each released at once through a pipe, make the race likely.
  pillbox::test::ScratchDir s{"store-test"};
  constexpr int kRounds = 25;
  constexpr int kProcesses = 8;
  for (int round = 0; round < kRounds; ++round) {
    const std::string dir = s.path + "/store-" + std::to_string(round);
    int go[2];
    REQUIRE(::pipe(go) == 0);
    pid_t pids[kProcesses];
    for (pid_t& pid : pids) {
      pid = ::fork();
      REQUIRE(pid >= 0);
      if (pid == 0) {
        ::close(go[1]);
        char c;
        (void)::read(go[0], &c, 1);  // returns when the parent closes its end
        auto store = Store::open(dir);
        if (!store) std::fprintf(stderr, "%s\n", store.error().c_str());
        _exit(store.has_value() ? 0 : 1);
      }
    }
    ::close(go[0]);
    ::close(go[1]);
    int failed = 0;
    for (pid_t pid : pids) {
      int status = 0;
      REQUIRE(::waitpid(pid, &status, 0) == pid);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
    CHECK_MESSAGE(failed == 0, "round " << round);
    auto store = Store::open(dir);
    REQUIRE(store.has_value());
    CHECK(*store->db().query_int("SELECT count(*) FROM store_info") == 2);
    CHECK(*store->db().query_text("PRAGMA integrity_check") == "ok");
  }
}

TEST_CASE("store: a second connection in one process keeps the first one's locks: another process's reader leaves the WAL") {
  // Issue 25: opening a second connection once closed a plain descriptor
  // of pillbox.db, which dropped every POSIX lock of this process on it.
  // A reader in another process then took itself for the last connection
  // and, closing, checkpointed and deleted the WAL the first one writes.
  // The reader is `pillbox tasks`, exec'd: a fork of this process would
  // share SQLite's own bookkeeping of this process's locks and never try.
  pillbox::test::ScratchDir s{"store-test"};
  const std::string dir = s.path + "/store";
  auto first = Store::open(dir);
  REQUIRE(first.has_value());
  REQUIRE(first->db().exec("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1)"));
  auto second = Store::open(dir);  // e.g. serve's /metrics reader
  REQUIRE(second.has_value());
  REQUIRE(*second->db().query_int("SELECT count(*) FROM t") == 1);
  const std::string wal = dir + "/pillbox.db-wal";
  struct stat before {};
  REQUIRE(::stat(wal.c_str(), &before) == 0);

  const std::string pillbox = std::string(PILLBOX_BUILD_DIR) + "/pillbox";
  const pid_t reader = ::fork();
  REQUIRE(reader >= 0);
  if (reader == 0) {
    ::freopen("/dev/null", "w", stdout);
    ::execl(pillbox.c_str(), pillbox.c_str(), "tasks", "--store", dir.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  REQUIRE(::waitpid(reader, &status, 0) == reader);
  REQUIRE_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), "pillbox tasks --store " << dir);
  // Still the file this process writes into: neither deleted nor made anew.
  struct stat after {};
  REQUIRE_MESSAGE(::stat(wal.c_str(), &after) == 0, "the reader deleted " << wal);
  CHECK(after.st_ino == before.st_ino);
  REQUIRE(first->db().exec("INSERT INTO t VALUES (2)"));
  REQUIRE(::stat(wal.c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);
}
