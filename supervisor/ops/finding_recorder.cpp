#include "supervisor/ops/finding_recorder.h"

#include "shared/sha256.h"
#include "supervisor/store/quarantine_entry.h"

namespace pillbox {

Expected<FindingRecorder> FindingRecorder::open(store::Database& db, store::QuarantineStore& quarantine,
                                                RunIdentity identity, std::string source, std::string actor) {
  auto ledger = store::Ledger::open(db, identity.handler_identity, identity.policy_identity);
  if (!ledger) return Error{ledger.error()};
  return FindingRecorder(quarantine, std::move(*ledger), std::move(identity), std::move(source), std::move(actor));
}

Expected<RecordedFinding> FindingRecorder::record(const Finding& f, const std::string& audit_detail) {
  const std::string sha = sha256_hex(f.payload);
  const auto size = static_cast<std::int64_t>(f.payload.size());
  const std::string kind(to_string(f.outcome.kind));
  if (auto s = ledger_.begin(); !s) return Error{s.message()};
  // Every error path below rolls back explicitly: the ledger is a member,
  // and its next begin() would join a transaction left open.
  auto fail = [&](const std::string& message) -> Expected<RecordedFinding> {
    ledger_.rollback();
    return Error{message};
  };
  if (f.repeat_if_fingerprint_open && !f.outcome.fingerprint.empty()) {
    auto counted = quarantine_->add_repeats(f.outcome.fingerprint, 1, f.ended_ms, actor_, "");
    if (!counted) return fail(counted.error());
    if (*counted != 0) {
      if (auto s = ledger_.commit(); !s) return fail(s.message());
      RecordedFinding result;
      result.repeat_of = *counted;
      return result;
    }
  }
  auto started = ledger_.start_attempt(f.key, sha, size, f.started_ms, f.solo);
  if (!started) return fail(started.error());
  RecordedFinding result;
  if (started->n == 0 && !started->claimed_elsewhere.empty()) {
    return fail("task " + f.key + " is being run right now by another pillbox process (" +
                started->claimed_elsewhere + "); record the finding again once that run has ended");
  }
  if (started->n == 0) {
    // Finished before under this handler and policy. With a record that is
    // not resolved, it is on file already (a discarded one too: the
    // operator decided). Otherwise (done, or its record resolved since) a
    // failure now is a regression, recorded like any new one.
    store::ListFilter same_key;
    same_key.key = f.key;
    auto records = quarantine_->list(same_key);
    if (!records) return fail(records.error());
    for (const auto& r : *records) {
      if (r.entry.task_id == started->task_id && r.status != store::RecordStatus::kResolved) {
        result.already = started->state;
        result.record_id = r.id;
        ledger_.rollback();
        return result;
      }
    }
    if (auto s = ledger_.set_state(started->task_id, store::TaskState::kPending, f.started_ms); !s) {
      return fail(s.message());
    }
    started = ledger_.start_attempt(f.key, sha, size, f.started_ms, f.solo);
    if (!started) return fail(started.error());
  }
  if (auto s = ledger_.end_attempt(started->task_id, started->n, f.ended_ms, kind, f.outcome.fingerprint,
                                   f.outcome.message, /*charged=*/true, f.outcome.stderr_tail);
      !s) {
    return fail(s.message());
  }
  store::QuarantineEntry e = make_quarantine_entry(identity_, f.outcome, f.key, sha, size, source_);
  e.task_id = started->task_id;
  e.origin = f.origin;
  auto inserted = quarantine_->insert(e, f.payload, f.ended_ms, actor_);
  if (!inserted) return fail(inserted.error());
  result.record_id = inserted->id;
  result.new_fingerprint = inserted->new_fingerprint;
  result.folded = inserted->folded;
  if (!inserted->folded && !inserted->existing) {
    if (auto s = quarantine_->audit(inserted->id, f.ended_ms, actor_, "quarantined", audit_detail); !s) {
      return fail(s.message());
    }
  }
  if (auto s = ledger_.set_state(started->task_id, store::TaskState::kQuarantined, f.ended_ms); !s) {
    return fail(s.message());
  }
  if (auto s = ledger_.commit(); !s) return fail(s.message());
  return result;
}

Expected<std::int64_t> FindingRecorder::add_repeats(const std::string& fingerprint, std::int64_t n,
                                                    const std::string& detail) {
  if (auto s = ledger_.begin(); !s) return Error{s.message()};
  auto id = quarantine_->add_repeats(fingerprint, n, store::now_ms(), actor_, detail);
  if (!id) {
    ledger_.rollback();
    return Error{id.error()};
  }
  if (auto s = ledger_.commit(); !s) return Error{s.message()};
  return *id;
}

Status FindingRecorder::audit(std::int64_t record_id, const std::string& action, const std::string& detail) {
  if (auto s = ledger_.begin(); !s) return s;
  if (auto s = quarantine_->audit(record_id, store::now_ms(), actor_, action, detail); !s) {
    ledger_.rollback();
    return s;
  }
  return ledger_.commit();
}

}  // namespace pillbox
