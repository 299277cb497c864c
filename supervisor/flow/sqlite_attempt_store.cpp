#include "supervisor/flow/sqlite_attempt_store.h"

namespace pillbox {
namespace {

// How many ok tasks' writes are held back at most, and for how long (see
// held_ok_ in sqlite_attempt_store.h). Together they bound what a crash
// costs (the tasks that run again, alone) to 16 tasks, and to what ended in
// the last second. The time limit is a wake-up of its own (a transaction
// only for the held writes), so it is long: at 50 ms, slow tasks (strace'd
// echo, ~10 tasks/s) had their writes written alone, 25% more transactions
// than without holding. Measured on 200 echo tasks, --jobs 2, a fresh store
// (strace of the supervisor): 6.5 WAL pages written per task without
// holding (7.8 per transaction), 4.5 with it.
constexpr std::size_t kMaxHeldOk = 16;
constexpr std::chrono::milliseconds kMaxHeldOkFor{1000};

}  // namespace

Expected<std::optional<store::LedgerTask>> SqliteAttemptStore::find(const Task& task, const std::string& sha256) {
  auto found = ledger_.find(task.key, sha256);
  if (!found) return Error{found.error()};
  if (*found && held_ok_tasks_.count((*found)->id) > 0) {
    // Ended ok in this run, its writes held back: written now, so that the
    // ledger says what this run told.
    if (auto s = write_held_ok(); !s) return Error{s.message()};
    (*found)->state = store::TaskState::kOk;
  }
  return found;
}

Expected<std::optional<store::StoredResult>> SqliteAttemptStore::kept_result(std::int64_t task_id) {
  if (context_.results == nullptr) return std::optional<store::StoredResult>{};
  auto found = context_.results->of_task(task_id);
  if (!found) return Error{found.error()};
  return std::optional<store::StoredResult>{std::move(*found)};
}

Expected<std::string> SqliteAttemptStore::record_payload(const std::string& sha256) {
  return quarantine_.payloads().get(sha256);
}

void SqliteAttemptStore::add_ok(std::int64_t task_id, LedgerWrite write, bool may_hold, Clock::time_point now) {
  // No results kept here: not even copied.
  if (std::holds_alternative<KeepResult>(write) && (context_.results == nullptr || context_.keep_results == 0)) return;
  if (!may_hold && held_ok_tasks_.count(task_id) == 0) {
    batch_.add(std::move(write));
    return;
  }
  if (!held_ok_since_) held_ok_since_ = now;
  held_ok_tasks_.insert(task_id);
  held_ok_.add(std::move(write));
}

std::optional<AttemptStore::Clock::time_point> SqliteAttemptStore::due_by() const {
  if (!held_ok_since_) return std::nullopt;
  return *held_ok_since_ + kMaxHeldOkFor;
}

Status SqliteAttemptStore::commit_turn() {
  if (!batch_.open()) return Status::ok();
  return batch_.commit_open(ledger_, quarantine_, context_);
}

Status SqliteAttemptStore::write_held_ok() {
  if (held_ok_.empty()) return Status::ok();
  if (auto s = commit_turn(); !s) return s;
  auto result = held_ok_.apply(ledger_, quarantine_, context_);
  if (!result) return Status::error(result.error());
  held_ok_tasks_.clear();
  held_ok_since_.reset();
  return Status::ok();
}

Expected<BatchResult> SqliteAttemptStore::apply(std::vector<StartAttempt> starts, bool release_held, Commit when,
                                                Clock::time_point now) {
  if (auto s = commit_turn(); !s) return Error{s.message()};
  const bool release = !held_ok_.empty() && (release_held || held_ok_tasks_.size() >= kMaxHeldOk ||
                                              (held_ok_since_ && now - *held_ok_since_ >= kMaxHeldOkFor));
  if (release) {
    batch_.add_all(held_ok_);
    held_ok_tasks_.clear();
    held_ok_since_.reset();
  }
  for (StartAttempt& start : starts) batch_.add(std::move(start));
  if (batch_.empty()) return BatchResult{};
  return batch_.apply(ledger_, quarantine_, context_, when);
}

}  // namespace pillbox
