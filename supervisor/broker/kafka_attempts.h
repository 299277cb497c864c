#pragma once
// What a Kafka partition's attempt log (T.pillbox-attempts, entries:
// kafka_attempt_entry.h) says of the records a worker will get: per record,
// its deliveries so far as the engine judges them, whether it is already
// settled, and where in the log its entries begin; and the commit metadata
// "pillbox-attempts@N" that tells the next owner of the partition where to
// start reading (docs/distributed.md, Kafka; issue 29, Must-hold 1). Pure:
// no librdkafka.
//
// Counting. Every delivery writes its start entry (acks=all, delivery
// report awaited) before its payload reaches a child, and its number is one
// more than the highest any entry of the record gave. So:
// - a start and an end: the delivery reported back (the end's
//   delivery_json, delivery_history.h's one outcome format);
// - a start and no end: it began and never reported back (its worker died,
//   or lost the cluster): lost, held against the payload, and the next
//   delivery is a suspect's (runs alone);
// - no entry at all: it never began. A record delivered and never started
//   has no entry and takes no number, so a good record held beside a killer
//   is never charged.
// - an end that is a release (recorded_release: "released: partition
//   revoked") tells nothing of the payload: recorded, uncharged, not an
//   attempt. A suspect's delivery given back so is written with
//   recorded_suspect_release, or the suspicion ends with it and the next
//   delivery runs beside others.
// entry_history() reads a delivery that has no entry, right after one that
// never reported back, by UnmarkedSuspect; here kUnstarted, because on Kafka
// nothing runs without its start entry: a number without one never began.
// (kBegan is for a back end whose suspect runs unmarked.) On Kafka such a
// gap comes only from entries that are missing (retention removed them) or
// forged (an entry claiming delivery 9000): with kUnstarted a run of gaps
// counts at most its first, with kBegan every gap would count, and one forged
// entry would dead-letter a record. And retention removes the log's oldest
// entries only: a gap after a record's first entry kept is forged (uncharged
// releases written by hand at 2, 4 and 6 would charge three deliveries), so
// record_history() counts none of it; at most one delivery before the first
// entry kept is counted.
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/kafka_attempt_entry.h"
#include "supervisor/broker/kafka_message.h"

namespace pillbox::broker {

// What the attempt log says of one record of T.
struct RecordAttempts {
  // Each delivery as delivery_history.h reads it (delivery number ->
  // delivery_json): its end's record, or, without an end, its start as a
  // start marker (it never reported back).
  std::map<std::uint32_t, std::string> deliveries;
  std::uint32_t highest = 0;             // the highest delivery number an entry gave
  std::optional<AttemptEntry> settled;   // the first settle entry: the record is done, never run again
  std::int64_t first_log_offset = -1;    // the attempt-log offset of its first entry
  std::uint32_t conflicting = 0;         // a second end of a delivery, a second settle: the first one holds
  std::set<std::uint32_t> ended;         // the deliveries in `deliveries` that have their end
};

// The number of the record's next delivery: one more than the highest known.
// Past kMaxDeliveries (worker_settings.h; an entry may claim up to it) the
// record is not judged: the worker dead-letters it unrun (protocol-error),
// as on Redis, and no entry it could write would be read.
std::uint32_t next_delivery(const RecordAttempts& record);
// Its deliveries before next_delivery(), as the engine judges them (hand
// engine_history(history, next_delivery(record)) to the engine).
EntryHistory record_history(const RecordAttempts& record);

// The attempt log of one partition of T, from the commit's N on, as a
// worker that owns the partition keeps it: what it read, then what it
// writes (each entry added with the offset its delivery report gave).
struct PartitionAttempts {
  std::int32_t partition = -1;
  // The consumer group whose attempts these are: another group's entries
  // (it reads the same topic) are counted in `other_groups`, nothing else.
  std::string group;
  std::uint64_t other_groups = 0;
  std::int64_t committed = 0;  // the group's committed offset: entries of records before it are left out
  // T's end when the log was read: an entry read about a record at or past
  // it was not written by a worker (none had read the record), and is
  // unreadable (a forged settle would skip a record not yet produced, and
  // entries no record ever settles would hold the commit's N back).
  std::int64_t source_end = std::numeric_limits<std::int64_t>::max();
  std::map<std::int64_t, RecordAttempts> records;  // by the record's offset in T
  std::int64_t log_end = 0;  // one past the last attempt-log offset read or written
  std::uint64_t unreadable = 0;  // entries that are not pillbox's (kafka_attempt_entry.h)
  std::string first_unreadable;  // the first one's log offset and why, for the worker to say
  std::uint64_t older = 0;       // entries of records before `committed` (settled and committed)

  // An entry read from the log, or written and reported at `log_offset`.
  void add(const AttemptEntry& entry, std::int64_t log_offset);
  // A record read from the attempt log's partition: its entry added, or
  // counted as unreadable.
  void add_read(const KafkaMessage& message);
  // Once the group committed `offset`: the records before it are done.
  void forget_below(std::int64_t offset);
  const RecordAttempts* find(std::int64_t offset) const;
};

// The fold of what a new owner read: the attempt log's partition
// `partition` from the commit's N up to `read_end` (its high watermark when
// the read began), keeping the records from `committed` on, below
// `source_end` (T's end, asked after `read_end`).
PartitionAttempts fold_attempt_log(std::int32_t partition, std::int64_t committed,
                                   const std::vector<KafkaMessage>& read, std::int64_t read_end,
                                   std::int64_t source_end = std::numeric_limits<std::int64_t>::max(),
                                   const std::string& group = "");

// N for a commit of `committed`: the lowest attempt-log offset among the
// first entries of the records from `committed` on (each still needed:
// an unsettled one for its history, a settled one so that it is skipped),
// or the log's end as known when none has an entry (what is written
// about them comes later).
std::int64_t attempt_log_commit_offset(const PartitionAttempts& attempts, std::int64_t committed);

// "pillbox-attempts@N", the commit metadata for N.
std::string attempt_commit_metadata(std::int64_t log_offset);
struct AttemptLogStart {
  // Where to read the attempt log from; nullopt: from its beginning.
  std::optional<std::int64_t> from;
  std::string why_beginning;  // when from the beginning: why (no metadata, another client's)
};
// The commit metadata of a committed offset, as the next owner reads it.
// Another client may have committed with its own metadata, or none: the log
// is then read from its beginning (slower, never wrong), and why is said.
AttemptLogStart parse_attempt_commit_metadata(std::string_view metadata);

}  // namespace pillbox::broker
