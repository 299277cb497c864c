#pragma once
// The task flow, the attempt engine: the dispatcher's TaskSource and
// OutcomeSink at once. See docs/architecture.md, '3. Task flow', and
// 'Verdicts: retries, quarantine, outages' for its rules. It never sleeps
// and arms no timer: next() says by when it wants to be asked again
// (TaskSource::Item::wake_at).
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/flow/attempt_store.h"
#include "supervisor/flow/circuit_breaker.h"
#include "supervisor/flow/retry_policy.h"
#include "supervisor/flow/task_schedule.h"
#include "supervisor/flow/verdict.h"
#include "supervisor/store/run_identity.h"

namespace pillbox {

struct FlowSettings {
  RetrySettings retry;
  BreakerSettings breaker;
  RunIdentity identity;
  bool rerun_done = false;      // run tasks the ledger has as ok again (--rerun)
  // Run again the tasks the ledger has as ok under another version of the
  // handler's scripts than identity.handler_version (--rerun-outdated).
  bool rerun_outdated = false;
  // The sink wants the kept results of tasks skipped as already ok (run
  // --out): VerdictSink::on_done_result, one store read per such task.
  bool done_results = false;
  // The flow's clock (backoffs, the breaker's windows and probes). For
  // tests that drive the flow themselves and move time by hand: the
  // dispatcher reads wake_at on std::chrono::steady_clock, so under
  // run_tasks it must stay empty (steady_clock::now).
  std::function<std::chrono::steady_clock::time_point()> clock;
  // The seed of the backoffs' jitter: tests fix it so that a run is the same
  // every time; empty: drawn from std::random_device.
  std::optional<std::uint64_t> seed;
  // A file of the host that a failure shows the task could not see
  // (supervisor/exec/host_view.h: hidden_host_path), "" when none: the
  // hidden-path rule (docs/architecture.md, 'Outages'). Empty: the rule is off.
  std::function<std::string(const Outcome&)> hidden_path;
};

struct FlowReport {
  std::size_t skipped_done = 0;         // already ok in the ledger
  std::size_t done_outdated = 0;        // ... of them, ok under another version of the scripts
  std::size_t reran_outdated = 0;       // ok under another version, run again (rerun_outdated)
  std::string outdated_scripts;         // the scripts whose edit made them so ("parse_records.py")
  std::size_t skipped_quarantined = 0;  // already quarantined
  std::size_t retried = 0;              // tasks that needed more than one attempt
  std::size_t quarantined = 0;
  std::size_t new_fingerprints = 0;
  std::size_t gave_up = 0;
  std::size_t held = 0;                 // left for the next run by an open breaker
  std::size_t outages = 0;              // times the breaker opened
  std::size_t verified_bursts = 0;      // failures of many payloads alike shown to be poison (a known-good
                                        // probe or check succeeded, the failure came again)
  std::size_t released_bursts = 0;      // ... shown not to be the payloads' (a recheck did not fail so)
  std::size_t taken_back = 0;           // poison verdicts taken back when the breaker opened
  bool stopped_by_breaker = false;      // open longer than --breaker-max-wait: the rest was not read
  std::string stopped_for_hidden;       // or at once: tasks could not see this file of the host
  // Every task so far failed without reading its payload (the command's own
  // setup is broken): the run stopped at once; why, with the failure ("" when not).
  std::string stopped_for_setup;
  std::size_t skipped_repeats = 0;      // the same key and payload again in this run
  std::size_t done_without_result = 0;  // skipped as ok, asked for its result (done_results), none kept
  std::size_t done_from_replay = 0;     // ... its kept result made by a `quarantine replay` (of a patch, maybe)
  std::size_t interrupted = 0;          // attempts cut short by SIGINT/SIGTERM (not held against anyone)
  int stop_signal = 0;                  // SIGINT or SIGTERM ended the run early
  std::size_t input_errors = 0;
  std::size_t running_elsewhere = 0;    // claimed by another live pillbox process: its verdict, not ours
};

// Called after commit for each new quarantine record: its JSON, and whether
// its fingerprint was new to the store.
using QuarantineCallback = std::function<void(const std::string& record_json, bool new_fingerprint)>;

class TaskFlow final : public TaskSource, public OutcomeSink {
 public:
  // `store` is not owned, and outlives the flow.
  TaskFlow(FlowSettings settings, TaskSource& inner, VerdictSink& out, AttemptStore& store,
           QuarantineCallback on_quarantine = {});
  ~TaskFlow() override;
  TaskFlow(const TaskFlow&) = delete;
  TaskFlow& operator=(const TaskFlow&) = delete;

  // TaskSource
  Status prepare(std::size_t free_slots) override;
  Item next() override;
  Status commit_turn() override;
  std::vector<int> wait_fds() const override;
  std::vector<std::uint64_t> take_stopped() override { return std::exchange(stopped_, {}); }

  // OutcomeSink (one call per attempt)
  void on_outcome(const Task& task, const Outcome& outcome) override;
  void on_input_error(const std::string& message) override { out_.on_input_error(message); }

  // After run_tasks returned: reports tasks still held, ends attempts cut
  // short by a signal or an error as interrupted, and flushes the ledger.
  // `run_error`: why run_tasks stopped early ("" when it did not).
  Status finish(const std::string& run_error = "");
  // SIGINT/SIGTERM arrived: the run stops at the next turn (0: none).
  int stop_signal() const;
  const FlowReport& report() const { return report_; }
  // Whether the circuit breaker now suspects a handler outage (--metrics).
  bool breaker_open() const { return breaker_.open(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Tracked {
    Task task;                 // task.ref is the key of tracked_
    std::string sha256;
    std::string payload_id;    // key + hash, for the breaker
    std::int64_t task_id = 0;  // ledger id (0 until first started, or without a store)
    bool running = false;      // handed out, its outcome not yet in
    std::size_t openings_at_start = 0;  // the breaker's times_opened() when it was handed out
    bool lost = false;         // the back end lost it while it ran: its outcome is ignored
    std::uint32_t attempts = 0;
    std::vector<store::AttemptSummary> history;
    bool probe = false;        // running as the breaker's probe
    bool suspect = false;      // its last attempt never finished: it runs alone
    bool released = false;     // a recheck released it once in this run (PendingDecision)
    // Parked, then quarantined by a decision whose rechecks failed alike
    // while a payload known to work worked: never taken back by an outage
    // that later fails the same way.
    bool convicted = false;
    bool fresh_budget = false; // gave up in an earlier run: old attempts stop counting
    bool rerun_outdated = false;  // ok under another version of the scripts: runs again (--rerun-outdated)
    std::uint32_t attempts_in_run = 0;
    std::uint32_t transient_in_run = 0;
    std::uint32_t outages_in_run = 0;  // its failures held as an outage's in this run
    std::uint32_t unread_in_run = 0;   // its failures without its payload read, in this run
    std::uint32_t slot_renewals = 0;  // counts_as_transient's count
    std::optional<Outcome> last_failure;
    std::string parked_reason;  // why it would be quarantined, while parked
    bool probe_copy = false;   // a copy run for an answer only: no attempt, no verdict.
                               // The breaker's known-good probe, or one of these two:
    bool check = false;        // the known-good check of the decision (pending_)
    std::string recheck_of;    // a recheck: a copy of a task parked with this fingerprint
  };
  // "Outage or poison?", decided before quarantining (docs/architecture.md,
  // 'Outages'): payloads judged poison with a fingerprint other payloads
  // share are parked until a known-good check and rechecks decide. Without
  // this, the breaker opening on a sorted folder's bad files took back
  // verdicts given a moment before and quarantined them again: two records,
  // two lines, for one bad input.
  struct PendingDecision {
    std::size_t parked = 0;       // tasks parked with this fingerprint
    Outcome example;              // the latest of their failures, for notices
    // The rechecks (copies of up to two distinct parked payloads) started
    // after a passing check: in flight (their refs), and the keys of those
    // that failed alike. Every recheck has to fail alike: one bad payload
    // among good ones caught in a brief outage must not convict them all.
    bool rechecking = false;
    std::set<std::uint64_t> rechecks;
    std::vector<std::string> failed_alike;
  };
  // A task this run judged poison, remembered (the latest few hundred) in
  // case a suspected outage shows the judgement was the outage's.
  struct JudgedPoison {
    Tracked task;              // as it was when judged
    std::int64_t record_id = 0;  // 0 without a store
    Outcome outcome;           // the failure it was judged on
  };
  // A verdict told once the back end answers the write that settles it: a
  // quarantine record's (the verdict names the record), or, from a back end
  // that tells where an ok went (Capabilities::tells_ok_when_settled), an ok.
  struct AwaitingAnswer {
    Outcome outcome;
    Verdict verdict;
  };

  // A start in the transaction left open for commit_turn(), and what its
  // task was before, for when the commit fails.
  struct OpenStart {
    std::uint64_t ref = 0;
    std::int64_t task_id_before = 0;
    std::uint32_t attempts_before = 0;
  };

  Status take_fresh(std::size_t want, std::vector<std::uint64_t>& starts);
  // A task skipped as already ok: its kept result, or why there is none, to
  // the sink (FlowSettings::done_results).
  void tell_done_result(const Task& task, std::int64_t task_id);
  // The scripts the handler's version is made of, for messages
  // ("parse_records.py", "a.py and b.py"), or "the handler".
  std::string versioned_scripts() const;
  std::uint64_t track(Task task, std::string sha256, std::optional<store::LedgerTask> known);
  void quarantine(Tracked& t, const Outcome& outcome, const std::string& reason);
  void settle(Tracked& t, const Outcome& outcome, Verdict verdict);
  // Another live pillbox process claimed the task (`claim`): not run here.
  void skip_running_elsewhere(const Task& task, const std::string& claim);
  // Why the task waits, for `pillbox tasks` (a retry due then, or held).
  void note_wait(const Tracked& t, std::int64_t next_retry_at_ms, bool held);
  void on_breaker_opened(const Outcome& outcome, bool probe_at_once = true);
  void release_held();
  void remember_poison(const Tracked& t, std::int64_t record_id, const Outcome& outcome);
  // The breaker opened: poison verdicts of this run with the outage's
  // fingerprint are taken back (their records released, audit-trailed) and
  // their tasks held like the rest.
  void take_back_outage_verdicts();
  // Nothing left can decide: the parked tasks' verdict stands (quarantined).
  void quarantine_parked();
  // Attempts of this run that failed with `fingerprint` (an outage's, or a
  // decision's that proved not poison) are not held against the payload.
  void uncharge_failures(Tracked& t, const std::string& fingerprint);
  void forget(std::uint64_t ref);
  // The back end no longer holds the task (BatchResult::lost): it leaves
  // the flow, told once; one running is forgotten when its outcome comes.
  void lose(const TaskLost& lost);
  // Counts the attempts of `starts` and makes the turn's effects durable,
  // then tells the verdicts that waited for it. `release_held`: the held ok
  // writes go too. `when`: kLeaveOpen leaves the transaction for
  // commit_turn() (prepare).
  Status flush(const std::vector<std::uint64_t>& starts, bool release_held = false,
               AttemptStore::Commit when = AttemptStore::Commit::kNow);
  // An effect of a task that ended ok: the back end may hold it back a few
  // turns (AttemptStore::add_ok), unless the attempt ran alone or a suspect
  // waits to.
  void add_ok(const Tracked& t, LedgerWrite write);
  // By when next() wants to be asked again, when it says kWait.
  std::optional<Clock::time_point> wake_at() const;
  static std::optional<Clock::time_point> wait_at_earliest(std::optional<Clock::time_point> a,
                                                           std::optional<Clock::time_point> b);
  Clock::time_point now() const { return settings_.clock ? settings_.clock() : Clock::now(); }
  std::string describe_outage() const;
  // The breaker's probes: a copy of a payload that succeeded in this run
  // when there is one (it tells an outage from a burst of poison in one
  // task), else the next fresh payload.
  Status start_probe(std::vector<std::uint64_t>& starts, Clock::time_point now);
  void on_probe_copy_outcome(Tracked& t, const Outcome& outcome);
  // The decision (PendingDecision): whether a task judged poison waits for
  // it (parked) rather than being quarantined now.
  bool waits_for_decision(const Outcome& outcome);
  // Starts the known-good check when a decision (or the window, below)
  // waits for one and a payload has succeeded in this run.
  void start_check_if_due();
  // The window would open the breaker with `fingerprint` (CircuitBreaker::
  // record's check_first): the known-good check decides first. Failing, it
  // opens the breaker; passing, the fingerprint is bad inputs' for now.
  void check_before_opening(const std::string& fingerprint);
  std::uint64_t start_copy(const Task& of, bool check, const std::string& recheck_of);
  void on_check_outcome(Tracked& t, const Outcome& outcome);
  void on_recheck_outcome(Tracked& t, const Outcome& outcome);
  // The decision for `fingerprint`: its parked tasks are quarantined (poison;
  // `verify`: the fingerprint is verified as the payloads' own) or run
  // again, their failures that way uncharged (not poison).
  void decide(const std::string& fingerprint, bool poison, bool verify);
  // The breaker opened: decisions give way to it (their parked tasks are held).
  void drop_decisions();
  // A failure with the outage's fingerprint, for its message: `outcome` when
  // it has it, else the latest such failure this flow still knows.
  Outcome outage_example(const Outcome& outcome) const;
  void remember_good(const Tracked& t);
  // While paused: a notice now and then, and the status line.
  void report_pause(Clock::time_point now, const Outcome* failed_probe);
  void stop_for_outage();
  // A back end that cannot stop (a worker): the breaker open longer than
  // --breaker-max-wait gives the held tasks back to the fleet, at once and
  // from then on, while this process goes on probing.
  void give_back_held();
  // Every task so far failed without reading its payload: stop now (exit 3).
  void stop_for_setup(const Outcome& example);
  // Gives `ref` back to the back end, unfinished (ReleaseTask), told as held
  // for `why`.
  void give_back(std::uint64_t ref, const std::string& why);
  // SIGINT/SIGTERM, or stopping(), with a back end that cannot stop:
  // nothing new is taken, what runs finishes, and every task that waits is
  // given back (give_back_waiting, each turn).
  void wind_down();
  void give_back_waiting(const std::string& why);
  // "; to let tasks read it, run with --share DIR ..." for a hidden file, else "".
  std::string share_hint() const;
  // The file of the host the failure shows the task could not see, "" when
  // none or when this payload already claimed one in this run: a second
  // claim is judged like any failure, so a poison pill that prints such a
  // line is not held for ever.
  std::string hidden_path_once(const Tracked& t, const Outcome& outcome);
  // While open for hidden_: another payload failing for a hidden file
  // confirms it, and the run stops at its next turn.
  void corroborate_hidden(const Tracked& t, const Outcome& outcome);

  FlowSettings settings_;
  TaskSource& inner_;
  VerdictSink& out_;
  AttemptStore& store_;
  const AttemptStore::Capabilities can_;  // what store_ can do
  QuarantineCallback on_quarantine_;
  CircuitBreaker breaker_;
  std::mt19937_64 rng_;

  std::map<std::uint64_t, Tracked> tracked_;   // every task not yet settled, by ref
  TaskSchedule schedule_;                      // where those not running wait
  // Payload ids of tracked tasks (repeats are skipped where the back end
  // merges them; a broker's twin deliveries are tracked both).
  std::multiset<std::string> active_payloads_;
  std::size_t in_flight_ = 0;
  std::set<std::uint64_t> starting_;           // started, not yet answered by the back end
  bool lost_since_prepare_ = false;            // a task lost (lose): its slot is free for the next turn
  std::vector<std::uint64_t> stopped_;         // lost while running, their children to kill (take_stopped)
  bool slot_free_ = true;                      // the last prepare() had a slot for a new start
  bool inner_done_ = false;
  bool winding_down_ = false;        // wind_down()
  bool inner_waiting_ = false;
  std::optional<Clock::time_point> inner_wake_at_;  // the inner source's, with its last kWait
  std::uint64_t next_ref_ = 0;
  Outcome outage_example_;
  std::string hidden_;               // the file of the host the open breaker's tasks could not see
  bool stop_at_next_turn_ = false;   // the breaker is open for hidden_, and no probe can end it
  std::set<std::string> hidden_path_claimed_;  // payload ids whose failure the hidden-path rule took at its word
  std::optional<Task> known_good_;   // a payload that succeeded in this run (small ones only)
  std::map<std::string, PendingDecision> pending_;  // by fingerprint
  std::uint64_t check_ref_ = 0;      // the known-good check in flight, 0: none
  std::set<std::string> window_checks_;  // fingerprints the window would open with, waiting for the check
  bool any_success_ = false;         // a task ended ok in this run (known_good_ keeps small ones only)
  std::string checked_with_;         // the key of the latest check's payload
  // The setup rule: distinct payloads that failed without reading their
  // payload, and whether any task showed the command works (ended ok, or
  // failed after reading its payload).
  std::set<std::string> unread_failures_;
  bool command_works_ = false;
  std::string hold_reason_ = "held by a suspected handler outage; runs again in the next run over the same store";
  std::deque<JudgedPoison> judged_poison_;
  Clock::time_point last_pause_notice_{};
  std::string crash_hook_;
  Status fatal_;                // a ledger write failed: the run stops
  StopSignals stop_signals_;

  std::vector<OpenStart> open_starts_;                 // the starts the back end holds open
  std::map<std::uint64_t, AwaitingAnswer> awaiting_answer_;  // by ref
  // Tells the verdict `ref` waited for (awaiting_answer_), completed by
  // `complete`, and forgets the task; false when none waited.
  bool tell_answered(std::uint64_t ref, const std::function<void(Verdict&)>& complete);
  FlowReport report_;
};

}  // namespace pillbox
