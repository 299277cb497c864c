#pragma once
// Where tasks come from: files, directories (recursive) and JSON lines on
// stdin, in the order given. Paths are checked before the run starts (a
// missing or unreadable input, or one that is not a regular file or a
// directory, is a usage error, not a failed task); entries of a directory
// that are not regular files (supervisor/io/input_files.h) come out as input
// errors where they sort. stdin is read on its own thread so a slow producer
// never stalls running tasks.
#include <chrono>
#include <cstdint>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "shared/task_input.h"
#include "supervisor/io/input_files.h"

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

// `inputs` are paths or "-" (JSON lines on `stdin_fd`); `symlinks` says
// whether symlinks below a named directory are followed (--follow-symlinks).
// Errors: one line, ready to print ("cannot read input 'x': No such file or
// directory", "input '/dev/zero' is a character device, not a regular file
// (...)").
Expected<std::unique_ptr<TaskSource>> open_inputs(const std::vector<std::string>& inputs, int stdin_fd = 0,
                                                  SymlinksInTree symlinks = SymlinksInTree::kRefuse);

// Parses one JSON line: {"key": "...", "payload": "text"} or {"payload_b64":
// "..."}. The key is a string; without one (or null) it is derived from the
// payload, "sha256:" and the first 16 hex digits of its SHA-256, so that it
// does not change when lines move. A key of another type is an error naming
// the line. Sets payload_sha256.
Expected<Task> parse_task_line(std::string_view line, std::uint64_t line_number);

// The key of a JSON line without one: "sha256:" + 16 hex digits of the payload's SHA-256.
std::string content_key(const std::string& payload_sha256);

}  // namespace pillbox
