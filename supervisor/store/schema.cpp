#include "supervisor/store/schema.h"

#include <string>
#include <vector>

namespace pillbox::store {
namespace {

// Migration N (1-based) takes a store from version N-1 to N. Append only:
// never edit one that has shipped.
const std::vector<std::string>& migrations() {
  static const std::vector<std::string> all = {
      // 1: what wrote the store and when.
      R"sql(
        CREATE TABLE store_info (
          key   TEXT PRIMARY KEY,
          value TEXT NOT NULL
        );
        INSERT INTO store_info (key, value) VALUES
          ('created_at', strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
          ('created_by', 'pillbox )sql" PILLBOX_VERSION R"sql(');
      )sql",
      // 2: the task ledger and the quarantine. Times are ms since the epoch.
      R"sql(
        CREATE TABLE runs (
          id               INTEGER PRIMARY KEY,
          started_at       INTEGER NOT NULL,
          pid              INTEGER NOT NULL,
          host             TEXT NOT NULL,
          handler_identity TEXT NOT NULL,
          policy_identity  TEXT NOT NULL
        );
        -- One row per task: the handler identity it runs under, its key and
        -- the hash of its payload. A run over the same inputs finds its rows.
        CREATE TABLE tasks (
          id             INTEGER PRIMARY KEY,
          job            TEXT NOT NULL,
          key            TEXT NOT NULL,
          payload_sha256 TEXT NOT NULL,
          payload_size   INTEGER NOT NULL,
          state          TEXT NOT NULL CHECK (state IN ('pending', 'ok', 'quarantined', 'gave-up')),
          attempts       INTEGER NOT NULL DEFAULT 0,
          updated_at     INTEGER NOT NULL,
          UNIQUE (job, key, payload_sha256)
        );
        -- Every attempt, inserted before the child starts. ended_at stays NULL
        -- when the supervisor died while the attempt ran. charged = 0: the
        -- failure is not held against the payload (transient, suspected
        -- outage, interrupted, give-up budget reset). solo = 1: nothing else
        -- ran in this process meanwhile, so if the supervisor died during it,
        -- this payload is to blame.
        CREATE TABLE attempts (
          task_id     INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
          n           INTEGER NOT NULL,
          run_id      INTEGER NOT NULL,
          started_at  INTEGER NOT NULL,
          ended_at    INTEGER,
          kind        TEXT,
          fingerprint TEXT,
          message     TEXT,
          charged     INTEGER NOT NULL DEFAULT 1,
          solo        INTEGER NOT NULL DEFAULT 0,
          PRIMARY KEY (task_id, n)
        ) WITHOUT ROWID;
        -- Content-addressed payloads of quarantine records. Small ones inline;
        -- larger ones in payloads/XX/<sha256> beside the database (data NULL).
        CREATE TABLE payloads (
          sha256     TEXT PRIMARY KEY,
          size       INTEGER NOT NULL,
          data       BLOB,
          created_at INTEGER NOT NULL
        ) WITHOUT ROWID;
        CREATE TABLE quarantine (
          id               INTEGER PRIMARY KEY,
          task_id          INTEGER NOT NULL REFERENCES tasks(id),
          key              TEXT NOT NULL,
          source           TEXT NOT NULL,
          handler          TEXT NOT NULL,
          handler_identity TEXT NOT NULL,
          handler_args     TEXT NOT NULL,
          exec_argv        TEXT NOT NULL,
          policy_identity  TEXT NOT NULL,
          policy           TEXT NOT NULL,
          payload_sha256   TEXT NOT NULL REFERENCES payloads(sha256),
          payload_size     INTEGER NOT NULL,
          kind             TEXT NOT NULL,
          fingerprint      TEXT NOT NULL,
          crash_state      TEXT NOT NULL,
          message          TEXT NOT NULL,
          signal           INTEGER NOT NULL,
          syscall          TEXT NOT NULL,
          exit_code        INTEGER NOT NULL,
          cpu_ms           INTEGER NOT NULL,
          wall_ms          INTEGER NOT NULL,
          max_rss_kb       INTEGER NOT NULL,
          status           TEXT NOT NULL CHECK (status IN
                             ('quarantined', 'replaying', 'resolved', 'failed-again', 'discarded')),
          repeats          INTEGER NOT NULL DEFAULT 0,
          created_at       INTEGER NOT NULL,
          updated_at       INTEGER NOT NULL
        );
        CREATE INDEX quarantine_by_fingerprint ON quarantine (fingerprint, created_at);
        CREATE INDEX quarantine_by_created ON quarantine (created_at);
        CREATE INDEX quarantine_by_status ON quarantine (status, created_at);
        CREATE INDEX quarantine_by_task ON quarantine (task_id);
        -- The foreign key's child side: without it, deleting a payload row
        -- (purge) scans every record.
        CREATE INDEX quarantine_by_payload ON quarantine (payload_sha256);
        CREATE TABLE audit (
          id        INTEGER PRIMARY KEY,
          record_id INTEGER NOT NULL REFERENCES quarantine(id) ON DELETE CASCADE,
          at        INTEGER NOT NULL,
          actor     TEXT NOT NULL,
          action    TEXT NOT NULL,
          detail    TEXT NOT NULL
        );
        CREATE INDEX audit_by_record ON audit (record_id, at);
      )sql",
      // 3: reproduce, minimize and replay state of a record (issue 4).
      R"sql(
        ALTER TABLE quarantine ADD COLUMN reproduce_verdict TEXT
          CHECK (reproduce_verdict IS NULL OR reproduce_verdict IN ('reliable', 'flaky'));
        ALTER TABLE quarantine ADD COLUMN reproduce_runs INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE quarantine ADD COLUMN reproduce_matches INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE quarantine ADD COLUMN minimized_sha256 TEXT REFERENCES payloads(sha256);
        -- A replay in progress: who claimed the record (host:pid:start time,
        -- so a claim whose process is gone can be taken back) and the status
        -- it goes back to if it is not replayed after all.
        ALTER TABLE quarantine ADD COLUMN replay_claim TEXT;
        ALTER TABLE quarantine ADD COLUMN status_before_replay TEXT;
        CREATE INDEX quarantine_by_key ON quarantine (key, created_at);
        CREATE INDEX quarantine_by_minimized ON quarantine (minimized_sha256);
        -- A minimization in progress or done: the smallest failing payload so
        -- far and the budget spent, so that an interrupted one resumes.
        CREATE TABLE minimize_state (
          record_id   INTEGER PRIMARY KEY REFERENCES quarantine(id) ON DELETE CASCADE,
          best_sha256 TEXT NOT NULL REFERENCES payloads(sha256),
          runs        INTEGER NOT NULL,
          elapsed_ms  INTEGER NOT NULL,
          finished    INTEGER NOT NULL DEFAULT 0,
          updated_at  INTEGER NOT NULL
        );
        CREATE INDEX minimize_state_by_payload ON minimize_state (best_sha256);
      )sql",
      // 4: a record's origin (issue 5): fuzz seed and mutations, or the
      // imported file; JSON, '' for run records.
      R"sql(
        ALTER TABLE quarantine ADD COLUMN origin TEXT NOT NULL DEFAULT '';
      )sql",
      // 5: the fatal signal a run's supervisor died of, from its death note
      // (issue 11; death_note.h); NULL when there is no evidence.
      R"sql(
        ALTER TABLE runs ADD COLUMN died_of TEXT;
      )sql",
      // 6: an exec record's working directory, where reproduce and minimize
      // run it again (issue 14, point 1); '' for handlers and older records.
      R"sql(
        ALTER TABLE quarantine ADD COLUMN working_dir TEXT NOT NULL DEFAULT '';
      )sql",
      // 7: the results of ok tasks (issue 14, point 4; result_store.h). The
      // triggers keep results_total so that eviction never sums the table.
      R"sql(
        CREATE TABLE results (
          task_id    INTEGER PRIMARY KEY REFERENCES tasks(id) ON DELETE CASCADE,
          size       INTEGER NOT NULL,
          status     TEXT NOT NULL CHECK (status IN ('kept', 'evicted', 'too-large')),
          data       BLOB,
          created_at INTEGER NOT NULL
        );
        CREATE INDEX results_kept_by_age ON results (created_at, task_id) WHERE status = 'kept';
        CREATE TABLE results_total (
          id    INTEGER PRIMARY KEY CHECK (id = 1),
          bytes INTEGER NOT NULL
        );
        INSERT INTO results_total (id, bytes) VALUES (1, 0);
        CREATE TRIGGER results_total_insert AFTER INSERT ON results WHEN new.status = 'kept'
        BEGIN
          UPDATE results_total SET bytes = bytes + new.size WHERE id = 1;
        END;
        CREATE TRIGGER results_total_delete AFTER DELETE ON results WHEN old.status = 'kept'
        BEGIN
          UPDATE results_total SET bytes = bytes - old.size WHERE id = 1;
        END;
        CREATE TRIGGER results_total_update AFTER UPDATE OF status, size ON results
          WHEN old.status = 'kept' OR new.status = 'kept'
        BEGIN
          UPDATE results_total
             SET bytes = bytes - (CASE WHEN old.status = 'kept' THEN old.size ELSE 0 END)
                               + (CASE WHEN new.status = 'kept' THEN new.size ELSE 0 END)
           WHERE id = 1;
        END;
      )sql",
      // 8: the last 8 KiB of a failed exec attempt's stderr, and the
      // record's copy (issue 14, point 3). BLOB: stderr need not be UTF-8.
      R"sql(
        ALTER TABLE attempts ADD COLUMN stderr_tail BLOB;
        ALTER TABLE quarantine ADD COLUMN stderr_tail BLOB NOT NULL DEFAULT x'';
      )sql",
      // 9: why a task waits (next_retry_at, held) and which run claims it
      // (process_claim.h), so no two runs run it at once (issue 14, points
      // 8 and 10).
      R"sql(
        ALTER TABLE tasks ADD COLUMN next_retry_at INTEGER;
        ALTER TABLE tasks ADD COLUMN held INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE tasks ADD COLUMN claim TEXT;
        -- Few tasks are claimed at a time: releasing a run's claims reads these only.
        CREATE INDEX tasks_by_claim ON tasks (claim) WHERE claim IS NOT NULL;
      )sql",
      // 10: revisions of a record's payload and arguments (issue 16;
      // revision_store.h). payload_store.cpp counts them as references.
      // summary: what changed, e.g. "arg mode: strict -> lenient".
      R"sql(
        CREATE TABLE revisions (
          record_id      INTEGER NOT NULL REFERENCES quarantine(id) ON DELETE CASCADE,
          n              INTEGER NOT NULL CHECK (n >= 1),
          payload_sha256 TEXT NOT NULL REFERENCES payloads(sha256),
          payload_size   INTEGER NOT NULL,
          handler_args   TEXT NOT NULL,
          created_at     INTEGER NOT NULL,
          actor          TEXT NOT NULL,
          note           TEXT NOT NULL,
          summary        TEXT NOT NULL,
          PRIMARY KEY (record_id, n)
        ) WITHOUT ROWID;
        CREATE INDEX revisions_by_payload ON revisions (payload_sha256);
      )sql",
      // 11: where a kept result came from (issue 26, point 1): record_id NULL
      // for a run, else the replayed record and its revision (0: original).
      R"sql(
        ALTER TABLE results ADD COLUMN record_id INTEGER;
        ALTER TABLE results ADD COLUMN revision INTEGER NOT NULL DEFAULT 0;
      )sql",
      // 12: "not-reproduced" (issue 26, point 6). SQLite cannot change a
      // column's CHECK, so the verdict moves to a new column; the old one is
      // no longer written.
      R"sql(
        ALTER TABLE quarantine ADD COLUMN reproduce_outcome TEXT
          CHECK (reproduce_outcome IS NULL OR reproduce_outcome IN ('reliable', 'flaky', 'not-reproduced'));
        UPDATE quarantine SET reproduce_outcome = reproduce_verdict, reproduce_verdict = NULL
         WHERE reproduce_verdict IS NOT NULL;
      )sql",
      // 13: the handler version a task ended ok under (issue 26, point 2;
      // handler_version.h); '' when none.
      R"sql(
        ALTER TABLE tasks ADD COLUMN version TEXT NOT NULL DEFAULT '';
      )sql",
      // 14: status 'allowed', reviewed and allowed to replay (issue 28, point
      // 5). SQLite cannot change a column's CHECK: the table is made again
      // with every column in its order, its rows copied with their ids, its
      // indexes made again (migrate() turns foreign keys off around this, so
      // dropping the old table cascades to no audit trail).
      R"sql(
        CREATE TABLE quarantine_14 (
          id               INTEGER PRIMARY KEY,
          task_id          INTEGER NOT NULL REFERENCES tasks(id),
          key              TEXT NOT NULL,
          source           TEXT NOT NULL,
          handler          TEXT NOT NULL,
          handler_identity TEXT NOT NULL,
          handler_args     TEXT NOT NULL,
          exec_argv        TEXT NOT NULL,
          policy_identity  TEXT NOT NULL,
          policy           TEXT NOT NULL,
          payload_sha256   TEXT NOT NULL REFERENCES payloads(sha256),
          payload_size     INTEGER NOT NULL,
          kind             TEXT NOT NULL,
          fingerprint      TEXT NOT NULL,
          crash_state      TEXT NOT NULL,
          message          TEXT NOT NULL,
          signal           INTEGER NOT NULL,
          syscall          TEXT NOT NULL,
          exit_code        INTEGER NOT NULL,
          cpu_ms           INTEGER NOT NULL,
          wall_ms          INTEGER NOT NULL,
          max_rss_kb       INTEGER NOT NULL,
          status           TEXT NOT NULL CHECK (status IN
                             ('quarantined', 'allowed', 'replaying', 'resolved', 'failed-again', 'discarded')),
          repeats          INTEGER NOT NULL DEFAULT 0,
          created_at       INTEGER NOT NULL,
          updated_at       INTEGER NOT NULL,
          reproduce_verdict TEXT
            CHECK (reproduce_verdict IS NULL OR reproduce_verdict IN ('reliable', 'flaky')),
          reproduce_runs    INTEGER NOT NULL DEFAULT 0,
          reproduce_matches INTEGER NOT NULL DEFAULT 0,
          minimized_sha256  TEXT REFERENCES payloads(sha256),
          replay_claim      TEXT,
          status_before_replay TEXT,
          origin            TEXT NOT NULL DEFAULT '',
          working_dir       TEXT NOT NULL DEFAULT '',
          stderr_tail       BLOB NOT NULL DEFAULT x'',
          reproduce_outcome TEXT
            CHECK (reproduce_outcome IS NULL OR reproduce_outcome IN ('reliable', 'flaky', 'not-reproduced'))
        );
        INSERT INTO quarantine_14 (
          id, task_id, key, source, handler, handler_identity, handler_args, exec_argv,
          policy_identity, policy, payload_sha256, payload_size, kind, fingerprint, crash_state,
          message, signal, syscall, exit_code, cpu_ms, wall_ms, max_rss_kb, status, repeats,
          created_at, updated_at, reproduce_verdict, reproduce_runs, reproduce_matches,
          minimized_sha256, replay_claim, status_before_replay, origin, working_dir, stderr_tail,
          reproduce_outcome)
        SELECT
          id, task_id, key, source, handler, handler_identity, handler_args, exec_argv,
          policy_identity, policy, payload_sha256, payload_size, kind, fingerprint, crash_state,
          message, signal, syscall, exit_code, cpu_ms, wall_ms, max_rss_kb, status, repeats,
          created_at, updated_at, reproduce_verdict, reproduce_runs, reproduce_matches,
          minimized_sha256, replay_claim, status_before_replay, origin, working_dir, stderr_tail,
          reproduce_outcome
        FROM quarantine;
        DROP TABLE quarantine;
        ALTER TABLE quarantine_14 RENAME TO quarantine;
        CREATE INDEX quarantine_by_fingerprint ON quarantine (fingerprint, created_at);
        CREATE INDEX quarantine_by_created ON quarantine (created_at);
        CREATE INDEX quarantine_by_status ON quarantine (status, created_at);
        CREATE INDEX quarantine_by_task ON quarantine (task_id);
        CREATE INDEX quarantine_by_payload ON quarantine (payload_sha256);
        CREATE INDEX quarantine_by_key ON quarantine (key, created_at);
        CREATE INDEX quarantine_by_minimized ON quarantine (minimized_sha256);
      )sql",
  };
  return all;
}

}  // namespace

int schema_version() { return static_cast<int>(migrations().size()); }

namespace {

constexpr int kQuarantineRemade = 14;  // the migration that makes the quarantine table again

Status migrate_locked(Database& db, int target) {
  // IMMEDIATE: take the write lock before reading the version, so two
  // processes cannot both decide to apply the same migration.
  if (auto s = db.exec("BEGIN IMMEDIATE"); !s) return s;
  auto rollback = [&](Status s) {
    (void)db.exec("ROLLBACK");
    return s;
  };
  auto current = db.query_int("PRAGMA user_version");
  if (!current) return rollback(Status::error(current.error()));
  if (*current > schema_version()) {
    return rollback(Status::error("store " + db.path() + " has schema version " + std::to_string(*current) +
                                  ", newer than this pillbox understands (" + std::to_string(schema_version()) +
                                  "); use a newer pillbox, or another --store"));
  }
  for (int version = static_cast<int>(*current) + 1; version <= target; ++version) {
    if (auto s = db.exec(migrations()[static_cast<std::size_t>(version - 1)]); !s) {
      return rollback(Status::error("store migration to version " + std::to_string(version) + " failed: " + s.message()));
    }
    if (auto s = db.exec("PRAGMA user_version = " + std::to_string(version)); !s) return rollback(s);
  }
  // What references the quarantine table, made again by 14, still finds its record.
  if (*current < kQuarantineRemade && target >= kQuarantineRemade) {
    auto dangling = db.query_int(
        "SELECT (SELECT count(*) FROM pragma_foreign_key_check('audit')) + "
        "(SELECT count(*) FROM pragma_foreign_key_check('minimize_state')) + "
        "(SELECT count(*) FROM pragma_foreign_key_check('revisions'))");
    if (!dangling) return rollback(Status::error(dangling.error()));
    if (*dangling != 0) {
      return rollback(Status::error("store " + db.path() + ": the migration to version " + std::to_string(target) +
                                    " would leave " + std::to_string(*dangling) +
                                    " references to no record; nothing was changed"));
    }
  }
  return db.exec("COMMIT");
}

}  // namespace

Status migrate(Database& db, int target) {
  // Foreign keys off while a migration makes a table again (14): dropping
  // the old one would otherwise delete what references it (ON DELETE
  // CASCADE). The pragma is a no-op inside a transaction, hence here; the
  // references are checked before the commit instead.
  auto foreign_keys = db.query_int("PRAGMA foreign_keys");
  if (!foreign_keys) return Status::error(foreign_keys.error());
  if (auto s = db.exec("PRAGMA foreign_keys=OFF"); !s) return s;
  const Status done = migrate_locked(db, target);
  if (*foreign_keys != 0) {
    if (auto s = db.exec("PRAGMA foreign_keys=ON"); !s && done) return s;
  }
  return done;
}

}  // namespace pillbox::store
