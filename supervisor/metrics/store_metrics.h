#pragma once
// What a store holds, as Prometheus gauges (metrics_text.h): quarantine
// records by status and kind, distinct fingerprints, tasks by state. The
// body of `GET /metrics` on `pillbox serve`, and the store's part of
// `run --metrics` (live_metrics.h).
//
// Read-only, in one read transaction (the numbers agree with each other),
// on a connection of the caller's: under WAL it never blocks a run writing
// the same store. What it costs on a large store: records by status and
// kind read every quarantine row (bounded by --quarantine-limit, 100000 by
// default); fingerprints come from the quarantine_by_fingerprint index
// alone; tasks by state read every task row (no index on tasks.state: one
// would be written on every verdict of every run to serve a scrape).
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "shared/status.h"
#include "supervisor/metrics/metrics_text.h"
#include "supervisor/store/database.h"
#include "supervisor/store/store.h"

namespace pillbox::metrics {

// Appends the families to `out`: pillbox_quarantine_records{status,kind}
// (every status and every failure kind, 0 where there is none; a kind or
// status the store holds that this pillbox does not know is shown too),
// pillbox_quarantine_fingerprints, pillbox_store_tasks{state} (every state).
// Errors: the database cannot be read (not a pillbox store, closed, older
// schema); `out` is then unchanged.
Status write_store_metrics(store::Database& db, MetricsText& out);

// Records counted by (status, kind).
using RecordCounts = std::map<std::pair<std::string, std::string>, std::int64_t>;
// The quarantine's families: pillbox_quarantine_records{status,kind} (as
// above: every known status and kind, 0 where none, unknown ones kept) and
// pillbox_quarantine_fingerprints. The store's, and the fleet's dead letters
// on `pillbox serve --redis` (supervisor/serve/fleet_console_source.h).
void write_quarantine_families(MetricsText& out, const RecordCounts& records, std::int64_t fingerprints);

// The whole answer for a store alone: write_store_metrics's text.
Expected<std::string> render_store_metrics(store::Store& store);

}  // namespace pillbox::metrics
