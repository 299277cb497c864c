#pragma once
// What each delivery of a stream entry ended in, as kept in Redis (one hash
// per entry: field = delivery number, value = delivery_json), and what the
// retry policy makes of it. Pure: no Redis.
//
// A delivery without a field never reported back (its worker died or lost
// Redis); max_attempts of them and the payload is judged to kill workers
// (supervisor-lost). But a worker also holds entries it has not started, so
// the delivery after an unreported one (a suspect's) records a start marker
// before it runs, and counts only when that marker is there. Without this, a
// good entry held unstarted by three killed workers was dead-lettered
// (tests/e2e/redis_chaos_test.cpp; docs/distributed.md, The protocol, step
// by step).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/classify/outcome.h"
#include "supervisor/classify/outcome_record.h"
#include "supervisor/store/ledger.h"

namespace pillbox::broker {

// A delivery's outcome (the OutcomeRecord it is; kind "" for a release,
// which did not run) and how the worker settled it.
struct RecordedDelivery : OutcomeRecord {
  std::uint32_t delivery = 0;
  std::string worker;          // the consumer that ran it
  std::int64_t at_ms = 0;      // when it ended (ms since the epoch)
  bool charged = true;         // held against the payload
  bool transient = false;      // not the payload's fault (killed, sandbox-error, ...)
  std::string note;            // why not charged: "held: ...", "released: ..."
  bool started = false;        // only a start marker: a suspect's delivery began to run
  // A suspect's delivery released unrun (its worker gave it back so that
  // another suspect could run alone): it tells nothing of the payload, so
  // the next delivery is a suspect's still.
  bool keeps_suspicion = false;
};

inline constexpr std::size_t kMaxRecordedMessage = 4096;

// A delivery that ran and ended in `outcome` (its message cut at kMaxRecordedMessage).
RecordedDelivery recorded_outcome(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                  const OutcomeRecord& outcome, bool charged, bool transient, std::string note = "");
RecordedDelivery recorded_outcome(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                  const Outcome& outcome, bool charged, bool transient, std::string note = "");
// A delivery released without running (`note` says why).
RecordedDelivery recorded_release(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                  std::string note);
// A suspect's delivery released without running: the next one is a suspect's too.
RecordedDelivery recorded_suspect_release(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                          std::string note);
// The start marker of a suspect's delivery, recorded before it runs.
RecordedDelivery recorded_start(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms);

std::string delivery_json(const RecordedDelivery& d);
// nullopt: not JSON of this form (a field someone else wrote).
std::optional<RecordedDelivery> parse_delivery(std::uint32_t delivery, std::string_view json);

// An entry's deliveries before the current one (1 .. current-1), each
// recorded or lost.
struct EntryHistory {
  std::vector<RecordedDelivery> recorded;  // in delivery order (start markers are not here)
  // Deliveries that never reported back and may have run: nothing recorded
  // and not a suspect's, or a suspect's whose start was recorded.
  std::vector<std::uint32_t> lost;
  // The start markers of the lost deliveries that have one (a suspect's):
  // which worker began it and when, so that the record can name the
  // workers that died with it.
  std::vector<RecordedDelivery> lost_starts;
  // Suspects' deliveries that never reported back and never started (no
  // marker): their workers died while they waited. Not held against it.
  std::vector<std::uint32_t> unstarted;
  std::uint32_t unreadable = 0;            // fields that were not ours (counted as recorded, uncharged)
  // The delivery right before the current one never reported back (lost or
  // unstarted), releases of suspects between them aside: the current one is
  // a suspect's (runs alone, start recorded).
  bool last_lost = false;
};
// How a suspect's delivery (one right after a delivery that never reported
// back) that never reported back either and has no start marker is read:
// it never started (its worker held it beside others), or, for a back end
// whose worker holds a suspect alone, with nothing else delivered to it
// while it runs, it began, and counts.
enum class UnmarkedSuspect : std::uint8_t { kUnstarted, kBegan };
EntryHistory entry_history(std::uint32_t current, const std::map<std::uint32_t, std::string>& fields,
                           UnmarkedSuspect unmarked = UnmarkedSuspect::kUnstarted);

// The deliveries before `current` as the engine's attempts (what
// StreamBackEnd::find hands it): those recorded, releases left out (nothing
// ran), and, when the one right before never reported back, that one as an
// attempt that never finished (the engine then runs `current` alone).
// Earlier lost deliveries are counted by check_redelivery, not here.
std::vector<store::AttemptSummary> engine_history(const EntryHistory& history, std::uint32_t current);

// The outcome a recorded delivery describes (for a dead-letter record).
Outcome outcome_of(const RecordedDelivery& d);

}  // namespace pillbox::broker
