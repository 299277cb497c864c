#pragma once
// How `quarantine replay --amqp` learns how a replayed message ended
// (docs/distributed.md, RabbitMQ: replay). A dead letter is republished to
// NAME with its own message_id, correlation_id, reply_to and headers (its
// business key among them), and two headers of the replay's:
//
//   pillbox-replay     the replay attempt's id: 32 hex digits, random, one
//                      per republished message
//   pillbox-replay-of  the record it replays: its offset in NAME.dlq
//
// The workers run it as any message; a retry's or give-back's copy carries
// the headers on. How it ended:
//   - ok: its result goes where any result goes (its reply_to, else
//     NAME.results: the results users take home follow), and the worker
//     also appends a notice to the stream NAME.dlq.state, before it
//     acknowledges the message: body the JSON of ReplayNotice, header
//     pillbox-replay-outcome. A stream, so a replay that died finds it later;
//   - failed again: its dead letter in NAME.dlq, which carries the two
//     headers on as the original's (and in pillbox-original), whether a
//     worker or the broker (x-delivery-limit) wrote it.
// The replay reads both from where they stood when it published.
//
// What a message or a notice says is a claim: a replay takes an outcome
// only for an attempt id it wrote itself into the record's state, which no
// publisher that cannot read NAME learns, and only for the payload it
// republished (the notice's payload_sha256, the dead letter's body): one
// that reads NAME learns the tag, and could put it on another payload.
// Pure: no connection here.
#include <optional>
#include <string>
#include <string_view>

#include "supervisor/broker/amqp_connection.h"

namespace pillbox::broker {

inline constexpr std::string_view kReplayHeader = "pillbox-replay";
inline constexpr std::string_view kReplayOfHeader = "pillbox-replay-of";
inline constexpr std::string_view kReplayOutcomeHeader = "pillbox-replay-outcome";

// The two headers of a replayed message.
struct ReplayTag {
  std::string attempt;  // 32 lowercase hex digits
  std::string record;   // an offset in NAME.dlq, canonical (no leading zeros)
};

// A new attempt's id (random_hex(16)); an error when the kernel gives no
// randomness.
Expected<std::string> new_replay_attempt();

// The tag of `headers` (a message's own, or a dead letter's carried on),
// or none: each header given once, as a string of its form.
std::optional<ReplayTag> replay_tag(const AmqpTable& headers);
// Headers `tag` adds to a republished message.
void add_replay_tag(AmqpTable& headers, const ReplayTag& tag);
// Whether `name` is one of the two (a republished message's own headers
// never carry earlier ones: a record replayed twice has the second's).
bool is_replay_tag_header(std::string_view name);

// What a worker says of a replayed message that ran ok.
struct ReplayNotice {
  ReplayTag tag;
  std::string worker;          // the consumer that ran it
  std::string message_id;      // the republished message's
  std::string output_omitted;  // why its output is not in its result ("" when it is)
  // sha256 (hex) of the payload it ran: a replay takes the notice only for
  // the payload it republished (a tag read off NAME and put on another
  // payload by whoever may publish there is not that redrive's outcome).
  std::string payload_sha256;
};

// The notice's body (JSON) and its message to NAME.dlq.state (whose body
// views `body`: keep it until the message is sent).
std::string replay_notice_json(const ReplayNotice& notice);
AmqpOutgoing replay_notice_message(const std::string& body);
// A message of NAME.dlq.state read as a notice, or none when it is none
// (no pillbox-replay-outcome header, or a body not of its form; at most
// 64 KiB of JSON is read).
std::optional<ReplayNotice> read_replay_notice(const AmqpMessage& message);
// Whether the message is meant as a notice (its header), read or not: the
// state log's reader leaves those out of the states, not counted as unreadable.
bool is_replay_notice(const AmqpMessage& message);

}  // namespace pillbox::broker
