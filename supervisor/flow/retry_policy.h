#pragma once
// What to do after an attempt (docs/architecture.md, 'Verdicts: retries,
// quarantine, outages'): done, retry after a backoff, quarantine, or give up
// without blaming the payload. Pure functions of the task's attempt history,
// so the rules are tested without processes.
//
//   * ok                                      -> done
//   * not the payload's fault (killed, sandbox-error, an exec exit code named
//     by --retry-exit-code)                   -> retry; give up (never
//                                                quarantine) after
//                                                max_attempts such failures
//                                                in this run; such attempts
//                                                are not charged to the payload
//   * a deterministic kind whose fingerprint equals the previous charged
//     attempt's                               -> quarantine at once
//   * max_attempts charged attempts failed    -> quarantine
//   * otherwise                               -> retry
// Attempts during which the supervisor itself died (never finished) are not
// failures of the payload by themselves: any crash of pillbox (or a SIGKILL
// from outside) leaves every task then running with one. So a task found
// with an unfinished last attempt runs alone (solo) the next time. A loss
// counts against the payload only with evidence that pillbox itself failed
// while it ran (a fatal signal of the supervisor's own, noted by
// supervisor/store/death_note.h); a kill from outside leaves none. When
// max_attempts such losses came in a row, max(1, max_attempts-1) of them
// alone, the payload kills the supervisor: it is quarantined as
// supervisor-lost. Losses without evidence are never charged; after
// 2 x max_attempts of them in a row, each alone, the task gives up for this
// run (never quarantined) rather than be run again forever.
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

// Whether a transient failure counts among the task's transient failures
// (judge's `transient_in_run`, bounded by max_attempts). A slot that a
// previous task left uncleanable, made anew for this one
// (Outcome::slot_renewed), does not: with --max-attempts 1 the task would
// otherwise give up for another payload's doing. A renewed slot starts
// empty, so this repeats only if other slots were left uncleanable too; up
// to 3 times per task (`slot_renewals`, kept by the caller) keeps a fault of
// our own from retrying forever.
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
