#pragma once
// The store's side of `pillbox quarantine replay`: records are claimed
// (`replaying`) so two replays never run the same one. A record claimed but
// not replayed goes back to its status; a gone process's claim is taken back
// by the next replay on the same host.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/store/database.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/replay_verdict.h"
#include "supervisor/store/result_store.h"

namespace pillbox::store {

struct ReplaySelection {
  std::vector<std::int64_t> ids;          // given ids (empty: use the filter)
  ListFilter filter;                      // --fingerprint, --kind (or --all: empty)
  bool force = false;                     // include resolved, discarded and replaying records
  bool allowed_only = false;              // --allowed: only records an operator allowed

  ReplayScope scope() const { return replay_scope(force, allowed_only); }
};

struct ReplayAttempt {
  std::int64_t started_at = 0;
  std::int64_t ended_at = 0;
  std::string kind;
  std::string fingerprint;
  std::string message;
};

class ReplayStore {
 public:
  ReplayStore(Database& db, QuarantineStore& quarantine) : db_(&db), quarantine_(&quarantine) {}

  // This process's claim token (process_claim.h).
  static std::string claim_token();
  // The replay claim on record `id` ("" when none, or no such record): a
  // patch (supervisor/ops/patch_record.h) is refused while there is one.
  static Expected<std::string> claim_of(Database& db, std::int64_t id);
  Database& database() { return *db_; }
  // Takes back records claimed by processes of this host that are gone.
  // Returns how many.
  Expected<std::size_t> recover_abandoned(std::int64_t now_ms, const std::string& actor);

  // The records a replay would run, oldest first, with the statuses its
  // scope takes (replayable). Also returns, in `skipped`, the given ids it
  // will not take and why.
  Expected<std::vector<QuarantineRecord>> select(const ReplaySelection& selection,
                                                 std::vector<std::string>& skipped);
  // Claims those of `ids` still claimable, in one transaction; returns them.
  Expected<std::vector<std::int64_t>> claim(const std::vector<std::int64_t>& ids, ReplayScope scope, std::int64_t now_ms);
  // A claimed record goes back to the status it had.
  Status release(std::int64_t id, std::int64_t now_ms);
  // A run row for the attempts a replay appends.
  Expected<std::int64_t> start_run(const std::string& handler_identity, const std::string& policy_identity,
                                   std::int64_t now_ms);
  // Sets the record's status from `verdict` and appends the attempt.
  // Resolved: the task becomes ok (whatever handler the replay ran under)
  // and `output` its kept result (at most `keep_limit` bytes, else too
  // large), marked with the record and `revision`, so later runs skip it.
  // Failed again: a task a replay of this record had made ok is quarantined
  // again and that result dropped.
  Status finish(const QuarantineRecord& record, ReplayVerdict verdict, const ReplayAttempt& attempt, std::int64_t run_id,
                const std::string& actor, const std::string& detail, std::int64_t revision, const std::string& output,
                std::uint64_t keep_limit);

 private:
  Database* db_;
  QuarantineStore* quarantine_;
  std::optional<ResultStore> results_;  // opened at the first finish
};

}  // namespace pillbox::store
