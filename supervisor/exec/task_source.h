#pragma once
// What the dispatcher (supervisor/exec/dispatcher.h) runs: a Task, and the
// TaskSource it asks for them. Sources are the inputs of `run`
// (supervisor/flow/input_source.h), the task flow that retries them
// (supervisor/flow/task_flow.h) and the fleet's stream (supervisor/broker/).
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"

namespace pillbox {

struct Task {
  std::string key;
  std::string payload;
  std::uint64_t ref = 0;  // the task flow's handle on its bookkeeping (0: none)
  // Set by the reader of JSON lines, which hashes every payload anyway (to
  // tell repeats apart), so that the flow does not hash it again; "" when
  // the source did not.
  std::string payload_sha256{};
  // A JSON line whose key an earlier line gave another payload: both run,
  // and this one's --out file name carries its payload hash
  // (result_file_name_for).
  bool key_reused = false;
  // A JSON line with the same key and payload as line `repeat_of_line`
  // (0: none): one task, run once.
  std::uint64_t repeat_of_line = 0;
  // A broker's id of this delivery (a stream entry's id), by which its back
  // end knows the task again (AttemptStore::find); "" for run's inputs.
  std::string source_id{};
  // A copy run for an answer only (the task flow's probe or check of a
  // payload): no attempt of any task, no verdict (metrics do not count it).
  bool probe_copy = false;
};

class TaskSource {
 public:
  struct Item {
    enum class Type { kTask, kWait, kEnd, kError };
    Type type = Type::kEnd;
    Task task;
    std::string error;  // kError: one line, names the input (stdin:12: ...)
    // kTask: a warning about it to show before it runs, one line naming the
    // input ("stdin:7: key 'a' ... line 3"); not an error.
    std::string notice;
    // kWait: ask again at this time at the latest (now or past: at once),
    // even if no fd of wait_fds() became readable. The dispatcher owns the
    // clock of the wait; sources arm no timers of their own.
    std::optional<std::chrono::steady_clock::time_point> wake_at;
  };
  virtual ~TaskSource() = default;
  // Never blocks: kWait means "poll wait_fds() until one is readable or
  // wake_at comes, then ask again". The dispatcher also asks again whenever
  // anything else happens (a task ended, a slot came free).
  virtual Item next() = 0;
  virtual int wait_fd() const { return -1; }
  // Everything whose readability may end a kWait (default: wait_fd()).
  virtual std::vector<int> wait_fds() const {
    const int fd = wait_fd();
    return fd >= 0 ? std::vector<int>{fd} : std::vector<int>{};
  }
  // Called by the dispatcher at the top of each turn with the number of free
  // slots, before it asks next(): a source that must make its tasks durable
  // before they run (the ledger) does it here, for the whole turn at once.
  // An error ends the run.
  virtual Status prepare(std::size_t /*free_slots*/) { return Status::ok(); }
  // Called by the dispatcher once per turn, after it handed this turn's
  // tasks (next()) to the launcher and before it reads any child's wire: no
  // child of the turn has its payload yet. A source that left the turn's
  // transaction open in prepare() commits it here, so that the commit runs
  // while the children fork instead of before. An error ends the run, and
  // no child gets its payload.
  virtual Status commit_turn() { return Status::ok(); }
};

}  // namespace pillbox
