#include "supervisor/flow/ledger_batch.h"

#include "supervisor/ops/quarantine_entry.h"
#include "supervisor/ops/quarantine_json.h"

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
    return ledger_.end_attempt(w.task_id, w.n, now_, w.kind, w.fingerprint, w.message, w.charged, w.stderr_tail);
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
  Status evict_results() {
    if (!kept_results_) return Status::ok();
    auto evicted = context_.results->evict_over(context_.keep_results);
    return evicted ? Status::ok() : Status::error(evicted.error());
  }
  Status operator()(const SetTaskWait& w) { return ledger_.set_wait(w.task_id, w.next_retry_at_ms, w.held); }
  Status operator()(const ReleaseClaims&) { return ledger_.release_claims(); }

  Status operator()(const QuarantinePayload& w) {
    store::QuarantineEntry entry = make_quarantine_entry(context_.identity, w.outcome, w.key, w.sha256,
                                                         static_cast<std::int64_t>(w.payload.size()), "run");
    entry.task_id = w.task_id;
    auto inserted = quarantine_.insert(entry, w.payload, now_, context_.actor);
    if (!inserted) return Status::error(inserted.error());
    QuarantineWritten done{w.ref, inserted->id, inserted->new_fingerprint, inserted->folded, ""};
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

}  // namespace

Expected<BatchResult> LedgerBatch::apply(store::Ledger& ledger, store::QuarantineStore& quarantine,
                                         const BatchContext& context, Commit when) {
  // One transaction at a time: what an earlier apply() left open commits first.
  if (auto s = commit_open(ledger); !s) return Error{s.message()};
  std::vector<LedgerWrite> writes;
  writes.swap(writes_);
  BatchResult result;
  if (writes.empty()) return result;
  // On failure the batch keeps what it was to record (a later apply may
  // still succeed), but not its starts: the tasks they were for do not run.
  auto failed = [&](const std::string& message) -> Expected<BatchResult> {
    ledger.rollback();
    keep_after_failure(writes);
    return Error{message};
  };
  if (auto s = ledger.begin(); !s) return failed(s.message());
  Writer writer(ledger, quarantine, context, store::now_ms(), result);
  bool told_when_durable = false;
  for (const LedgerWrite& w : writes) {
    if (auto s = std::visit(writer, w); !s) return failed(s.message());
    told_when_durable = told_when_durable || std::holds_alternative<QuarantinePayload>(w) ||
                        std::holds_alternative<TakeBackRecord>(w) || std::holds_alternative<ReleaseClaims>(w);
  }
  if (auto s = writer.evict_results(); !s) return failed(s.message());
  if (when == Commit::kLeaveOpen && !told_when_durable) {
    open_writes_ = std::move(writes);
    return result;
  }
  if (auto s = ledger.commit(); !s) return failed(s.message());
  return result;
}

Status LedgerBatch::commit_open(store::Ledger& ledger) {
  if (open_writes_.empty()) return Status::ok();
  std::vector<LedgerWrite> written;
  written.swap(open_writes_);
  if (auto s = ledger.commit(); !s) {
    keep_after_failure(written);
    return s;
  }
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
