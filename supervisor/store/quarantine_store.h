#pragma once
// Quarantine records (docs/architecture.md, The store). A record names its
// payload by hash and its task in the ledger, whose attempts are its history.
//
// Over `max_records`, a new quarantine: 1. evicts the oldest resolved or
// discarded record; else 2. folds into the newest record of a known
// fingerprint as a repeat, payload not kept; else 3. is kept anyway: new
// evidence is never dropped.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"
#include "supervisor/classify/outcome_record.h"
#include "supervisor/store/database.h"
#include "supervisor/store/payload_store.h"
#include "supervisor/store/record_status.h"
#include "supervisor/store/statement.h"

namespace pillbox::store {

inline constexpr std::int64_t kDefaultMaxRecords = 100'000;

// A record's outcome (the OutcomeRecord it is) and what it ran under.
struct QuarantineEntry : OutcomeRecord {
  std::int64_t task_id = 0;
  std::string key;
  std::string source = "run";       // run | fuzz | import
  std::string handler;              // echo, regex, exec, plugin:...
  std::string handler_identity;     // part of the fingerprint
  std::string handler_args;         // JSON object
  std::string exec_argv;            // JSON array ("[]" for handlers)
  std::string policy_identity;
  std::string policy;               // the policy's text, to replay under it
  std::string payload_sha256;
  std::int64_t payload_size = 0;
  std::string origin;               // JSON object: fuzz seed and mutations, imported file ("" for run)
  // exec: the absolute directory the command ran in, and runs again in. ""
  // for handlers and older records.
  std::string working_dir;
  std::string stderr_tail;          // exec mode: the last bytes of stderr of the final attempt (raw bytes)
};

struct QuarantineRecord {
  std::int64_t id = 0;
  QuarantineEntry entry;
  RecordStatus status = RecordStatus::kQuarantined;
  std::int64_t repeats = 0;
  std::int64_t created_at = 0;
  std::int64_t updated_at = 0;
  std::string reproduce_verdict;     // "", reliable, flaky or not-reproduced (pillbox reproduce)
  std::int64_t reproduce_runs = 0;
  std::int64_t reproduce_matches = 0; // runs that ended with the record's fingerprint
  std::string minimized_sha256;      // "" until pillbox minimize finds a smaller payload
};

// The days `quarantine stats` counts a group's records on (by_day).
inline constexpr int kStatsDays = 14;
inline constexpr std::int64_t kDayMs = 86'400'000;

// One row of `quarantine stats`: the records of one fingerprint.
struct FingerprintStats {
  std::string fingerprint;
  std::string kind;
  std::int64_t records = 0;
  std::int64_t open = 0;             // open ones (is_open: quarantined, allowed, replaying, failed-again)
  std::int64_t repeats = 0;          // failures folded into these records
  std::int64_t first_ms = 0;         // first quarantined
  std::int64_t last_ms = 0;          // last quarantined or updated
  std::int64_t example_id = 0;       // the newest record
  std::string message;               // the newest record's message
  std::string crash_state;           // ... and its crash state (JSON array, innermost first)
  std::string handler_identity;      // ... and the handler it ran under (a raise site is one program's)
  std::map<RecordStatus, std::int64_t> by_status;  // records per status (absent: none)
  // Records created on each of the last kStatsDays UTC days, oldest first
  // (back(): today); first_day_ms is 00:00 UTC of by_day[0]. Folded repeats
  // have no time and are not counted. Empty for a fleet's quarantine.
  std::vector<std::int64_t> by_day;
  std::int64_t first_day_ms = 0;
};

struct AuditEntry {
  std::int64_t at = 0;
  std::string actor;
  std::string action;
  std::string detail;
};

// One attempt of a task, from the ledger.
struct AttemptRow {
  std::int64_t n = 0;
  std::int64_t run_id = 0;
  std::int64_t started_at = 0;
  std::int64_t ended_at = 0;         // 0: never ended (the supervisor died)
  std::string kind;
  std::string fingerprint;
  std::string message;
  bool charged = true;
  bool solo = false;
  std::string stderr_tail;           // exec mode failures: the last bytes of stderr ("" when none)
};

struct InsertResult {
  std::int64_t id = 0;          // the new record, or the one the repeat was folded into
  bool new_fingerprint = false; // no record had this fingerprint before
  bool folded = false;          // over capacity: counted as a repeat, payload not kept
  bool existing = false;        // the task already had an open record (another process made it): nothing added
};

// Like RabbitMQ's x-death: a task's attempts counted per outcome kind, with
// the first and last time ("unfinished": the supervisor died during it).
struct AttemptTally {
  std::string kind;
  std::int64_t count = 0;
  std::int64_t first_ms = 0;
  std::int64_t last_ms = 0;
};

struct ListFilter {
  std::optional<RecordStatus> status;
  std::optional<std::string> kind;
  std::optional<std::string> fingerprint;
  std::optional<std::string> key;
  std::optional<std::int64_t> since_ms;  // created at or after
  std::optional<std::string> source;     // run | fuzz | import
  std::optional<std::string> handler;    // echo, regex, exec, plugin:NAME
  std::optional<std::string> raise_site;  // a raise site's id (shared/raise_site.h): "rs-" and 16 hex digits
  std::int64_t limit = -1;      // -1: all
  std::int64_t offset = 0;
};

// A minimization's progress (pillbox minimize): the smallest payload found
// so far that still fails the same way, and the budget spent on it.
struct MinimizeState {
  std::string best_sha256;
  std::int64_t runs = 0;
  std::int64_t elapsed_ms = 0;
  bool finished = false;          // the search ran to its end (not stopped by a budget or a signal)
};

struct PurgeResult {
  std::size_t records = 0;
  std::size_t payloads = 0;
  std::size_t open_records = 0;  // of `records`, those still open (is_open)
  std::vector<std::int64_t> ids;  // the records deleted
};

// A record a purge would delete (purge_candidates).
struct PurgeCandidate {
  std::int64_t id = 0;
  RecordStatus status = RecordStatus::kQuarantined;
  std::string kind;
  std::string key;
};

class QuarantineStore {
 public:
  static Expected<QuarantineStore> open(Database& db, const std::string& store_dir,
                                        std::int64_t max_records = kDefaultMaxRecords);

  // Inside the caller's transaction. `payload` is stored under
  // entry.payload_sha256 unless the repeat is folded. One open record per
  // task: if the task has one already, that one is returned (existing).
  Expected<InsertResult> insert(const QuarantineEntry& entry, std::string_view payload, std::int64_t now_ms,
                                const std::string& actor);
  Status audit(std::int64_t record_id, std::int64_t now_ms, const std::string& actor, const std::string& action,
               const std::string& detail);
  // Inside the caller's transaction. `n` more repeats on the newest
  // unresolved record of `fingerprint` (a resolved bug found again is news),
  // audited unless `detail` is empty. Returns its id, or 0 when none.
  Expected<std::int64_t> add_repeats(const std::string& fingerprint, std::int64_t n, std::int64_t now_ms,
                                     const std::string& actor, const std::string& detail);

  // Newest first. each() streams records; `fn` returns false to stop.
  Expected<std::vector<QuarantineRecord>> list(const ListFilter& filter);
  Status each(const ListFilter& filter, const std::function<bool(const QuarantineRecord&)>& fn);
  // How many records the filter matches, ignoring limit and offset.
  Expected<std::int64_t> count(const ListFilter& filter);
  // Records grouped by fingerprint and kind, most records first (limit and
  // offset ignored), each with its records by day up to `now_ms`'s day (UTC).
  Expected<std::vector<FingerprintStats>> stats(const ListFilter& filter);
  Expected<std::vector<FingerprintStats>> stats(const ListFilter& filter, std::int64_t now_ms);
  Expected<std::vector<AuditEntry>> audit_trail(std::int64_t record_id);
  Expected<std::vector<AttemptRow>> attempts(std::int64_t task_id);
  // A record made by mistake, taken back inside the caller's transaction:
  // status 'discarded' with an audit entry `action` ("released") saying why.
  // Only a record still 'quarantined' changes; false when it was not.
  Expected<bool> take_back(std::int64_t id, std::int64_t now_ms, const std::string& actor, const std::string& action,
                           const std::string& detail);
  // Inside the caller's transaction: moves record `id` from status `from`
  // to `to` with an audit entry, only while it is `from` and no replay
  // claims it; false, nothing written, when it was not (someone acted in
  // between).
  Expected<bool> change_status(std::int64_t id, RecordStatus from, RecordStatus to, std::int64_t now_ms,
                               const std::string& actor, const std::string& action, const std::string& detail);
  // Sets a record's status with an audit entry, in one transaction of its own.
  Status set_status(std::int64_t id, RecordStatus status, std::int64_t now_ms, const std::string& actor,
                    const std::string& action, const std::string& detail);
  Expected<std::optional<QuarantineRecord>> get(std::int64_t id);
  Expected<std::vector<AttemptTally>> attempt_tally(std::int64_t task_id);
  // Deletes records created before `cutoff_ms` with one of `statuses` (all
  // when empty), their audit trail and unshared payloads, in its own
  // transaction. More than `max_open` of them open (one reopened since the
  // operator confirmed): nothing is deleted, a usage error.
  Expected<PurgeResult> purge(std::int64_t cutoff_ms, const std::vector<RecordStatus>& statuses,
                              std::size_t max_open = static_cast<std::size_t>(-1));
  // What purge(cutoff_ms, statuses) would delete now, oldest first; deletes nothing.
  Expected<std::vector<PurgeCandidate>> purge_candidates(std::int64_t cutoff_ms, const std::vector<RecordStatus>& statuses);

  // The verdict of `pillbox reproduce`, with an audit entry, in one transaction.
  Status record_reproduction(std::int64_t id, const std::string& verdict, std::int64_t runs, std::int64_t matches,
                             std::int64_t now_ms, const std::string& actor, const std::string& detail);

  Expected<std::optional<MinimizeState>> minimize_state(std::int64_t id);
  // Stores `best` (content-addressed) and the state, in one transaction.
  Status save_minimize_state(std::int64_t id, std::string_view best, const MinimizeState& state, std::int64_t now_ms);
  Status clear_minimize_state(std::int64_t id);
  // The record's minimized payload (already stored) with an audit entry.
  Status record_minimized(std::int64_t id, const std::string& sha256, std::int64_t now_ms, const std::string& actor,
                          const std::string& detail);

  PayloadStore& payloads() { return payloads_; }
  Database& database() { return *db_; }

 private:
  QuarantineStore(Database& db, PayloadStore payloads, std::int64_t max_records)
      : db_(&db), payloads_(std::move(payloads)), max_records_(max_records) {}
  Expected<std::int64_t> record_count();
  // Runs `update` of record `id` (?1; `bind` binds the rest) with an audit
  // entry, in one transaction of its own; an error when there is no such record.
  Status update_audited(std::int64_t id, const std::string& update, const std::function<void(Statement&)>& bind,
                        std::int64_t now_ms, const std::string& actor, const std::string& action,
                        const std::string& detail);
  // Fills each group's by_day (see FingerprintStats) in one query.
  Status count_by_day(const ListFilter& filter, std::int64_t now_ms, std::vector<FingerprintStats>& groups);

  Database* db_;
  PayloadStore payloads_;
  std::int64_t max_records_;
  Statement insert_;
  Statement newest_of_fingerprint_;
  Statement fold_;
  Statement audit_;
  Statement evict_;
  Statement open_record_of_task_;
};

// Milliseconds since the Unix epoch, the store's unit of time.
std::int64_t now_ms();

}  // namespace pillbox::store
