#pragma once
// A real store in a scratch directory, open with its quarantine and its task
// ledger (handler "handler-id", policy "policy-id"), for the unit tests over
// a store; each test's own Env adds what it needs on top.
#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <string>

#include "shared/sha256.h"
#include "supervisor/store/ledger.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/store.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox::test {

struct StoreFixture {
  ScratchDir scratch;
  std::string dir;  // the store's directory, inside scratch
  std::optional<store::Store> store;
  std::optional<store::QuarantineStore> qs;
  std::optional<store::Ledger> ledger;

  // `name` as for ScratchDir.
  explicit StoreFixture(const std::string& name, std::int64_t max_records = store::kDefaultMaxRecords)
      : scratch(name), dir(scratch.path + "/store") {
    auto opened = store::Store::open(dir);
    REQUIRE_MESSAGE(opened.has_value(), opened.error());
    store.emplace(std::move(*opened));
    auto q = store::QuarantineStore::open(store->db(), store->dir(), max_records);
    REQUIRE_MESSAGE(q.has_value(), q.error());
    qs.emplace(std::move(*q));
    auto l = store::Ledger::open(store->db(), "handler-id", "policy-id");
    REQUIRE_MESSAGE(l.has_value(), l.error());
    ledger.emplace(std::move(*l));
  }

  store::Database& db() { return store->db(); }

  // `sql`'s number read through a connection of its own: what another
  // process sees (what a transaction left open has not written yet).
  std::int64_t seen(const std::string& sql) {
    auto other = store::Database::open(store->db().path());
    REQUIRE(other.has_value());
    auto n = other->query_int(sql);
    REQUIRE_MESSAGE(n.has_value(), (n ? "" : n.error()));
    return *n;
  }

  std::int64_t count(const std::string& sql) {
    auto n = db().query_int(sql);
    REQUIRE_MESSAGE(n.has_value(), n.error());
    return *n;
  }

  // An entry for `key` and `payload` (handler "echo", no arguments, crash
  // state empty, message "KIND in KEY"), with its task started in the ledger
  // (inside the caller's transaction). Callers change the rest as they need.
  store::QuarantineEntry entry(const std::string& key, const std::string& payload, const std::string& fingerprint,
                               std::int64_t now, const std::string& kind = "crash") {
    store::QuarantineEntry e;
    e.key = key;
    e.handler = "echo";
    e.handler_identity = "handler-id";
    e.handler_args = "{}";
    e.exec_argv = "[]";
    e.policy_identity = "policy-id";
    e.policy = "limits {}";
    e.payload_sha256 = sha256_hex(payload);
    e.payload_size = static_cast<std::int64_t>(payload.size());
    e.kind = kind;
    e.fingerprint = fingerprint;
    e.crash_state = {};
    e.message = kind + " in " + key;
    auto started = ledger->start_attempt(key, e.payload_sha256, e.payload_size, now);
    REQUIRE_MESSAGE(started.has_value(), started.error());
    e.task_id = started->task_id;
    return e;
  }
};

}  // namespace pillbox::test
