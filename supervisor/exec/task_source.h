#pragma once
// What the dispatcher runs: a Task, and the TaskSource it asks for them
// (run's inputs, the task flow, the fleet's stream).
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
  // Set when the source hashed the payload already (JSON lines), so the flow
  // does not hash it again; "" otherwise.
  std::string payload_sha256{};
  // An earlier JSON line gave this key another payload: both run, and this
  // one's --out name carries its hash (result_variant, result_files.h).
  bool key_reused = false;
  // A JSON line with the same key and payload as line `repeat_of_line`
  // (0: none): one task, run once.
  std::uint64_t repeat_of_line = 0;
  // A broker's delivery id (stream entry id; AttemptStore::find); "" for
  // run's inputs.
  std::string source_id{};
  // A copy run for an answer only (a probe or check): no attempt, no
  // verdict, not counted in metrics.
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
    // kWait: ask again at this time at the latest, even if no fd of
    // wait_fds() became readable. Sources arm no timers of their own.
    std::optional<std::chrono::steady_clock::time_point> wake_at;
  };
  virtual ~TaskSource() = default;
  // Never blocks: kWait means "poll wait_fds() until one is readable or
  // wake_at comes, then ask again" (the dispatcher also asks after any event).
  virtual Item next() = 0;
  virtual int wait_fd() const { return -1; }
  // Everything whose readability may end a kWait (default: wait_fd()).
  virtual std::vector<int> wait_fds() const {
    const int fd = wait_fd();
    return fd >= 0 ? std::vector<int>{fd} : std::vector<int>{};
  }
  // At the top of each turn, before next(): a source that must make its
  // tasks durable before they run (the ledger) does it here, for the whole
  // turn. An error ends the run.
  virtual Status prepare(std::size_t /*free_slots*/) { return Status::ok(); }
  // Once per turn, after the turn's tasks went to the launcher and before
  // any wire is read, so no child has its payload yet: a transaction left
  // open in prepare() commits here, while the children fork. An error ends
  // the run, and no child gets its payload.
  virtual Status commit_turn() { return Status::ok(); }
  // Once per turn, after commit_turn(): tasks handed out (Task::ref) whose
  // children must stop now, as another process runs them (the task flow's,
  // from a back end's TaskLost::stop_child). Each child is killed; its
  // outcome still comes to the sink, which knows it means nothing.
  virtual std::vector<std::uint64_t> take_stopped() { return {}; }
};

}  // namespace pillbox
