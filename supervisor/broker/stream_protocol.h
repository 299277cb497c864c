#pragma once
// The worker's side of the Redis Streams protocol, one synchronous function
// per step over one RedisConnection (docs/distributed.md, The protocol, step
// by step). Every step that changes an entry is one server-side script,
// fenced: it acts only while XPENDING names this consumer as the owner.
// Redis's delivery count is the attempt count; what each delivery ended in
// is kept in one hash per entry (delivery_history.h).
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/redis_connection.h"
#include "supervisor/broker/stream_reply.h"

namespace pillbox::broker {

// The keys of one stream. On Redis Cluster, give the stream a hash tag
// ("{orders}") so that all of them are in one slot: the scripts touch several.
struct StreamKeys {
  std::string stream;   // NAME: the tasks
  std::string results;  // NAME:results: ok results
  std::string dlq;      // NAME:dlq: dead letters, one per quarantined task
  std::string history_prefix;  // NAME:attempts: + entry id: an entry's recorded deliveries
  std::string history(const std::string& entry) const { return history_prefix + entry; }
  // NAME:dlq:fingerprints: a set of "KIND FINGERPRINT" of every dead letter
  // (fingerprint_label), added by the worker that dead-letters one, so that a
  // worker's metrics can tell a fingerprint the fleet never saw (SADD says 1).
  std::string dlq_fingerprints;
};
// "KIND FINGERPRINT", or "KIND" for an outcome without one (a wall timeout).
std::string fingerprint_label(const std::string& kind, const std::string& fingerprint);
// Adds `label` to NAME:dlq:fingerprints: whether it was not there before.
Expected<bool> note_dead_letter_fingerprint(RedisConnection& redis, const StreamKeys& keys, const std::string& label);
StreamKeys stream_keys(const std::string& name);

struct Consumer {
  std::string group;
  std::string name;
};

// One delivery of a stream entry to this consumer.
struct Delivery {
  std::string entry;                                       // the stream entry id
  EntryFields fields;                                      // as added (submit: key, payload)
  // Redis's delivery count, this one included, as Redis says it: anyone can
  // set it (XCLAIM ... RETRYCOUNT) to anything, negative once it wraps.
  std::int64_t count = 1;
  std::map<std::uint32_t, std::string> history;             // delivery number -> recorded outcome (JSON)
  // Not "": the entry's history key holds this type instead of a hash (not
  // written by pillbox); `history` is empty.
  std::string history_type;
};

// How long an entry's recorded history lives after its last write: it is
// deleted when the entry is settled; this only bounds what an entry deleted
// by hand leaves behind.
inline constexpr std::chrono::hours kHistoryTtl{24 * 30};

// Creates the consumer group at the start of the stream (and the stream when
// missing). An existing group is fine. A key of that name that is not a
// stream is an error that says so.
Status create_group(RedisConnection& redis, const StreamKeys& keys, const std::string& group);

// A stream entry id ("MS-SEQ") as a pair that orders as the ids do.
using StreamId = std::pair<unsigned long long, unsigned long long>;
std::optional<StreamId> stream_id(const std::string& id);

// What tells a Redis that restarted without (all of) its data from one that
// did not: its run id (INFO server; a new one at every start), whether the
// stream and the group are there, and where the streams a worker adds to
// end now (their last-generated-id; "" when missing): an entry the worker
// added with a later id is gone.
// `held`: entries the worker holds; those no longer in the stream are in
// held_gone (settled meanwhile, or lost).
struct ServerState {
  std::string run_id;
  bool stream_exists = false;
  bool group_exists = false;
  std::string results_last;
  std::string dlq_last;
  std::vector<std::string> held_gone;
};
Expected<ServerState> server_state(RedisConnection& redis, const StreamKeys& keys, const std::string& group,
                                   const std::vector<std::string>& held = {});

// Not "": the group's last-delivered id is beyond the stream's last entry
// (XGROUP SETID to a future id), so that new entries, whose ids are below
// it, are never delivered to the group; says so and how to fix it.
std::string group_ahead_of_stream(RedisConnection& redis, const StreamKeys& keys, const std::string& group);

// New entries (never delivered to the group), at most `count`, waiting up to
// `block` for the first (0: do not wait).
Expected<std::vector<Delivery>> read_new(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                         std::size_t count, std::chrono::milliseconds block);

// Entries pending on any consumer for longer than `min_idle`, taken over by
// this one (XAUTOCLAIM: each delivery count rises by one), from `start`
// ("0-0" for the beginning); `next_start` is where the next call goes on
// ("0-0" once the whole pending list was scanned).
struct Claimed {
  std::string next_start = "0-0";
  std::vector<Delivery> deliveries;
};
Expected<Claimed> claim_idle(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                             std::chrono::milliseconds min_idle, const std::string& start, std::size_t count);

// Records what delivery `delivery` of `entry` ended in. Not `held`: this
// consumer no longer holds the entry; a `history_type`:
// the entry's history key holds that instead of a hash. Either way nothing
// was written.
struct Recorded {
  bool held = true;
  std::string history_type;
};
Expected<Recorded> record_delivery(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                   const std::string& entry, std::int64_t delivery, const std::string& outcome_json);

// Delivers the entry to this consumer again, for a retry (XCLAIM: the count
// rises by one). nullopt: the entry is no longer this consumer's, or it was
// deleted. The delivery has no fields (the caller has them) but the whole
// history (or its `history_type`).
Expected<std::optional<Delivery>> redeliver(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                            const std::string& entry);

// Settles an entry in one step: adds `fields` to `target` (the results
// stream, capped at about `maxlen` entries when maxlen > 0, or the dead-letter
// stream; none when target is empty), acknowledges the entry, deletes it and
// its history. Returns the id added to `target` ("" when none), or nullopt
// when this consumer no longer holds the entry (nothing done).
Expected<std::optional<std::string>> settle(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                            const std::string& entry, const std::string& target, std::size_t maxlen,
                                            const EntryFields& fields);

// Why this consumer no longer holds `entry`, once a fenced step did
// nothing: a second look (XPENDING, XRANGE), for the message only (taken
// over, acknowledged elsewhere, deleted).
std::string why_not_held(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                         const std::string& entry);

// Resets the idle time of the entries this consumer holds without counting
// a delivery, so that no other worker takes them over while they run or
// wait. Returns the entries it no longer holds.
Expected<std::vector<std::string>> renew(RedisConnection& redis, const StreamKeys& keys, const Consumer& consumer,
                                         const std::vector<std::string>& held);

}  // namespace pillbox::broker
