#pragma once
// One stream entry as a worker holds it (docs/distributed.md): what it
// reads of a delivery, the checks that dead-letter an entry unrun (it is not
// a task pillbox can judge), and what its settle writes: the fields of its
// result in NAME:results, or of its dead letter in NAME:dlq with the record
// an operator triages. Pure: no Redis here.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/stream_protocol.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/exec/task_source.h"

namespace pillbox::broker {

struct HeldEntry {
  Task task;                 // its key and payload
  std::string id;            // stream entry id
  std::string redrive_of;    // the dead letter this entry redrives (field `redrive_of`), ""
  std::int64_t delivery = 1;  // Redis's count: judged only within 1..kMaxDeliveries
  EntryHistory history;      // deliveries before `delivery`
  // What else the entry held that its dead letter must keep (the entry is
  // deleted once settled): the second and later values of a repeated
  // `key`, `payload` or `redrive_of`, as ("repeated:NAME", value).
  EntryFields also_held;
};

// Whether Redis's delivery count is one an entry is judged at.
bool judgeable(std::int64_t delivery);

// Reads what names the entry: its id, count, key (or "entry:ID"),
// `redrive_of` and, at a judgeable count, its history. The payload is
// check_entry's.
void read_entry(const Delivery& d, HeldEntry& e);

// Why an entry is dead-lettered without running: the outcome its dead
// letter says, and the reason. `protocol_error`: the entry is malformed
// (WorkerReport::protocol_errors), not an entry that kills workers.
struct Refused {
  Outcome outcome;
  std::string reason;
  bool protocol_error = true;
};
// The refusals of an entry that is not a task pillbox can judge
// (kind protocol-error), and of one whose deliveries never reported back
// too often (`how` they were lost), shared with amqp_entry.h.
Outcome protocol_error(const std::string& message, const std::string& handler_identity);
Outcome workers_lost(std::size_t lost, const std::string& handler_identity,
                     std::string_view how = "each died or lost Redis while it held this entry");
// A payload or key (`what`) of `size` bytes over `limit`: refused, unrun.
std::optional<Refused> oversized(const std::string& what, std::size_t size, std::size_t limit,
                                 const std::string& handler_identity);
// The entry's deliveries never reported back max_attempts times: it kills workers.
bool kills_workers(const WorkerSettings& settings, const HeldEntry& e);

// Checks a delivery read_entry read, and moves its payload into `e` (kept
// even when oversized: the dead letter carries it, and its record its true
// size and hash). nullopt: a task to run.
std::optional<Refused> check_entry(const WorkerSettings& settings, Delivery& d, HeldEntry& e);
// Checks an entry delivered again for a retry (redeliver: the fields stay
// as they were), and reads its new count and history into `e`.
std::optional<Refused> check_redelivery(const WorkerSettings& settings, const Delivery& d, HeldEntry& e);
// After check_redelivery: its deliveries never reported back
// --max-attempts times (it kills workers).
std::optional<Refused> lost_too_often(const WorkerSettings& settings, const HeldEntry& e);
// An entry whose history key holds `type`, not a hash: its deliveries
// cannot be judged.
Refused history_not_readable(const WorkerSettings& settings, const std::string& entry, const std::string& type,
                             const std::string& reason);

// The fields of the entry's result in NAME:results (as `run --json` says it,
// plus where it came from and who ran it); none with --no-results.
EntryFields result_fields(const WorkerSettings& settings, const HeldEntry& e, const Outcome& outcome);
// Why a result holds not the output but its size and SHA-256 (over
// --results-max-output: its field output_omitted), or "" when it holds it.
std::string output_omitted_reason(const WorkerSettings& settings, const Outcome& outcome);
// The fields of its dead letter in NAME:dlq: the entry, its record
// (dead_letter_record), what else it held, and the fleet's signature.
EntryFields dead_letter_fields(const WorkerSettings& settings, const HeldEntry& e, const Outcome& outcome,
                               const std::string& reason, std::int64_t now_ms);
// The dead letter's record (JSON): the quarantine record of the store, plus
// the stream, the deliveries and every delivery's history.
std::string dead_letter_record(const WorkerSettings& settings, const HeldEntry& e, const Outcome& outcome,
                               const std::string& reason, std::int64_t now_ms);
// The same with where it came from under `source_field` (a stream's entry,
// a RabbitMQ queue's message) instead of the stream's.
std::string dead_letter_record(const WorkerSettings& settings, const HeldEntry& e, const Outcome& outcome,
                               const std::string& reason, std::int64_t now_ms, const std::string& source_field,
                               const nlohmann::json& source);

}  // namespace pillbox::broker
