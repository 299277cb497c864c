#pragma once
// What became of one task, once: its verdict (ok, quarantined, poison, gave
// up, held), and the sink that hears it. The task flow (task_flow.h) gives
// verdicts; the CLI's output (run_output.h) and tests take them.
#include <cstdint>
#include <string>
#include <string_view>

#include "supervisor/classify/outcome.h"
#include "supervisor/exec/task_source.h"

namespace pillbox {

struct TaskLost;  // ledger_batch.h

struct Verdict {
  enum class Type {
    kOk,           // succeeded (on attempt `attempts`)
    kQuarantined,  // poison: kept in the store as record `record_id`
    kPoison,       // poison, but no store to keep it in (--no-store)
    kGaveUp,       // failed every attempt for reasons that are not the payload's: not quarantined
    kHeld,         // not run to the end because of a suspected outage: runs again next time
  };
  Type type = Type::kOk;
  std::uint32_t attempts = 0;
  std::int64_t record_id = 0;
  bool new_fingerprint = false;
  bool folded = false;        // store full: counted as a repeat of an existing record
  std::string reason;
  // Where a broker's back end put it: its results or dead-letter entry id
  // ("" for the store's, whose record_id says it).
  std::string settled_as;
};

std::string_view to_string(Verdict::Type type);

class VerdictSink {
 public:
  virtual ~VerdictSink() = default;
  virtual void on_verdict(const Task& task, const Outcome& outcome, const Verdict& verdict) = 0;
  virtual void on_input_error(const std::string& message) = 0;
  // Run-level news: outage suspected, outage over, tasks skipped.
  virtual void on_notice(const std::string& message) = 0;
  // A task not run: the store already has it finished (`why`), or it is a
  // repeat of an input earlier in this run. `record_id`: its quarantine record.
  virtual void on_skipped(const Task& /*task*/, const std::string& /*why*/, std::int64_t /*record_id*/) {}
  // After on_skipped of a task already ok in the store, when the flow was
  // asked for them (FlowSettings::done_results): the result the store kept
  // of it, or null and why there is none (not kept, evicted, too large).
  virtual void on_done_result(const Task& /*task*/, const std::string* /*output*/, const std::string& /*why_not*/) {}
  // An earlier poison verdict on `task` (quarantined or poison, record
  // `record_id` or 0) is taken back: a suspected outage explains the
  // failure. The task is held and gets another verdict later.
  virtual void on_taken_back(const Task& /*task*/, const Outcome& /*outcome*/, const std::string& /*why*/,
                             std::int64_t /*record_id*/) {}
  // The back end no longer holds `task` (another process took it over, or
  // it was deleted): no verdict of this process's, now or later.
  virtual void on_lost(const Task& /*task*/, const TaskLost& /*lost*/) {}
  // What the run is doing when it is not simply running tasks, for a
  // progress line: "paused: handler outage suspected ..."; "" when running.
  virtual void on_status(const std::string& /*status*/) {}
};

}  // namespace pillbox
