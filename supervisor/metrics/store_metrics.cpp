#include "supervisor/metrics/store_metrics.h"

#include <cstdint>
#include <map>
#include <utility>

#include "shared/failure_kind.h"
#include "supervisor/store/record_status.h"
#include "supervisor/store/statement.h"
#include "supervisor/store/task_state.h"

namespace pillbox::metrics {
namespace {

// Ends the read transaction however the queries went: nothing was written.
struct ReadTransaction {
  store::Database& db;
  bool open = false;
  ~ReadTransaction() {
    if (open) (void)db.exec("ROLLBACK");
  }
};

// Rows of (text, text, count) or (text, count) of `sql`, keyed by the text columns.
Status count_rows(store::Database& db, const char* sql, int keys,
                  std::map<std::pair<std::string, std::string>, std::int64_t>& counts) {
  auto stmt = store::Statement::prepare(db.handle(), sql);
  if (!stmt) return Status::error(stmt.error());
  return stmt->each_row([&] {
    std::pair<std::string, std::string> key{stmt->column_text(0), keys > 1 ? stmt->column_text(1) : ""};
    counts[key] += stmt->column_int(keys);
  });
}

}  // namespace

Status write_store_metrics(store::Database& db, MetricsText& out) {
  ReadTransaction read{db};
  // Deferred: takes no lock until the first read, and only a read lock then.
  if (auto s = db.exec("BEGIN"); !s) return Status::error("cannot read the store: " + s.message());
  read.open = true;
  RecordCounts records;
  if (auto s = count_rows(db, "SELECT status, kind, count(*) FROM quarantine GROUP BY status, kind", 2, records); !s) {
    return Status::error("cannot read the store's quarantine: " + s.message());
  }
  auto fingerprints = db.query_int("SELECT count(DISTINCT fingerprint) FROM quarantine");
  if (!fingerprints) return Status::error("cannot read the store's quarantine: " + fingerprints.error());
  std::map<std::pair<std::string, std::string>, std::int64_t> tasks;
  if (auto s = count_rows(db, "SELECT state, count(*) FROM tasks GROUP BY state", 1, tasks); !s) {
    return Status::error("cannot read the store's tasks: " + s.message());
  }

  std::map<std::pair<std::string, std::string>, std::int64_t> all_tasks;
  for (const auto state : store::kAllTaskStates) all_tasks[{std::string(store::to_string(state)), ""}] = 0;
  for (const auto& [key, n] : tasks) all_tasks[key] += n;

  MetricsText text;
  write_quarantine_families(text, records, *fingerprints);
  text.family("pillbox_store_tasks", "Tasks in the store's ledger, by state.", MetricType::kGauge);
  for (const auto& [key, n] : all_tasks) {
    text.sample("pillbox_store_tasks", {{"state", key.first}}, static_cast<double>(n));
  }
  out.append(text);
  return Status::ok();
}

void write_quarantine_families(MetricsText& out, const RecordCounts& records, std::int64_t fingerprints) {
  // Every known status and kind, 0 where none, so a query sees each series
  // from the start; unknown ones (a newer pillbox's) are kept.
  std::map<std::pair<std::string, std::string>, std::int64_t> all_records;
  for (const auto status : store::kAllRecordStatuses) {
    for (const auto kind : kAllKinds) {
      if (kind == Kind::kOk) continue;  // an ok task is never quarantined
      all_records[{std::string(store::to_string(status)), std::string(to_string(kind))}] = 0;
    }
  }
  for (const auto& [key, n] : records) all_records[key] += n;
  out.family("pillbox_quarantine_records", "Quarantine records, by status and failure kind.", MetricType::kGauge);
  for (const auto& [key, n] : all_records) {
    out.sample("pillbox_quarantine_records", {{"status", key.first}, {"kind", key.second}}, static_cast<double>(n));
  }
  out.family("pillbox_quarantine_fingerprints", "Distinct failure fingerprints among the quarantine records.",
             MetricType::kGauge);
  out.sample("pillbox_quarantine_fingerprints", {}, static_cast<double>(fingerprints));
}

}  // namespace pillbox::metrics
