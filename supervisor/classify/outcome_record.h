#pragma once
// The fields of an outcome that are kept and sent: what a quarantine record
// (supervisor/store/quarantine_store.h) and a delivery of the fleet's history
// (supervisor/broker/delivery_history.h) say of how a task ended. One struct,
// embedded wherever an outcome is stored or sent, with one JSON mapping
// (supervisor/classify/outcome_json.h) and one SQL mapping
// (supervisor/store/outcome_columns.h): a new field is added here, in those
// two and in a migration of the store's schema.
//
// Outcome (outcome.h) is the classifier's answer about this process's own
// child; an OutcomeRecord may have been read back from a store or from
// another worker, so its kind is text (a kind this build does not know stays
// as it was written) and its figures are signed (as SQLite and JSON keep them).
#include <cstdint>
#include <string>
#include <vector>

#include "shared/failure_kind.h"

namespace pillbox {

struct Outcome;  // outcome.h

// The highest signal a Linux process can die of (SIGRTMAX): a record's
// signal outside 0..kMaxSignal was not written by pillbox.
inline constexpr std::int64_t kMaxSignal = 64;

struct OutcomeRecord {
  std::string kind;                      // "crash", "ok", ...; "" where nothing ran (a release)
  std::string fingerprint;               // "" for ok
  std::vector<std::string> crash_state;  // innermost frame first
  std::string message;
  std::int64_t signal = 0;               // terminating signal (0: none)
  std::string syscall;                   // seccomp-violation: the denied syscall
  std::int64_t exit_code = -1;           // -1: signaled or never ran
  std::int64_t cpu_ms = 0;
  std::int64_t wall_ms = 0;
  std::int64_t max_rss_kb = 0;

  bool operator==(const OutcomeRecord&) const = default;
};

// The record of `outcome`.
OutcomeRecord outcome_record(const Outcome& outcome);
// The outcome a record says a task ended in (for the verbs that compare a
// new run with it, and the verdicts that judge a fleet's history); a kind
// this build does not know, or none, reads as `unknown`. Values an Outcome
// cannot hold (a row another program wrote) read as none: a signal outside
// 0..kMaxSignal as 0, an exit code outside an int as -1, a negative figure
// as 0; never as another value by truncation.
Outcome outcome_of(const OutcomeRecord& record, Kind unknown = Kind::kProtocolError);

}  // namespace pillbox
