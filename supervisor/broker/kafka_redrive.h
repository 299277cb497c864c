#pragma once
// `pillbox quarantine replay --kafka BROKERS --topic T`: the fleet's replay
// (fleet_redrive.h: batches, --rate, --stop-after, --max-failure-ratio) on
// Kafka (docs/distributed.md, Kafka: replay).
//
//   lock     a lease in the record's state in T.dlq.state (FleetState's
//            lease_by, lease_until), taken by the same compare and set as
//            the claim: a second replay reads it and is refused. Renewed
//            while the replay waits; kKafkaReplayLease after its last
//            renewal it holds nothing, so a replay killed lets go by
//            running out (within a minute), with no one to clean up. Safe
//            because the lease only says "being replayed"; what keeps a
//            record from being republished twice is the claim below, which
//            outlives any lease. The lease is timed by the writers' clocks:
//            two replays whose clocks differ by more than it could both
//            think it theirs, and still only one wins the claim. A lease
//            is a claim too: one that ends more than two leases on was
//            written by no replay (forged) and holds nothing, so a forged
//            entry blocks replay and discard for two minutes at most.
//   claim    the record's waiting_entry is set to "replay-HEX" (this
//            redrive's, pending) before anything is produced, then to
//            "T/p'@o'", where the cluster put the republished record (its
//            delivery report), once it is acknowledged. A replay killed
//            between leaves "replay-HEX": the record is not republished
//            again (the republished record, if it was written, carries
//            pillbox.replay naming it); --force republishes it, said as
//            such by the audit trail. A record whose waiting_entry is set
//            is never republished without --force.
//   redrive  the dead letter's key (null stays null), value (exact) and
//            headers, but pillbox's own (pillbox-*, pillbox.*: the
//            worker's record, signature and context, and what was carried
//            renamed), produced to T by an idempotent producer (acks=all),
//            partitioned by the key as the Java clients do (per-key order
//            holds with what other producers write), with the header
//            pillbox.replay = the record's id.
//   outcome  the settled entry of T p'@o' in T.pillbox-attempts (partition
//            p': co-partitioned), read from where the log stood when the
//            batch began: "ok" (its result's place in T.results), or a
//            dead letter in T.dlq whose pillbox.dedupe is "T/p'@o'" (failed
//            again, as that letter's record says). Every consumer group on
//            T runs the republished record; the first settled entry of any
//            group is the outcome. An "ok" counts only after the start
//            entry of its delivery and group (a worker writes that before
//            the record runs): a lone forged "ok" is not an outcome, and
//            since the workers skip a record settled in the log, none will
//            come: the replay stops and says so. One forged with its start
//            is believed (the attempt log is as trusted as T.dlq.state:
//            only the workers should write to it).
//
// The dead letter of a republished record that fails again is an attempt
// of the record it replayed, not a new record: it carries pillbox.replay
// (as the worker carries an original's pillbox-named header:
// pillbox.original.pillbox.replay) naming the record, and that record's
// state names "T/p'@o'" (waiting_entry, or a redrive's entry). Both must
// hold: a producer to T who writes the header names only its own record,
// and a state names only what a replay put back.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "supervisor/broker/fleet_redrive.h"
#include "supervisor/broker/fleet_state.h"
#include "supervisor/broker/kafka_dead_letter.h"
#include "supervisor/broker/kafka_message.h"

namespace pillbox::broker {

class KafkaQuarantine;

// The header a republished record carries: the id (P@O in T.dlq) of the
// record it replays.
inline constexpr std::string_view kKafkaReplayHeader = "pillbox.replay";
// How long a replay's lock holds without being renewed.
inline constexpr std::chrono::milliseconds kKafkaReplayLease{60'000};

// Kafka's part of a replay by `run` (both outlive it).
std::unique_ptr<RedriveRoute> kafka_redrive_route(KafkaQuarantine& quarantine, const ReplayRun& run);

// The record that republishes `letter` (read from T.dlq) to `topic` for
// the record `record_id`.
KafkaOutgoing kafka_redrive_record(const KafkaMessage& letter, const std::string& topic, const std::string& record_id);

// Who holds record's lease at `now_ms` ("": nobody, it ran out, or it ends
// later than any replay writes one: more than 2 x kKafkaReplayLease on).
std::string kafka_lease_holder(const FleetState& state, std::int64_t now_ms);

// The record `letter` is the dead letter of a replay of, by the header
// the worker carried ("": none).
std::string kafka_replayed_record(const KafkaDeadLetter& letter);
// Whether `state` (of record `record_id`) names `dedupe_key` as one of its
// redrives: the letter with that key is an attempt of it.
bool kafka_names_redrive(const FleetState& state, const std::string& dedupe_key);

}  // namespace pillbox::broker
