#pragma once
// The ledger's tasks as `pillbox tasks` shows them: the view splits the
// ledger's `pending` by the wait the run wrote (Ledger::set_wait).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "shared/status.h"
#include "supervisor/store/database.h"
#include "supervisor/store/result_store.h"

namespace pillbox::store {

enum class TaskView : std::uint8_t {
  kPending,      // never attempted, in flight, or cut short (interrupted, the supervisor lost)
  kRetrying,     // failed; a retry was scheduled at next_retry_at
  kHeld,         // its last failure was held uncharged by a suspected outage
  kGaveUp,
  kOk,
  kQuarantined,  // record_id names its quarantine record
};

inline constexpr TaskView kAllTaskViews[] = {TaskView::kPending, TaskView::kRetrying, TaskView::kHeld,
                                             TaskView::kGaveUp,  TaskView::kOk,       TaskView::kQuarantined};

std::string_view to_string(TaskView view);
std::optional<TaskView> task_view_from_string(std::string_view text);

struct TaskRow {
  std::int64_t id = 0;
  std::string job;              // the handler identity it runs under
  std::string key;
  std::string payload_sha256;
  std::int64_t payload_size = 0;
  TaskView view = TaskView::kPending;
  std::int64_t attempts = 0;
  std::string last_kind;        // "" before any attempt; "unfinished" while one runs or was lost
  std::string last_fingerprint;
  std::int64_t next_retry_at = 0;  // ms; 0: none
  std::int64_t record_id = 0;      // the newest quarantine record of the task; 0: none
  std::string claim;            // the process that claims it ("" when none)
  std::int64_t updated_at = 0;
  ResultOrigin result_origin;   // ok: who made its kept result (a run, or a replay of record_id)
};

struct TaskFilter {
  std::optional<TaskView> view;
  std::optional<std::string> key;
  std::optional<std::string> handler;  // the handler's name: echo, regex, exec, plugin:...
  std::int64_t limit = -1;             // -1: all
};

// Tasks in key order; `fn` returns false to stop.
Status each_task(Database& db, const TaskFilter& filter, const std::function<bool(const TaskRow&)>& fn);

// `pillbox tasks --forget`: removes the unfinished tasks `filter` selects,
// with their attempts, in one transaction; never one claimed or named by a
// record.
struct Forgotten {
  std::int64_t removed = 0;
  std::int64_t kept = 0;  // claimed by a run, or named by a quarantine record
};
Expected<Forgotten> forget_tasks(Database& db, const TaskFilter& filter);

// Releases the claims made on host `host`, whose runs are gone and cannot
// be checked from here (a retired machine). The caller refuses this host's
// own name: its claims are judged by their process. Returns how many.
Expected<std::int64_t> release_claims_of_host(Database& db, const std::string& host);

}  // namespace pillbox::store
