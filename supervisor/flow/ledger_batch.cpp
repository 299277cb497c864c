#include "supervisor/flow/ledger_batch.h"

#include <algorithm>
#include <set>
#include <utility>

#include "supervisor/store/quarantine_entry.h"
#include "supervisor/store/quarantine_json.h"

namespace pillbox {
namespace {

// One write inside the open transaction; each adds its result, if any.
class Writer {
 public:
  Writer(store::Ledger& ledger, store::QuarantineStore& quarantine, const BatchContext& context, std::int64_t now,
         BatchResult& result)
      : ledger_(ledger), quarantine_(quarantine), context_(context), now_(now), result_(result) {}

  Status operator()(const StartAttempt& w) {
    if (w.new_task) {
      auto made = ledger_.start_new_task(w.key, w.sha256, w.payload_size, now_, w.solo);
      if (!made) return Status::error(made.error());
      if (*made) {
        result_.started.push_back({w.ref, (*made)->task_id, (*made)->n, (*made)->state, ""});
        return Status::ok();
      }
    }
    auto started = ledger_.start_attempt(w.key, w.sha256, w.payload_size, now_, w.solo, w.fresh_budget, w.rerun_ok);
    if (!started) return Status::error(started.error());
    result_.started.push_back({w.ref, started->task_id, started->n, started->state, started->claimed_elsewhere});
    return Status::ok();
  }
  Status operator()(const EndAttempt& w) {
    return ledger_.end_attempt(w.task_id, w.n, now_, w.outcome.kind, w.outcome.fingerprint, w.outcome.message, w.charged,
                               w.stderr_tail);
  }
  Status operator()(const UnchargeAttempt& w) { return ledger_.uncharge(w.task_id, w.n); }
  Status operator()(const SetTaskState& w) { return ledger_.set_state(w.task_id, w.state, now_); }
  Status operator()(const KeepResult& w) {
    if (context_.results == nullptr || context_.keep_results == 0) return Status::ok();
    kept_results_ = true;
    return context_.results->keep(w.task_id, w.output, context_.keep_results, now_);
  }
  // After the batch's writes: over --keep-results, the oldest results go.
  // One read of the running total when under it.
  bool kept_results() const { return kept_results_; }
  void set_kept_results() { kept_results_ = true; }
  Status evict_results() {
    if (!kept_results_) return Status::ok();
    auto evicted = context_.results->evict_over(context_.keep_results);
    return evicted ? Status::ok() : Status::error(evicted.error());
  }
  Status operator()(const SetTaskWait& w) { return ledger_.set_wait(w.task_id, w.next_retry_at_ms, w.held); }
  Status operator()(const ReleaseClaims&) { return ledger_.release_claims(); }
  Status operator()(const ReleaseTask& w) { return ledger_.release_claim(w.task_id); }

  Status operator()(const QuarantinePayload& w) {
    store::QuarantineEntry entry = make_quarantine_entry(context_.identity, w.outcome, w.key, w.sha256,
                                                         static_cast<std::int64_t>(w.payload.size()), "run");
    entry.task_id = w.task_id;
    auto inserted = quarantine_.insert(entry, w.payload, now_, context_.actor);
    if (!inserted) return Status::error(inserted.error());
    QuarantineWritten done{w.ref, inserted->id, inserted->new_fingerprint, inserted->folded, "", ""};
    if (!inserted->folded && !inserted->existing) {
      if (auto s = quarantine_.audit(inserted->id, now_, context_.actor, "quarantined",
                                     w.reason + " (attempt " + std::to_string(w.attempts) + ")");
          !s) {
        return s;
      }
      store::QuarantineRecord record;
      record.id = inserted->id;
      record.entry = std::move(entry);
      record.status = store::RecordStatus::kQuarantined;
      record.created_at = record.updated_at = now_;
      // The attempt ends of this batch, written before this, are counted.
      auto tally = quarantine_.attempt_tally(w.task_id);
      if (!tally) return Status::error(tally.error());
      done.record_json = quarantine_record_json(record, w.attempts, inserted->new_fingerprint, context_.store_dir, &*tally);
    }
    result_.quarantined.push_back(std::move(done));
    return ledger_.set_state(w.task_id, store::TaskState::kQuarantined, now_);
  }

  Status operator()(const TakeBackRecord& w) {
    auto released = quarantine_.take_back(w.record_id, now_, context_.actor, "released", w.detail);
    if (!released) return Status::error(released.error());
    if (!*released) return Status::ok();  // an operator acted on it meanwhile: theirs stands
    return ledger_.set_state(w.task_id, store::TaskState::kPending, now_);
  }

 private:
  store::Ledger& ledger_;
  store::QuarantineStore& quarantine_;
  const BatchContext& context_;
  const std::int64_t now_;
  BatchResult& result_;
  bool kept_results_ = false;
};

// The task a write is about (0: none, or a task not yet in the ledger).
std::int64_t task_of(const LedgerWrite& w) {
  return std::visit(
      [](const auto& x) -> std::int64_t {
        if constexpr (requires { x.task_id; }) return x.task_id;
        return 0;
      },
      w);
}

bool told_when_durable(const LedgerWrite& w) {
  return std::holds_alternative<QuarantinePayload>(w) || std::holds_alternative<TakeBackRecord>(w) ||
         std::holds_alternative<ReleaseClaims>(w) || std::holds_alternative<ReleaseTask>(w);
}

}  // namespace

Expected<BatchResult> LedgerBatch::apply(store::Ledger& ledger, store::QuarantineStore& quarantine,
                                         const BatchContext& context, Commit when) {
  // One transaction at a time: what an earlier apply() left open commits
  // first. If that fails, this batch's starts go too: their tasks do not run.
  if (auto s = commit_open(ledger, quarantine, context); !s) {
    std::erase_if(writes_, [](const LedgerWrite& w) { return std::holds_alternative<StartAttempt>(w); });
    return Error{s.message()};
  }
  std::vector<LedgerWrite> writes = std::exchange(writes_, {});
  BatchResult result;
  if (writes.empty()) return result;
  auto failed = [&](const std::string& message) -> Expected<BatchResult> {
    ledger.rollback();
    keep_after_failure(writes);
    return Error{message};
  };
  const bool leave_open =
      when == Commit::kLeaveOpen && std::none_of(writes.begin(), writes.end(), [](const LedgerWrite& w) {
        return told_when_durable(w);
      });
  // Now: the starts, and every write of a task they start (a retry's wait,
  // an uncharge), in order; with kLeaveOpen the rest waits for commit_open.
  std::set<std::int64_t> started;
  for (const LedgerWrite& w : writes) {
    if (const auto* start = std::get_if<StartAttempt>(&w); start != nullptr && start->task_id != 0) {
      started.insert(start->task_id);
    }
  }
  std::vector<bool> written(writes.size(), false);
  if (auto s = ledger.begin(); !s) return failed(s.message());
  Writer writer(ledger, quarantine, context, store::now_ms(), result);
  for (std::size_t i = 0; i < writes.size(); ++i) {
    const LedgerWrite& w = writes[i];
    if (leave_open && !std::holds_alternative<StartAttempt>(w) && started.count(task_of(w)) == 0) continue;
    if (auto s = std::visit(writer, w); !s) return failed(s.message());
    written[i] = true;
  }
  if (leave_open) {
    open_writes_ = std::move(writes);
    open_written_ = std::move(written);
    open_kept_results_ = writer.kept_results();
    return result;
  }
  if (auto s = writer.evict_results(); !s) return failed(s.message());
  if (auto s = ledger.commit(); !s) return failed(s.message());
  return result;
}

Status LedgerBatch::commit_open(store::Ledger& ledger, store::QuarantineStore& quarantine,
                                const BatchContext& context) {
  if (open_writes_.empty()) return Status::ok();
  std::vector<LedgerWrite> writes = std::exchange(open_writes_, {});
  std::vector<bool> written = std::exchange(open_written_, {});
  auto failed = [&](const Status& s) {
    ledger.rollback();
    keep_after_failure(writes);
    return s;
  };
  // Nothing else may have ended it: the writes below would then run one by
  // one, outside any transaction, and a failure could not undo them.
  if (!ledger.in_batch()) return failed(Status::error("store: the turn's transaction ended before its commit"));
  BatchResult unused;  // what is left are ends, states, results: they return nothing
  Writer writer(ledger, quarantine, context, store::now_ms(), unused);
  if (std::exchange(open_kept_results_, false)) writer.set_kept_results();
  for (std::size_t i = 0; i < writes.size(); ++i) {
    if (written[i]) continue;
    if (auto s = std::visit(writer, writes[i]); !s) return failed(s);
  }
  if (auto s = writer.evict_results(); !s) return failed(s);
  if (auto s = ledger.commit(); !s) return failed(s);
  return Status::ok();
}

void LedgerBatch::keep_after_failure(std::vector<LedgerWrite>& written) {
  std::vector<LedgerWrite> kept;
  for (LedgerWrite& w : written) {
    if (!std::holds_alternative<StartAttempt>(w)) kept.push_back(std::move(w));
  }
  for (LedgerWrite& w : writes_) kept.push_back(std::move(w));
  writes_.swap(kept);
}

}  // namespace pillbox
