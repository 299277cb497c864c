#pragma once
// A store's contents as Prometheus gauges: for `pillbox serve`'s /metrics
// and the store's part of `run --metrics`.
//
// Read-only, in one read transaction (the numbers agree), on the caller's
// connection: under WAL it never blocks a run writing the store. Cost:
// every quarantine row (bounded by --quarantine-limit) and every task row
// (no index on tasks.state: every verdict of every run would pay to write it
// to serve a scrape); fingerprints come from their index alone.
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "shared/status.h"
#include "supervisor/metrics/metrics_text.h"
#include "supervisor/store/database.h"

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
// The two quarantine families of write_store_metrics; also used for the
// fleet's dead letters on `pillbox serve --redis`
// (supervisor/serve/fleet_console_source.h).
void write_quarantine_families(MetricsText& out, const RecordCounts& records, std::int64_t fingerprints);

}  // namespace pillbox::metrics
