#pragma once
// Findings of `pillbox fuzz` and `pillbox quarantine import`: failing
// payloads that came from no run's input, made into ordinary quarantine
// records: a ledger task with the attempt that found it, the record with its
// source and origin, and an audit entry, in one transaction. So show,
// reproduce, minimize and replay treat them like any other record.
#include <cstdint>
#include <optional>
#include <string>

#include "shared/status.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/flow/task_flow.h"

namespace pillbox {

struct Finding {
  std::string key;           // the ledger task's key ("fuzz:…", or the imported file)
  std::string payload;
  Outcome outcome;           // a failure
  std::string origin;        // JSON object (QuarantineEntry::origin)
  std::int64_t started_ms = 0;
  std::int64_t ended_ms = 0;
  bool solo = false;         // nothing else ran meanwhile (--jobs 1)
  // Count it as one more repeat of an open (not resolved) record of the same
  // fingerprint if there is one, instead of recording it. Checked in the
  // transaction that would insert it, so two fuzz sessions on one store
  // that meet a new fingerprint at once record it once.
  bool repeat_if_fingerprint_open = false;
};

struct RecordedFinding {
  std::int64_t record_id = 0;     // 0: not recorded (see `already`)
  bool new_fingerprint = false;
  bool folded = false;            // the store is full: counted as a repeat of its fingerprint
  // The ledger has this task under the same handler and policy with a
  // record that is not resolved (imported before): its state, and that
  // record. A task done since (resolved by a replay) that fails again is
  // recorded anew.
  std::optional<store::TaskState> already;
  // repeat_if_fingerprint_open: the open record it was counted on.
  std::int64_t repeat_of = 0;
};

class FindingRecorder {
 public:
  // Opens a ledger run for `identity` (one per fuzz or import session).
  static Expected<FindingRecorder> open(store::Database& db, store::QuarantineStore& quarantine, RunIdentity identity,
                                        std::string source, std::string actor);

  Expected<RecordedFinding> record(const Finding& finding, const std::string& audit_detail);
  // `n` more sightings of a fingerprint already on file; returns the record
  // they were counted on, 0 when there is none open (record it instead).
  // With an audit entry unless `detail` is empty.
  Expected<std::int64_t> add_repeats(const std::string& fingerprint, std::int64_t n, const std::string& detail);
  // An audit entry on a record, in a transaction of its own.
  Status audit(std::int64_t record_id, const std::string& action, const std::string& detail);

  const RunIdentity& identity() const { return identity_; }

 private:
  FindingRecorder(store::QuarantineStore& quarantine, store::Ledger ledger, RunIdentity identity, std::string source,
                  std::string actor)
      : quarantine_(&quarantine), ledger_(std::move(ledger)), identity_(std::move(identity)),
        source_(std::move(source)), actor_(std::move(actor)) {}

  store::QuarantineStore* quarantine_;
  store::Ledger ledger_;
  RunIdentity identity_;
  std::string source_;
  std::string actor_;
};

}  // namespace pillbox
