#pragma once
// One message of a RabbitMQ work queue as a worker holds it
// (docs/distributed.md, RabbitMQ): what it reads of a delivery, the checks
// that dead-letter it unrun, and what its settles publish. Pure: no
// connection here.
//
// A message cannot be changed once published, so what the Redis fleet
// keeps in an entry's history hash rides on the message itself. A worker
// that retries a task (it waits in a delay queue) or gives it back
// publishes a copy that carries every delivery so far (header
// pillbox-attempts: JSON text, delivery_history.h's records) and their
// count (pillbox-deliveries), and acknowledges the original only once the
// broker confirmed the copy. The copy's deliveries count on from there: its
// delivery number is pillbox-deliveries + x-delivery-count + 1, the quorum
// queue's own count of its earlier deliveries (a worker killed mid-task
// included). A delivery the broker counted and nobody recorded never
// reported back.
//
// A suspect's delivery (one right after a delivery that never reported
// back) that never reported back either is not counted: no start marker
// can be written on RabbitMQ (the broker requeues the message as it was),
// and the worker may have held it unstarted beside the payload that killed
// it (UnmarkedSuspect::kUnstarted, as on Redis without a marker). A
// message that kills every worker is then dead-lettered by the broker
// itself at x-delivery-limit (reason delivery_limit): a good one is never
// charged for its neighbour's crash.
//
// What the headers say is a claim of whoever published the message: read
// bounded, and a history that is not pillbox's dead-letters it unrun.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "supervisor/broker/amqp_connection.h"
#include "supervisor/broker/stream_entry.h"
#include "supervisor/broker/worker_settings.h"
#include "supervisor/classify/outcome.h"

namespace pillbox::broker {

inline constexpr std::string_view kAttemptsHeader = "pillbox-attempts";
inline constexpr std::string_view kDeliveriesHeader = "pillbox-deliveries";
// The most a copy's history header holds: a message's headers must fit one
// AMQP frame (128 KiB) with the original's own. Older records lose their
// details first, then are written short (what judging reads of them);
// never a whole record.
inline constexpr std::size_t kMaxCarriedHistory = 48u << 10;
// The most of a message's own headers (as a copy carries them: not the
// broker's x-*, nor CC and BCC) a worker runs with: a copy carries them
// and its history in one frame. Over it, refused unrun.
inline constexpr std::size_t kMaxCopiedHeaders = 64u << 10;

struct AmqpHeld : HeldEntry {
  // As delivered, without its body (the payload is task.payload) and
  // without pillbox's own history headers (read into `history`), but for a
  // history that is not pillbox's: kept as it came (and `history` empty).
  AmqpMessage message;
  std::int64_t carried = 0;  // pillbox-deliveries: deliveries before this copy
  // The history header could not be read as pillbox's: why ("" when it could).
  std::string history_unreadable;
};

// Reads what names the message and counts its deliveries: its id (the
// message_id, else "delivery TAG"), its key (header `key`, else the
// message_id, else "message:" and 16 hex digits of its payload's SHA-256),
// its payload, its delivery number and history.
void read_message(AmqpMessage m, AmqpHeld& e);

// Why a message is dead-lettered without running, or nullopt: a task to
// run. As on Redis (stream_entry.h): a delivery number out of range, a
// history that is not pillbox's, an oversized payload or key, or
// deliveries that never reported back --max-attempts times. And what the
// worker could not carry on: an id or header name AMQP cannot send as
// pillbox sends it (1 to 255 bytes, no NUL), a reply_to naming the fleet's
// own queues (NAME, NAME.dlq, NAME.delay.MS: a result there runs again),
// own headers over kMaxCopiedHeaders, a history with no room left for a
// delivery more (written short, about 450 to 1400 deliveries: no fleet
// gets there by delivering). Each a protocol error: its publisher's doing.
//
// A history is pillbox's when: pillbox-deliveries is a count within
// 0..kMaxDeliveries-1 and given once, pillbox-attempts a string given
// once (without NUL, at most kMaxCarriedHistory bytes, nested at most
// kMaxJsonDepth) holding a JSON array of records, each an object of
// delivery_json's form for one of deliveries 1..pillbox-deliveries, none
// twice, none a start marker (none is written on RabbitMQ), and one for
// delivery pillbox-deliveries itself (the delivery its copy was made at).
std::optional<Refused> check_message(const WorkerSettings& settings, const AmqpHeld& e);

// The names of `m`'s top-level headers a stream queue cannot keep: each of
// type decimal. Dead-lettered into NAME.dlq by the broker itself (past
// x-delivery-limit, or rejected by a consumer of another program), such a
// message never arrived there, and RabbitMQ 3.10 then answered
// INTERNAL_ERROR to every queue.declare of the stream: no worker could
// start (docs/distributed.md, hostile messages). A worker gives such a
// message back at once as a copy whose headers are text (carried_copy).
std::vector<std::string> stream_breaking_headers(const AmqpMessage& m);

// What a worker publishes, and where: an exchange ("" the default one) and
// routing key (on the default exchange, a queue's name).
struct AmqpPublication {
  std::string exchange;
  std::string routing_key;
  std::string body;
  AmqpOutgoing message;  // its body is set to `body` when it is sent
  // What comes with a settle (a replay's notice) rather than what it
  // settles the message as: published and confirmed before it, never what
  // the verdict names, and never dropped: refused for whatever reason, the
  // message is left unacknowledged and the worker stops (amqp_back_end.h).
  bool notice = false;
};

// A copy of `e` to `queue` (NAME.delay.MS for a retry's wait, NAME to give
// it back) that carries its history on, with `ended`, the record of the
// delivery this copy ends. Its message_id, correlation_id, reply_to and
// headers are the original's, but the broker's own: x-*, and CC and BCC
// (RabbitMQ's sender-selected distribution: a copy that carried them would
// be routed to the queues they name as well), and a decimal header goes
// as its text (stream_breaking_headers). A replayed message's tag
// (pillbox-replay, pillbox-replay-of: amqp_replay_notice.h) goes on with
// the rest: how its copy ends is still the replay's to read. Of a message
// check_message accepted, its headers fit one frame. Of one whose history
// is not pillbox's (given back unchecked), the history headers as they
// came, and no new ones: the next worker refuses it alike.
AmqpPublication carried_copy(const AmqpHeld& e, const RecordedDelivery& ended, const std::string& queue);

// Its result: to its reply_to with its correlation_id when it has one (the
// RPC pattern), else to `results_queue` (NAME.results; "": none kept, and
// nullopt). The body is the task's output, exact (over
// --results-max-output: empty, and headers say its size and SHA-256); the
// headers are the Redis fleet's result fields but the output. A reply_to
// that cannot be sent or names the fleet's own queues (check_message
// refuses it) is taken as none.
std::optional<AmqpPublication> result_publication(const WorkerSettings& settings, const AmqpHeld& e,
                                                  const Outcome& outcome, const std::string& results_queue);

// What a worker appends to the stream NAME.dlq.state when a replayed
// message (its headers carry a replay tag, amqp_replay_notice.h) ran ok,
// or nullopt for any other message: the ReplayNotice of its tag, this
// worker (as its result's `worker`), its message_id and why its output is
// not in its result: over --results-max-output, or no result kept at all
// (--no-results, and no reply_to it could go to). A notice: published and
// confirmed before its result and before the message is acknowledged, so
// that a result lost with its reply_to cannot take it along.
std::optional<AmqpPublication> replay_notice_publication(const WorkerSettings& settings, const AmqpHeld& e,
                                                         const Outcome& outcome);

// Its dead letter, to NAME.dlx (amqp_dead_letter.h), with pillbox's record
// (stream_entry.h's, from "queue") and, with a fleet key, its signature
// (header pillbox-sig) over the fields dead_letter_signed_fields names. A
// record over kMaxDeadLetterJson is cut in its details (the earlier
// deliveries' first, see `cut` in it) rather than left out whole; the
// original's own headers give way when the whole would not fit one frame
// (not pillbox-*: a replayed message's tag stays, which the replay reads),
// and CC/BCC are never carried. A key within about 8 KiB of a frame's size
// (refused as over --max-key) can still leave no room: its publish is
// refused, and the worker must reject the message unrequeued (the broker
// dead-letters it to NAME.dlx itself, whole).
AmqpPublication dead_letter_publication(const WorkerSettings& settings, const AmqpHeld& e, const Outcome& outcome,
                                        const std::string& reason, std::int64_t now_ms);

// What a RabbitMQ dead letter's signature covers, read from the message as
// published or as read back from NAME.dlq, each as read_dead_letter reads
// it: key (the first header `key` when a string, else the message id),
// payload, entry (the message id), queue (pillbox-queue, else
// x-first-death-queue), record (pillbox-record's exact text, which holds
// the kind, fingerprint, deliveries and history), original and x_death
// (pillbox-original's and pillbox-x-death's), and `sig` for each
// pillbox-sig header (FleetKey::verify's input).
SignedFields dead_letter_signed_fields(const AmqpOutgoing& message, std::string_view payload);
SignedFields dead_letter_signed_fields(const AmqpMessage& message);

}  // namespace pillbox::broker
