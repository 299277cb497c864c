#pragma once
// What to do after an attempt: done, retry after a backoff, quarantine, or
// give up without blaming the payload. Pure functions of the task's attempt
// history, so the rules are tested without processes. The rules:
// docs/architecture.md, 'One attempt's outcome' and 'The supervisor's own
// deaths'. An unfinished attempt alone proves nothing (a kill -9 ends every
// task in flight): a loss counts only with evidence (supervisor/store/death_note.h).
#include <chrono>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "supervisor/classify/outcome.h"
#include "supervisor/store/ledger.h"

namespace pillbox {

struct RetrySettings {
  std::uint32_t max_attempts = 3;
  std::chrono::milliseconds backoff_base{1000};
  std::chrono::milliseconds backoff_max{60000};
  std::set<int> retry_exit_codes;  // exec mode: exit codes that mean "transient, retry"
};

enum class Decision { kDone, kRetry, kQuarantine, kGiveUp };

struct Judgement {
  Decision decision = Decision::kDone;
  std::string reason;  // one line, for the record's audit trail and the log
};

// True when the failure is not the payload's fault.
bool is_transient(const RetrySettings& settings, const Outcome& outcome);

// Whether a transient failure counts toward judge's `transient_in_run`. A
// slot another task left uncleanable, made anew for this one
// (Outcome::slot_renewed), does not: with --max-attempts 1 the task would
// give up for another payload's doing. Free only 3 times per task
// (`slot_renewals`, kept by the caller), so a fault of our own cannot retry
// forever.
bool counts_as_transient(const Outcome& outcome, std::uint32_t& slot_renewals);

// `history`: the task's attempts, oldest first, ending with the one that
// produced `outcome` (finished; charged = false when it was transient or
// during an outage). `transient_in_run`: this task's transient failures in
// this run, this one included.
Judgement judge(const RetrySettings& settings, const std::vector<store::AttemptSummary>& history,
                const Outcome& outcome, std::uint32_t transient_in_run = 0);

// Before running a task again: true when its latest unfinished attempts (the
// charged ones, in a row) hold max_attempts lost with evidence,
// max(1, max_attempts - 1) of them solo. Losses without evidence in between
// neither count nor break the row.
bool kills_the_supervisor(const RetrySettings& settings, const std::vector<store::AttemptSummary>& history);

// Before running a task again: true when its latest unfinished attempts hold
// 2 x max_attempts solo losses without evidence (pillbox killed from outside
// again and again while it ran alone): give up, never quarantine.
bool lost_without_evidence_too_often(const RetrySettings& settings, const std::vector<store::AttemptSummary>& history);

// True when the task's last attempt never finished: it runs alone next.
bool suspected_of_killing_the_supervisor(const std::vector<store::AttemptSummary>& history);

// Full jitter: uniform in [0, min(backoff_max, backoff_base * 2^(failures-1))].
std::chrono::milliseconds backoff_delay(const RetrySettings& settings, std::uint32_t failures, std::mt19937_64& rng);

}  // namespace pillbox
