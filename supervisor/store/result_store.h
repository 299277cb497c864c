#pragma once
// The results of ok tasks, kept so that a result printed nowhere is not
// lost (docs/architecture.md, The store). One row per task, bounded in total
// by --keep-results. The schema's triggers maintain the total
// (results_total), so keeping is one INSERT and eviction reads one row.
// Evicted rows stay, status 'evicted', so `pillbox results` can say so.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"
#include "supervisor/store/database.h"
#include "supervisor/store/statement.h"

namespace pillbox::store {

// The default of --keep-results: about a million results of a few hundred
// bytes; larger outputs want --out anyway.
inline constexpr std::uint64_t kDefaultKeepResultBytes = 256ull << 20;

enum class ResultStatus { kKept, kEvicted, kTooLarge };
inline constexpr ResultStatus kAllResultStatuses[] = {ResultStatus::kKept, ResultStatus::kEvicted,
                                                      ResultStatus::kTooLarge};
std::string_view to_string(ResultStatus status);

// Who made a kept result: the run that ended the task ok (record_id 0), or
// a `quarantine replay` that resolved the task's record, from the record's
// own payload (revision 0) or from a revision of an operator's patch.
struct ResultOrigin {
  std::int64_t record_id = 0;
  std::int64_t revision = 0;
  bool from_replay() const { return record_id != 0; }
};
// "run", "replay of record 7", "patch 2 of record 7": for people.
std::string describe(const ResultOrigin& origin);

struct StoredResult {
  std::int64_t task_id = 0;
  std::string job;             // the handler identity the task ran under
  std::string key;
  std::string payload_sha256;
  std::int64_t size = 0;       // of the result, kept or not
  ResultStatus status = ResultStatus::kKept;
  std::string data;            // when kept (and asked for)
  std::int64_t created_at = 0; // ms since the epoch
  ResultOrigin origin;
};

class ResultStore {
 public:
  static Expected<ResultStore> open(Database& db);

  // Inside the caller's transaction: the result of `task_id` (replacing an
  // earlier one), kept when it is at most `limit` bytes, else recorded as
  // too large. `limit` 0 is not a call: nothing is written then.
  Status keep(std::int64_t task_id, std::string_view bytes, std::uint64_t limit, std::int64_t now_ms,
              const ResultOrigin& origin = {});
  // Inside the caller's transaction: drops the result of `task_id` when a
  // replay of record `record_id` made it (a later replay of that record
  // failed again). Returns whether there was one.
  Expected<bool> forget_replayed(std::int64_t task_id, std::int64_t record_id);
  // Inside the caller's transaction: while the kept total is over `limit`,
  // the oldest kept results are evicted. Reads one row when under the limit.
  Expected<std::size_t> evict_over(std::uint64_t limit);

  // The result row of one task, with its bytes when kept; nullopt: no row
  // (the task never finished ok, or its result was not kept at all).
  Expected<std::optional<StoredResult>> of_task(std::int64_t task_id);
  // The states of the tasks with `key`, in any job run here (empty: no such
  // task), to tell an unknown key from one whose result is not kept.
  Expected<std::vector<std::string>> task_states(const std::string& key);
  // Every result row whose task has `key`, in any job, oldest task first.
  Expected<std::vector<StoredResult>> with_key(const std::string& key, bool with_data);
  // Every result row, oldest task first, one at a time (with_data: the kept
  // bytes too); an error from `each` stops the walk and is returned.
  Status for_each(bool with_data, const std::function<Status(const StoredResult&)>& each);
  // The bytes kept now.
  Expected<std::int64_t> kept_bytes();
  // Task `task_id`'s payload hash when an earlier task has the same key and
  // another payload ("" when none): such a result is named KEY~HASH.out
  // (result_files.h), by `run --out` and a replay's -o alike.
  Expected<std::string> reused_key_payload(std::int64_t task_id);

 private:
  explicit ResultStore(Database& db) : db_(&db) {}
  Status walk(Statement& stmt, bool with_data, const std::function<Status(StoredResult&)>& each);
  Expected<std::vector<StoredResult>> read_rows(Statement& stmt, bool with_data);

  Database* db_;
  Statement upsert_;
  Statement total_;
  Statement oldest_;
  Statement evict_;
  Statement of_task_;
  Statement forget_;
};

}  // namespace pillbox::store
