#pragma once
// What operators did with one record of the fleet's quarantine. A dead
// letter is a stream entry, which cannot change, so this is kept beside it:
// one JSON value per record in the hash NAME:dlq:state (field: the entry id;
// none: nobody acted on it yet). Pure: no Redis.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"
#include "supervisor/store/quarantine_store.h"
#include "supervisor/store/record_status.h"

namespace pillbox::broker {

// One run of a record's payload on the fleet: a delivery of the entry that
// became the dead letter, or a redrive.
struct FleetAttempt {
  std::uint32_t n = 0;           // the delivery number (redrives: 0)
  std::string worker;            // the consumer that ran it ("": not known)
  std::int64_t ended_at = 0;     // ms since the epoch; 0: it never reported back
  std::string kind;              // "": released without running
  std::string fingerprint;
  std::string message;
  bool charged = true;
  std::string entry;             // redrives: the entry of NAME it ran as
  std::string outcome_entry;     // redrives: its result (NAME:results) or dead letter (NAME:dlq)
  std::int64_t revision = 0;     // redrives: the revision it ran (a patch), 0: the original
};

// An operator's patch of the record (quarantine patch, fleet_revisions.h):
// its payload is kept apart from the state (by the record's id and its
// sha256 on Redis, at offset `at` of NAME.dlq.revisions on RabbitMQ), named
// here; `sig` with the fleet key ("": patched without one).
struct FleetRevision {
  std::int64_t n = 0;             // 1, 2, ...: the original is 0
  std::string payload_sha256;
  std::int64_t payload_size = 0;
  std::int64_t at = -1;           // where the broker keeps its bytes apart from the record's id; -1: by id
  std::int64_t created_at = 0;
  std::string actor;
  std::string note;
  std::string summary;            // what changed from the revision before (payload_change_summary)
  std::string sig;
};

// An operator's allowance of the record (quarantine allow): who, when, and
// its `sig` with the fleet key ("": allowed without a key). What it covers
// and why: fleet_allowance.h.
struct FleetAllowance {
  std::int64_t at = 0;
  std::string actor;
  std::string sig;
};

struct FleetState {
  // Never kReplaying: a record is being replayed while its redrive lock
  // exists (fleet_quarantine.h), so a replay that died leaves nothing stale.
  store::RecordStatus status = store::RecordStatus::kQuarantined;
  std::int64_t updated_at = 0;            // 0: unchanged since it was dead-lettered
  std::vector<store::AuditEntry> audit;   // operators' actions, oldest first
  FleetAllowance allowance;               // kept while the status is allowed (else empty)
  std::vector<FleetAttempt> redrives;     // the outcomes of its redrives, oldest first
  // A redrive's entry on NAME whose outcome nobody recorded (its replay timed
  // out, stopped or died). While it is on NAME the record is not redriven
  // again; once settled, the next replay records its outcome instead.
  std::string waiting_entry;
  std::int64_t waiting_revision = 0;      // the revision that redrive put back (0: the original)
  // Operators' patches, oldest first: a replay redrives the newest.
  std::vector<FleetRevision> revisions;
  std::string reproduce_verdict;          // "", reliable, flaky or not-reproduced
  std::int64_t reproduce_runs = 0;
  std::int64_t reproduce_matches = 0;
  // pillbox minimize (supervisor/broker/fleet_minimize_keeper.h): the progress of
  // its search, and the minimized payload it recorded ("": none yet).
  std::optional<store::MinimizeState> minimize;
  std::string minimized_sha256;
  // Where those two payloads' bytes are on a broker that cannot name them
  // by the record's id (RabbitMQ, Kafka: offsets in NAME.dlq.minimized,
  // fleet_log_minimize_keeper.h); -1: nowhere (Redis keeps them under keys of
  // the record's id). A claim like the rest: the bytes found there are
  // checked against the record and the sha256 above.
  std::int64_t minimize_best_at = -1;
  std::int64_t minimized_at = -1;
  // Kafka's redrive lock (kafka_redrive.h), where the broker has nothing
  // that ends with the replay's connection: the replay that holds the
  // record ("": none) until `lease_until` (ms since the epoch), renewed
  // while it waits. Past that time it holds nothing: a replay killed lets
  // go of its records by running out.
  std::string lease_by;
  std::int64_t lease_until = 0;
};

std::string state_json(const FleetState& state);
// "" is the state of a record nobody acted on. Errors: not JSON of this form
// (the field was written by something else).
Expected<FleetState> parse_state(std::string_view text);

}  // namespace pillbox::broker
