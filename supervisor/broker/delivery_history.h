#pragma once
// What each delivery of a stream entry ended in, as the fleet keeps it in
// Redis (supervisor/broker/stream_protocol.h: one hash per entry, field =
// delivery number, value = the JSON below), and what the retry policy
// (supervisor/flow/retry_policy.h) makes of it. Pure: tested without Redis.
//
// A delivery with a field ended here and was recorded: a failure (charged to
// the payload or not), a hold during a suspected outage, or a release (the
// worker stopped before running it). A delivery without one never reported
// back: its worker died (or lost Redis) while it held the entry. Such
// deliveries are the fleet's "attempts that never finished": max_attempts of
// them and the payload is judged to kill workers (supervisor-lost).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/classify/outcome.h"
#include "supervisor/store/ledger.h"

namespace pillbox::broker {

struct RecordedDelivery {
  std::uint32_t delivery = 0;
  std::string worker;          // the consumer that ran it
  std::int64_t at_ms = 0;      // when it ended (ms since the epoch)
  std::string kind;            // the outcome's kind; "" for a release (not run)
  std::string fingerprint;
  bool charged = true;         // held against the payload
  bool transient = false;      // not the payload's fault (killed, sandbox-error, ...)
  std::string note;            // why not charged: "held: ...", "released: ..."
  // The outcome, for the dead-letter record when this is the last word.
  int signal = 0;
  int exit_code = -1;
  std::string syscall;
  std::string message;         // at most kMaxRecordedMessage bytes
  std::vector<std::string> crash_state;
  std::uint64_t cpu_ms = 0;
  std::uint64_t wall_ms = 0;
  std::uint64_t max_rss_kb = 0;
};

inline constexpr std::size_t kMaxRecordedMessage = 4096;

// A delivery that ran and ended in `outcome`.
RecordedDelivery recorded_outcome(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                  const Outcome& outcome, bool charged, bool transient, std::string note = "");
// A delivery released without running (`note` says why).
RecordedDelivery recorded_release(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                  std::string note);

std::string delivery_json(const RecordedDelivery& d);
// nullopt: not JSON of this form (a field someone else wrote).
std::optional<RecordedDelivery> parse_delivery(std::uint32_t delivery, std::string_view json);

// An entry's deliveries before the current one (1 .. current-1), each
// recorded or lost.
struct EntryHistory {
  std::vector<RecordedDelivery> recorded;  // in delivery order
  std::vector<std::uint32_t> lost;         // deliveries nothing was recorded for
  std::uint32_t unreadable = 0;            // fields that were not ours (counted as recorded, uncharged)
  // The delivery right before the current one was lost: the current one
  // runs alone, as `run` runs a task whose last attempt never finished.
  bool last_lost = false;
};
EntryHistory entry_history(std::uint32_t current, const std::map<std::uint32_t, std::string>& fields);

// The history as the retry policy reads it, ending with the current
// delivery's outcome (`current`).
std::vector<store::AttemptSummary> attempt_summaries(const EntryHistory& history, const RecordedDelivery& current);

// The outcome a recorded delivery describes (for a dead-letter record).
Outcome outcome_of(const RecordedDelivery& d);

}  // namespace pillbox::broker
