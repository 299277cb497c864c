// What a store holds, as Prometheus gauges (supervisor/metrics/store_metrics.h):
// a real SQLite store in a scratch directory, filled with plain SQL.
#include <doctest/doctest.h>

#include <optional>
#include <string>

#include "supervisor/metrics/store_metrics.h"
#include "supervisor/store/database.h"
#include "supervisor/store/store.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox;
using namespace pillbox::metrics;

namespace {

struct StoreEnv {
  pillbox::test::ScratchDir scratch{"store-metrics"};
  std::optional<store::Store> store;

  StoreEnv() {
    auto opened = store::Store::open(scratch.path + "/store");
    REQUIRE_MESSAGE(opened.has_value(), opened.error());
    store.emplace(std::move(*opened));
  }

  void sql(const std::string& text) {
    auto s = store->db().exec(text);
    REQUIRE_MESSAGE(s.is_ok(), s.message());
  }

  void task(int id, const std::string& state) {
    sql("INSERT INTO tasks (id, job, key, payload_sha256, payload_size, state, updated_at) VALUES (" +
        std::to_string(id) + ", 'job', 'k" + std::to_string(id) + "', 'h" + std::to_string(id) + "', 1, '" + state +
        "', 0)");
  }

  // A record of task `task_id`; `kind` is SQL (a literal, or an expression).
  void record(int task_id, const std::string& kind_sql, const std::string& fingerprint, const std::string& status) {
    sql("INSERT OR IGNORE INTO payloads (sha256, size, data, created_at) VALUES ('p', 1, x'53', 0)");
    sql("INSERT INTO quarantine (task_id, key, source, handler, handler_identity, handler_args, exec_argv, "
        "policy_identity, policy, payload_sha256, payload_size, kind, fingerprint, crash_state, message, signal, "
        "syscall, exit_code, cpu_ms, wall_ms, max_rss_kb, status, created_at, updated_at) VALUES (" +
        std::to_string(task_id) + ", 'k', 'run', 'echo', 'echo', '{}', '[]', 'p', 'p', 'p', 1, " + kind_sql + ", '" +
        fingerprint + "', '', '', 11, '', 0, 0, 0, 0, '" + status + "', 0, 0)");
  }

  std::string render() {
    MetricsText text;
    auto s = write_store_metrics(store->db(), text);
    REQUIRE_MESSAGE(s.is_ok(), s.message());
    return text.text();
  }
};

bool has(const std::string& text, const std::string& line) { return text.find(line + "\n") != std::string::npos; }

}  // namespace

TEST_CASE("store metrics: records by status and kind, every status and kind present, 0 where none") {
  StoreEnv env;
  for (int i = 1; i <= 6; ++i) env.task(i, i <= 4 ? "quarantined" : i == 5 ? "ok" : "pending");
  env.task(7, "gave-up");
  env.record(1, "'crash'", "pb1-a", "quarantined");
  env.record(2, "'crash'", "pb1-a", "quarantined");
  env.record(3, "'crash'", "pb1-b", "resolved");
  env.record(4, "'cpu-limit'", "pb1-c", "quarantined");
  const std::string t = env.render();
  INFO(t);
  CHECK(has(t, "# TYPE pillbox_quarantine_records gauge"));
  CHECK(has(t, "pillbox_quarantine_records{status=\"quarantined\",kind=\"crash\"} 2"));
  CHECK(has(t, "pillbox_quarantine_records{status=\"resolved\",kind=\"crash\"} 1"));
  CHECK(has(t, "pillbox_quarantine_records{status=\"quarantined\",kind=\"cpu-limit\"} 1"));
  CHECK(has(t, "pillbox_quarantine_records{status=\"discarded\",kind=\"oom\"} 0"));
  CHECK(has(t, "pillbox_quarantine_records{status=\"replaying\",kind=\"sandbox-error\"} 0"));
  CHECK(has(t, "pillbox_quarantine_records{status=\"allowed\",kind=\"crash\"} 0"));  // reviewed, none yet
  CHECK(t.find("kind=\"ok\"") == std::string::npos);  // an ok task is never quarantined
  CHECK(has(t, "pillbox_quarantine_fingerprints 3"));
  CHECK(has(t, "pillbox_store_tasks{state=\"quarantined\"} 4"));
  CHECK(has(t, "pillbox_store_tasks{state=\"ok\"} 1"));
  CHECK(has(t, "pillbox_store_tasks{state=\"pending\"} 1"));
  CHECK(has(t, "pillbox_store_tasks{state=\"gave-up\"} 1"));
}

TEST_CASE("store metrics: an empty store shows every series at 0") {
  StoreEnv env;
  const std::string t = env.render();
  INFO(t);
  CHECK(has(t, "pillbox_quarantine_records{status=\"quarantined\",kind=\"crash\"} 0"));
  CHECK(has(t, "pillbox_quarantine_fingerprints 0"));
  CHECK(has(t, "pillbox_store_tasks{state=\"pending\"} 0"));
}

TEST_CASE("store metrics: a kind this pillbox does not know, written by a hostile hand, is shown escaped") {
  StoreEnv env;
  env.task(1, "quarantined");
  env.record(1, "'x\"} 1' || char(10) || 'pillbox_evil 1 ' || cast(x'ff5c' AS TEXT)", "pb1-z", "quarantined");
  const std::string t = env.render();
  INFO(t);
  CHECK(has(t, "pillbox_quarantine_records{status=\"quarantined\",kind=\"x\\\"} 1\\npillbox_evil 1 \xEF\xBF\xBD\\\\\"} 1"));
  CHECK(t.find("\npillbox_evil") == std::string::npos);  // no line of its own
}

TEST_CASE("store metrics: a database that is not a pillbox store is an error, and nothing is written") {
  pillbox::test::ScratchDir scratch("store-metrics-bare");
  auto db = store::Database::open(scratch.path + "/empty.db");
  REQUIRE_MESSAGE(db.has_value(), db.error());
  MetricsText text;
  text.family("pillbox_before", "Kept.", MetricType::kGauge);
  const std::string before = text.text();
  const Status s = write_store_metrics(*db, text);
  CHECK_FALSE(s.is_ok());
  CHECK(s.message().find("cannot read the store") != std::string::npos);
  CHECK(text.text() == before);
  // The read transaction was ended: the connection is usable again.
  CHECK(db->exec("CREATE TABLE t (x)").is_ok());
}
