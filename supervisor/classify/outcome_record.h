#pragma once
// The fields of an outcome that are stored and sent (quarantine records,
// the fleet's delivery history). A new field goes here, in outcome_json.h,
// in supervisor/store/outcome_columns.h and in a store migration.
// Unlike Outcome, a record may come from a store or another worker: its kind
// is text (an unknown kind stays as written) and its figures are signed (as
// SQLite and JSON keep them).
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
// The outcome a record says a task ended in; an unknown or missing kind
// reads as `unknown`. Values an Outcome cannot hold read as none, never as
// another value by truncation: a signal outside 0..kMaxSignal as 0, an exit
// code outside an int as -1, a negative figure as 0.
Outcome outcome_of(const OutcomeRecord& record, Kind unknown = Kind::kProtocolError);

}  // namespace pillbox
