#pragma once
// Payloads kept for the records of a fleet's quarantine apart from their
// dead letters, where the broker keeps no values that can change: each is
// an entry of its own in an append-only log, never changed, read by
// position (RabbitMQ's stream queues: amqp_payload_stream.h; Kafka's
// one-partition topics: kafka_payload_log.h). Two such logs per quarantine:
//
//   NAME.dlq.minimized  minimize's best payload so far and its result
//                       (fleet_log_minimize_keeper.h); header pillbox-minimized-of
//   NAME.dlq.revisions  `quarantine patch`'s revisions (fleet_revisions.h);
//                       header pillbox-revision-of
//
//   body     the payload's exact bytes
//   header   pillbox-minimized-of / pillbox-revision-of: the record's id
//   header   pillbox-writer: the appending process's random id
//
// A record's state names the position and the sha256 of each
// (FleetState::minimize_best_at, minimized_at, FleetRevision::at): a payload
// is that record's only when the entry there says so and its bytes have
// that sha256 (read_kept_payload, written once for every broker). Apart
// from the state log because that log is read whole by every change and
// every listing: payloads there would make each discard read every payload
// ever kept.
//
// As trusted as the state log (whoever may write to one can write to the
// other): what is read is checked; a revision is signed besides
// (fleet_revisions.h). Give both a retention no shorter than the dead
// letters': a payload removed is a minimization that starts over, an export
// --minimized that says it is gone, or a revision that cannot be replayed.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "shared/status.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/ops/quarantine_source.h"

namespace pillbox::broker {

inline constexpr std::string_view kMinimizedOfHeader = "pillbox-minimized-of";
inline constexpr std::string_view kRevisionOfHeader = "pillbox-revision-of";
inline constexpr std::string_view kPayloadWriterHeader = "pillbox-writer";

// One entry of a payload log as the broker's adapter read it.
struct KeptPayloadEntry {
  std::optional<std::string> of;     // the header naming its record, when it has one
  std::optional<std::string> bytes;  // none: more than the reader's bound (not read into memory)
  std::uint64_t size = 0;            // its size, as the broker says
};

// The broker's part: one append-only log of payloads, read by position.
class PayloadLog {
 public:
  virtual ~PayloadLog() = default;
  // Its name, for messages (NAME.dlq.minimized).
  virtual const std::string& name() const = 0;
  // Appends `bytes` as a payload of record `id` (its "of" header and a
  // writer id), and returns its position once the broker has it.
  virtual Expected<std::int64_t> append(const std::string& id, std::string_view bytes) = 0;
  // The entry at `position` (>= 0), its bytes kept when no more than
  // `most`; nullopt with `why_not` when there is none (no log, past its
  // end, removed by retention). Errors: the broker cannot be used.
  virtual Expected<std::optional<KeptPayloadEntry>> entry_at(std::int64_t position, std::uint64_t most,
                                                             std::string& why_not) = 0;
};

// The payload at `position` of `log` when it is one of record `id`'s: the
// entry says it is that record's, its bytes have sha256 `sha256` and are no
// more than `most` bytes (`most_is` says what that bound is: "the record's
// own payload"). Else nullopt, with `why_not` saying which it is not.
// Errors: the broker cannot be used.
Expected<std::optional<std::string>> read_kept_payload(PayloadLog& log, std::int64_t position, const std::string& id,
                                                       const std::string& sha256, std::uint64_t most,
                                                       const std::string& most_is, std::string& why_not);

// The minimization of `record` at `position` of `payloads`, no larger than
// the record's own payload: as read (get()), else as its record claims it
// (a listing left it out).
Expected<std::optional<std::string>> read_minimization(PayloadLog& payloads, std::int64_t position,
                                                       const FleetRecord& record, const std::string& sha256,
                                                       std::string& why_not);

// FleetDeadLetters::minimized_payload over `payloads` (the record's state
// names where: FleetState::minimized_at); `hint_options` names the
// quarantine in the command a record without one is told to run.
Expected<PayloadBytes> minimized_payload_in(PayloadLog& payloads, const FleetRecord& record,
                                            const std::string& hint_options);

// FleetDeadLetters::revision_payload over `revisions`.
Expected<std::string> revision_payload_in(PayloadLog& revisions, const FleetRecord& record,
                                          const FleetRevision& revision);

}  // namespace pillbox::broker
