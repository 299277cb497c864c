#include "supervisor/broker/amqp_state_log.h"

#include <amqp.h>

#include <utility>

#include <nlohmann/json.hpp>

#include "supervisor/broker/amqp_replay_notice.h"
#include "supervisor/broker/amqp_stream_reader.h"
#include "supervisor/broker/amqp_topology.h"
#include "supervisor/io/random_hex.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

constexpr std::string_view kWriterHeader = "pillbox-writer";
// A state message is at most this (its audit trail grows with each
// operator's action; a record with thousands is not a state pillbox writes).
constexpr std::size_t kMaxStateBytes = 1u << 20;
// Compare-and-set rounds before change() gives up (each lost round means
// another process changed the record in between).
constexpr int kCasRounds = 16;

struct StateMessage {
  std::string record;
  std::int64_t version = 0;
  FleetState state;
};

// A message of the log read back, or none when it is not pillbox's.
std::optional<StateMessage> read_state_message(const AmqpMessage& m) {
  if (m.body_omitted) return std::nullopt;
  auto parsed = parse_untrusted_json(m.body, kMaxStateBytes);
  const nlohmann::json& j = parsed.value;
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  const auto record = j.find("record");
  const auto version = j.find("version");
  const auto state = j.find("state");
  if (record == j.end() || !record->is_string() || version == j.end() || !version->is_number_integer() ||
      state == j.end() || !state->is_string()) {
    return std::nullopt;
  }
  auto fleet_state = parse_state(state->get<std::string>());
  if (!fleet_state || version->get<std::int64_t>() < 1) return std::nullopt;
  return StateMessage{record->get<std::string>(), version->get<std::int64_t>(), std::move(*fleet_state)};
}

const std::string* writer_of(const AmqpMessage& m) {
  const AmqpValue* v = find_field(m.headers, kWriterHeader);
  return v != nullptr ? v->text() : nullptr;
}

}  // namespace

std::string amqp_state_log_name(const std::string& queue) { return queue + ".dlq.state"; }

Status declare_state_log(AmqpConnection& c, const std::string& queue) {
  const std::string name = amqp_state_log_name(queue);
  const std::vector<AmqpField> arguments = stream_queue_arguments();
  auto declared = c.declare_queue(name, arguments);
  if (declared) return Status::ok();
  if (c.refusal() && c.refusal()->code == AMQP_PRECONDITION_FAILED) {
    return Status::error(explain_mismatch(name, "RabbitMQ at " + c.address().describe(), *c.refusal(), arguments),
                         ErrorCode::kSetup);
  }
  return Status::error(declared.error(), ErrorCode::kSetup);
}

AmqpStateLog::AmqpStateLog(AmqpConnection& connection, const std::string& queue)
    : c_(connection), queue_(queue), name_(amqp_state_log_name(queue)) {}

Status AmqpStateLog::fold(std::map<std::string, AmqpRecordState>& states, std::int64_t from, std::int64_t to,
                          const std::function<bool(const AmqpMessage&)>& until) {
  AmqpStreamReader reader(c_, name_, kMaxStateBytes);
  auto apply = [&](AmqpMessage&& m) {
    if (is_replay_notice(m)) return !until(m);  // a worker's word on a redrive (amqp_replay_notice.h), no state
    if (auto s = read_state_message(m)) {
      AmqpRecordState& current = states[s->record];
      // The first of each next version wins; a later one lost its race.
      if (s->version == current.version + 1) current = AmqpRecordState{s->version, std::move(s->state)};
    } else {
      ++unreadable_;
    }
    return !until(m);
  };
  if (to >= 0) return reader.read(from, to, apply);
  return reader.read_on(from, apply);
}

Expected<std::map<std::string, AmqpRecordState>> AmqpStateLog::load() {
  std::map<std::string, AmqpRecordState> states;
  unreadable_ = 0;
  end_ = 0;
  if (auto found = c_.check_queue(name_); !found) {
    if (c_.refusal() && c_.refusal()->code == AMQP_NOT_FOUND) return states;  // nobody acted on a record yet
    return Error{found.error(), found.error_code()};
  }
  AmqpStreamReader reader(c_, name_, kMaxStateBytes);
  auto end = reader.end();
  if (!end) return Error{end.error()};
  if (auto s = fold(states, 0, *end, [](const AmqpMessage&) { return false; }); !s) return Error{s.message()};
  end_ = *end;
  return states;
}

Expected<FleetState> AmqpStateLog::change(const std::string& id, const std::function<Status(FleetState&)>& change) {
  if (auto s = declare_state_log(c_, queue_); !s) return Error{s.message(), s.code()};
  if (auto s = c_.confirm_publishes(); !s) return Error{s.message()};
  for (int round = 0; round < kCasRounds; ++round) {
    auto states = load();
    if (!states) return Error{states.error(), states.error_code()};
    const std::int64_t version = (*states)[id].version;
    FleetState next = (*states)[id].state;
    if (auto s = change(next); !s) return Error{s.message(), s.code()};
    auto writer = random_hex(8);
    if (!writer) return Error{writer.error()};
    const nlohmann::json body = {{"record", id}, {"version", version + 1}, {"state", state_json(next)}};
    const std::string text = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    // Over what a reader keeps, it would be left out by every reader: the
    // change would be written, come back, and never be in effect.
    if (text.size() > kMaxStateBytes) {
      return Error{"record " + id + "'s state would be " + std::to_string(text.size()) + " bytes, over the " +
                   std::to_string(kMaxStateBytes) + " a state in " + name_ +
                   " may be (an audit trail of thousands of actions, or a state not pillbox wrote); not changed"};
    }
    AmqpOutgoing m;
    m.body = text;
    m.headers = {{std::string(kWriterHeader), *writer}};
    if (auto s = c_.publish(name_, m); !s) return Error{s.message()};
    if (auto s = c_.wait_confirmed(); !s) return Error{s.message()};
    // Read on from where the log ended until this change comes back: it
    // won if no other version `version + 1` of the record came first.
    bool won = false;
    bool beaten = false;
    bool unread = false;
    auto s = fold(*states, end_, -1, [&](const AmqpMessage& seen) {
      const std::string* w = writer_of(seen);
      if (w != nullptr && *w == *writer) {
        // In effect only as readers read it: this message, read back as a
        // state of this record at this version.
        const auto own = read_state_message(seen);
        unread = !own || own->record != id || own->version != version + 1;
        won = !beaten && !unread;
        return true;
      }
      if (auto other = read_state_message(seen); other && other->record == id && other->version == version + 1) {
        beaten = true;
      }
      return false;
    });
    if (!s) return Error{s.message()};
    if (unread) {
      return Error{"record " + id + "'s change came back from " + name_ + " as no state a reader keeps; not in effect"};
    }
    if (won) return next;
  }
  return Error{"record " + id + "'s state kept changing under us (" + std::to_string(kCasRounds) +
               " tries; other operators at work?); try again"};
}

}  // namespace pillbox::broker
