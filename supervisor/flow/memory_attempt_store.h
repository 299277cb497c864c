#pragma once
// The attempt engine's back end without a store (`run --no-store`,
// attempt_store.h): attempts are numbered as the engine counts them, for
// this run only, and nothing else is kept. The same rules apply; a poison payload is reported,
// not kept.
#include "supervisor/flow/attempt_store.h"

namespace pillbox {

class MemoryAttemptStore final : public AttemptStore {
 public:
  Capabilities capabilities() const override {
    Capabilities c;
    c.keeps_records = false;
    return c;
  }
  Expected<std::optional<store::LedgerTask>> find(const Task&, const std::string&) override {
    return std::optional<store::LedgerTask>{};
  }
  Expected<std::optional<store::StoredResult>> kept_result(std::int64_t) override {
    return std::optional<store::StoredResult>{};
  }
  Expected<std::string> record_payload(const std::string&) override { return Error{"no store: no records"}; }

  void add(LedgerWrite) override {}
  void add_ok(std::int64_t, LedgerWrite, bool, Clock::time_point) override {}
  Expected<BatchResult> apply(std::vector<StartAttempt> starts, bool, Commit, Clock::time_point) override {
    BatchResult result;
    for (const StartAttempt& s : starts) {
      StartedAttemptOf started;
      started.ref = s.ref;
      started.n = s.attempts_before + 1;
      result.started.push_back(started);
    }
    return result;
  }
  Status commit_turn() override { return Status::ok(); }
  bool turn_open() const override { return false; }
  bool has_unapplied() const override { return false; }
  bool idle() const override { return true; }
  std::optional<Clock::time_point> due_by() const override { return std::nullopt; }
};

}  // namespace pillbox
