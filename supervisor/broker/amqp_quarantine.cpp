#include "supervisor/broker/amqp_quarantine.h"

#include <amqp.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "shared/fingerprint.h"
#include "shared/sha256.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_entry.h"
#include "supervisor/broker/amqp_payload_stream.h"
#include "supervisor/broker/amqp_redrive.h"
#include "supervisor/broker/amqp_replay_notice.h"
#include "supervisor/broker/amqp_stream_reader.h"
#include "supervisor/broker/fleet_log_minimize_keeper.h"
#include "supervisor/ops/minimize.h"
#include "supervisor/store/quarantine_json.h"

namespace pillbox::broker {
namespace {

// Offsets read per consume: one window of a listing, newest first.
constexpr std::int64_t kWindow = 128;
// Payloads up to this size are kept by a listing (a record that cannot be
// read takes its sha256 from them); larger ones are read by get() only.
constexpr std::uint64_t kListedPayloadBytes = 64u << 10;

// A dead letter without pillbox's record: what RabbitMQ said of it (its
// first death), as a record's kind, fingerprint and message.
void broker_claims(const AmqpDeadLetter& d, DeadLetterClaims& own, std::string& message) {
  if (d.first_death_reason == "delivery_limit") {
    own.kind = std::string(to_string(Kind::kSupervisorLost));
    own.fingerprint = make_fingerprint(Kind::kSupervisorLost, "rabbitmq-delivery_limit", {}, "");
    message = "RabbitMQ dead-lettered it itself: delivered past x-delivery-limit of queue '" + d.first_death_queue +
              "' without a worker settling it (a payload that kills the worker's supervisor, or workers that "
              "lost the broker each time); no worker wrote a record";
    return;
  }
  own.kind = std::string(to_string(Kind::kProtocolError));
  if (d.first_death_reason.empty()) {
    own.fingerprint = make_fingerprint(Kind::kProtocolError, "amqp-foreign-dead-letter", {}, "");
    message = "not a dead letter pillbox or RabbitMQ wrote: no pillbox-record header and no x-first-death-reason "
              "(published to the dead-letter exchange by another client?)";
  } else {
    own.fingerprint = make_fingerprint(Kind::kProtocolError, "rabbitmq-" + d.first_death_reason, {}, "");
    message = "RabbitMQ dead-lettered it itself (reason " + d.first_death_reason + ", from queue '" +
              d.first_death_queue + "'): no worker wrote a record";
  }
}

// A dead letter's identity among copies (amqp_quarantine.h): "" for one
// without a message id, which nothing can tell apart from another. Its
// signature's verdict where the reader has the fleet key; without it,
// whether it is signed at all: the same letters are copies whichever way
// they are read, and an unsigned one never hides a signed one.
std::string copy_key(const AmqpMessage& m, const FleetRecord& r) {
  if (r.source_entry.empty()) return "";
  const std::string signature = r.signature != Signature::kUnchecked ? std::string(to_string(r.signature))
                                : find_field(m.headers, kSignatureHeader) != nullptr ? "signed"
                                                                                      : "unsigned";
  return r.source_entry + '\n' + r.record.entry.payload_sha256 + '\n' + signature;
}

}  // namespace

Expected<std::string> parse_amqp_record_id(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 18 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    return Error::usage("'" + text + "' is not a record ID of the fleet's quarantine on RabbitMQ: its IDs are "
                        "offsets in the stream NAME.dlq, such as 42 (see: pillbox quarantine list --amqp URL "
                        "--queue NAME)");
  }
  // One record, one id text: 007 is 7.
  return std::to_string(std::stoll(text));
}

Expected<AmqpQuarantine> AmqpQuarantine::open(const AmqpAddress& address, const std::string& queue) {
  auto c = AmqpConnection::open(address);
  if (!c) return Error{c.error(), c.error_code()};
  return open(*c, queue);
}

Expected<AmqpQuarantine> AmqpQuarantine::open(AmqpConnection& connection, const std::string& queue) {
  const AmqpAddress& address = connection.address();
  AmqpQueueNames names = amqp_queue_names(queue);
  const std::string where = "RabbitMQ at " + address.describe();
  if (auto state = connection.check_queue(names.dlq); !state) {
    if (connection.refusal() && connection.refusal()->code == 404) {
      return Error{where + " has no queue '" + names.dlq + "': no worker has declared the topology of queue '" + queue +
                   "' there (check --queue and the vhost; `pillbox doctor --amqp URL --queue " + queue +
                   "` checks it)"};
    }
    return Error{state.error(), state.error_code()};
  }
  // Declared again as a stream: the same queue changes nothing, another
  // kind of queue is refused, and said so.
  const std::vector<AmqpField> stream = stream_queue_arguments();
  if (auto again = connection.declare_queue(names.dlq, stream); !again) {
    if (connection.refusal() && connection.refusal()->code == 406) {
      return Error{explain_mismatch(names.dlq, address.describe(), *connection.refusal(), stream)};
    }
    return Error{again.error(), again.error_code()};
  }
  return AmqpQuarantine(std::move(connection), std::move(names));
}

std::string AmqpQuarantine::where() const { return c_->address().describe() + " " + names_.dlq; }

nlohmann::json AmqpQuarantine::id_json(const std::string& id) const {
  auto n = parse_amqp_record_id(id);
  return n ? nlohmann::json(std::stoll(*n)) : nlohmann::json(id);
}

FleetRecord AmqpQuarantine::record_of(const AmqpMessage& m) const {
  const AmqpDeadLetter d = read_dead_letter(m);
  FleetRecord r;
  r.id = std::to_string(stream_offset(m));
  r.payload = d.payload;
  r.payload_omitted = m.body_omitted;
  r.stream = d.queue;
  r.source_entry = d.message_id;
  DeadLetterClaims own;
  own.key = d.key;
  own.payload_size = static_cast<std::int64_t>(m.body_size);
  own.payload_sha256 = m.body_omitted ? m.omitted_body_sha256 : sha256_hex(d.payload);
  std::string message = d.unreadable.empty() ? "" : "its dead letter cannot be read: " + d.unreadable;
  if (!d.from_pillbox()) {
    std::string claims;
    broker_claims(d, own, claims);
    message = message.empty() ? claims : claims + "; " + message;
  }
  const nlohmann::json& j = d.from_pillbox() ? d.record : nlohmann::json::object();
  read_worker_record(j, own, message, r);
  if (r.record.entry.payload_size < 0) r.record.entry.payload_size = 0;
  if (const auto* at = j.is_object() && j.contains("created_at") && j["created_at"].is_string()
                           ? j["created_at"].get_ptr<const std::string*>()
                           : nullptr) {
    r.record.created_at = r.record.updated_at = parse_iso_time(*at).value_or(0);
  }
  nlohmann::json broker = {{"queue", d.queue}, {"message_id", d.message_id}, {"offset", stream_offset(m)}};
  if (!d.from_pillbox()) {
    // Only RabbitMQ dead-letters a message with these; on one pillbox
    // published, they were forged, and are not shown.
    broker["first_death_reason"] = d.first_death_reason;
    broker["first_death_queue"] = d.first_death_queue;
  } else {
    broker["deliveries"] = r.deliveries;
  }
  broker["x_death"] = d.x_death;
  broker["original"] = d.original;
  if (!d.unreadable.empty()) broker["unreadable"] = d.unreadable;
  r.broker = std::move(broker);
  if (key_) {
    // A payload a listing did not keep is checked by the sha256 of the
    // bytes that came (never by the record's claim of it).
    r.signature = key_->verify(names_.dlq, dead_letter_signed_fields(m),
                               m.body_omitted ? &m.omitted_body_sha256 : nullptr);
  }
  return r;
}

Expected<std::map<std::string, AmqpRecordState>> AmqpQuarantine::states() {
  AmqpStateLog log(*c_, names_.work);
  auto loaded = log.load();
  unreadable_states_ = log.unreadable();
  return loaded;
}

Status AmqpQuarantine::find_copies(std::int64_t end, const std::map<std::string, AmqpRecordState>& states) {
  if (end <= scanned_to_) return Status::ok();
  // Oldest first, payloads not kept (their sha256 is): whether a letter is
  // a copy depends on every one before it.
  AmqpStreamReader reader(*c_, names_.dlq, 0);
  std::int64_t read_to = scanned_to_;
  auto s = reader.read(scanned_to_, end, [&](AmqpMessage&& m) {
    read_to = stream_offset(m) + 1;
    if (is_canary(m, names_.work)) return true;
    FleetRecord r = record_of(m);
    if (is_attempt(m, r, states)) return true;  // its record's already
    const std::string key = copy_key(m, r);
    if (key.empty()) return true;
    const std::int64_t offset = stream_offset(m);
    auto [first, inserted] = first_of_.emplace(key, offset);
    if (!inserted) copy_of_[offset] = first->second;
    return true;
  });
  if (!s) return s;
  scanned_to_ = std::max(read_to, end);
  return Status::ok();
}

std::string AmqpQuarantine::copy_of(const std::string& id) const {
  auto it = copy_of_.find(std::stoll(id));
  return it == copy_of_.end() ? "" : std::to_string(it->second);
}

Status AmqpQuarantine::each(const std::function<bool(const FleetRecord&)>& fn) {
  canaries_ = 0;
  copies_ = 0;
  auto states = this->states();
  if (!states) return Status::error(states.error());
  AmqpStreamReader reader(*c_, names_.dlq, kListedPayloadBytes);
  auto end = reader.end();
  if (!end) return Status::error(end.error());
  known_end_ = std::max(known_end_, *end);
  if (auto s = find_copies(*end, *states); !s) return s;
  for (std::int64_t hi = *end; hi > 0;) {
    const std::int64_t lo = std::max<std::int64_t>(0, hi - kWindow);
    std::vector<FleetRecord> window;
    bool any = false;
    auto s = reader.read(lo, hi, [&](AmqpMessage&& m) {
      any = true;
      if (is_canary(m, names_.work)) {
        ++canaries_;
        return true;
      }
      FleetRecord r = record_of(m);
      if (is_attempt(m, r, *states)) return true;  // an attempt is its record's
      if (!copy_of(r.id).empty()) {
        ++copies_;
        return true;
      }
      window.push_back(std::move(r));
      return true;
    });
    if (!s) return s;
    for (FleetRecord& r : window) {
      const auto found = states->find(r.id);
      if (auto st = apply_record_state(r, found == states->end() ? nullptr : &found->second); !st) return st;
    }
    for (auto it = window.rbegin(); it != window.rend(); ++it) {
      if (!fn(*it)) return Status::ok();
    }
    // Retention removes the oldest first: a window it emptied has nothing
    // older below it.
    if (!any) break;
    hi = lo;
  }
  return Status::ok();
}

std::string AmqpQuarantine::left_out() const {
  std::string said;
  if (canaries_ > 0) {
    said = std::to_string(canaries_) + " message" + (canaries_ == 1 ? "" : "s") + " of " + names_.dlq +
           " left out: the canar" + (canaries_ == 1 ? "y" : "ies") +
           " of `pillbox doctor` (header pillbox-canary, expired out of " + names_.work +
           ".doctor.ID); a publisher to " + names_.work + " can make a message look like one";
  }
  if (copies_ > 0) {
    said += (said.empty() ? "" : "\n") + std::to_string(copies_) + " message" + (copies_ == 1 ? "" : "s") + " of " +
            names_.dlq + " left out: dead-lettered again, each a copy of an earlier record (the same message id, "
            "payload and signature; RabbitMQ lost the acknowledgement of the first, as a broker killed can)";
  }
  if (unreadable_states_ > 0) {
    said += (said.empty() ? "" : "\n") + std::to_string(unreadable_states_) + " message" +
            (unreadable_states_ == 1 ? "" : "s") + " of " + amqp_state_log_name(names_.work) +
            " left out: not a state pillbox writes (leave that stream to pillbox)";
  }
  return said;
}

Expected<FleetRecord> AmqpQuarantine::get(const std::string& id) {
  auto m = message_at(id);
  if (!m) return Error{m.error(), m.error_code()};
  FleetRecord r = record_of(*m);
  auto states = this->states();
  if (!states) return Error{states.error()};
  if (is_attempt(*m, r, *states)) {
    return Error::usage(r.id + " is the dead letter of a replay of record " + r.redrive_of +
                        ", not a record of its own: it is an attempt of " + r.redrive_of + " (quarantine show " +
                        r.redrive_of + hint_options() + ")");
  }
  if (auto s = find_copies(std::stoll(r.id) + 1, *states); !s) return Error{s.message(), s.code()};
  if (const std::string first = copy_of(r.id); !first.empty()) {
    return Error::usage(r.id + " is a copy of record " + first + ", not a record of its own: its message was "
                        "dead-lettered again with the same payload (RabbitMQ lost the acknowledgement of the "
                        "first, as a broker killed can); act on record " + first + " (quarantine show " + first +
                        hint_options() + ")");
  }
  const auto found = states->find(r.id);
  if (auto s = apply_record_state(r, found == states->end() ? nullptr : &found->second); !s) {
    return Error{s.message(), s.code()};
  }
  return r;
}

Expected<FleetRecord> AmqpQuarantine::dead_letter_at(const std::string& id) {
  auto m = message_at(id);
  if (!m) return Error{m.error(), m.error_code()};
  return record_of(*m);
}

Expected<AmqpMessage> AmqpQuarantine::message_at(const std::string& id) {
  auto checked = parse_amqp_record_id(id);
  if (!checked) return Error{checked.error(), checked.error_code()};
  const std::int64_t offset = std::stoll(*checked);
  AmqpStreamReader reader(*c_, names_.dlq, ~std::uint64_t{0});
  // A stream only grows at its end: an offset below one seen is read at
  // once (a replay reads each record's message twice; end() waits 300 ms).
  if (offset >= known_end_) {
    auto end = reader.end();
    if (!end) return Error{end.error()};
    known_end_ = std::max(known_end_, *end);
  }
  const std::int64_t* end = &known_end_;
  std::optional<AmqpMessage> found;
  if (offset < *end) {
    auto s = reader.read(offset, offset + 1, [&](AmqpMessage&& m) {
      found = std::move(m);
      return false;
    });
    if (!s) return Error{s.message()};
  }
  if (found && is_canary(*found, names_.work)) {
    return Error::usage("offset " + *checked + " of " + names_.dlq + " is a canary of `pillbox doctor`, not a dead letter");
  }
  if (!found) {
    return Error::usage("no record " + *checked + " in the fleet's quarantine (" + names_.dlq + " on " +
                        c_->address().describe() + " ends before offset " + std::to_string(*end) +
                        " and keeps what retention has not removed; see: pillbox quarantine list" + hint_options() + ")");
  }
  return std::move(*found);
}

Status AmqpQuarantine::lock(const std::string& id) {
  auto s = c_->declare_exclusive_queue(lock_name(id));
  if (s) own_locks_.insert(id);
  return s;
}

Status AmqpQuarantine::unlock(const std::string& id) {
  own_locks_.erase(id);
  return c_->delete_queue(lock_name(id));
}

Expected<bool> AmqpQuarantine::locked(const std::string& id) {
  if (own_locks_.count(id) != 0) return true;
  // Found by a passive declare, and not this connection's: not exclusive to
  // any (another's exclusive queue is RESOURCE_LOCKED), so no replay's lock
  // but a queue someone else declared by its name. Taken for one, it held
  // the record `replaying` for ever and refused every discard (found by an
  // attack review).
  if (c_->check_queue(lock_name(id))) return false;
  if (c_->refusal() && c_->refusal()->code == AMQP_RESOURCE_LOCKED) return true;  // another's
  if (c_->refusal() && c_->refusal()->code == AMQP_NOT_FOUND) return false;
  return Error{"cannot tell whether record " + id + " is being replayed: " +
               (c_->refusal() ? c_->refusal()->text : c_->why_broken())};
}

Status AmqpQuarantine::apply_record_state(FleetRecord& r, const AmqpRecordState* state) {
  if (state == nullptr) return Status::ok();
  std::string holder;
  if (!state->state.waiting_entry.empty()) {
    auto held = locked(r.id);
    if (!held) return Status::error(held.error());
    if (*held) {
      // Who: the replay that last redrove it, as its state says.
      holder = "a replay";
      for (auto it = state->state.audit.rbegin(); it != state->state.audit.rend(); ++it) {
        if (it->action == "redriven") {
          holder = it->actor.empty() ? holder : it->actor;
          break;
        }
      }
    }
  }
  apply_state(r, state->state, holder);
  return Status::ok();
}

bool AmqpQuarantine::is_attempt(const AmqpMessage& m, FleetRecord& r,
                                const std::map<std::string, AmqpRecordState>& states) const {
  const auto tag = replay_tag(m.headers);
  if (!tag || tag->record == r.id) return false;
  const auto of = states.find(tag->record);
  if (of == states.end()) return false;
  const FleetState& s = of->second.state;
  const bool named = s.waiting_entry == tag->attempt ||
                     std::any_of(s.redrives.begin(), s.redrives.end(),
                                 [&](const FleetAttempt& a) { return a.entry == tag->attempt; });
  if (named) r.redrive_of = tag->record;
  return named;
}

store::AuditEntry AmqpQuarantine::dead_lettering(const FleetRecord& r) const {
  const bool by_broker = r.broker.is_object() && r.broker.contains("first_death_reason");
  if (by_broker) {
    const std::string reason = r.broker.value("first_death_reason", std::string());
    return {r.record.created_at, "RabbitMQ", "quarantined",
            "dead-lettered by the broker itself" + (reason.empty() ? std::string() : " (reason " + reason + ")") +
                " from queue " + r.broker.value("first_death_queue", std::string("?"))};
  }
  std::string worker = "a worker";
  if (!r.attempts.empty() && !r.attempts.back().worker.empty()) worker = r.attempts.back().worker;
  return {r.record.created_at, "worker " + worker, "quarantined",
          (r.reason.empty() ? std::string("dead-lettered") : r.reason) + " (delivery " + std::to_string(r.deliveries) +
              " of message " + r.source_entry + " of queue " + (r.stream.empty() ? std::string("?") : r.stream) + ")"};
}

void AmqpQuarantine::add_broker_json(const FleetRecord& r, nlohmann::json& full) const { full["amqp"] = r.broker; }

Expected<FleetRecord> AmqpQuarantine::change_state(const std::string& id, bool refuse_while_replaying,
                                                   const StateChange& change) {
  // Its state comes from the log's compare and set, read once there.
  auto record = dead_letter_at(id);
  if (!record) return record;
  // A copy found by the get() before it (the verbs read the record first).
  if (const std::string first = copy_of(record->id); !first.empty()) {
    return Error::usage(record->id + " is a copy of record " + first + ": act on record " + first);
  }
  AmqpStateLog log(*c_, names_.work);
  auto written = log.change(record->id, [&](FleetState& state) {
    apply_state(*record, state, "");
    if (refuse_while_replaying) {
      // In each round: a replay that claimed the record in between won
      // the round this one lost.
      auto held = locked(record->id);
      if (!held) return Status::error(held.error());
      if (*held) {
        return Status::error("record " + id + " is being replayed right now; act on it when that replay is over",
                             ErrorCode::kUsage);
      }
    }
    return change(state, *record);
  });
  if (!written) return Error{written.error(), written.error_code()};
  apply_state(*record, std::move(*written), "");
  return record;
}

Expected<PayloadBytes> AmqpQuarantine::minimized_payload(const FleetRecord& r) {
  return minimized_payload_in(*AmqpPayloadStream::minimized(*c_, names_.work), r, hint_options());
}

std::unique_ptr<MinimizeKeeper> AmqpQuarantine::minimize_keeper(const std::string& id, const std::string& actor) {
  return log_minimize_keeper(*this, AmqpPayloadStream::minimized(*c_, names_.work), id, actor);
}

Expected<std::int64_t> AmqpQuarantine::keep_revision_payload(const FleetRecord& record, std::string_view bytes) {
  return AmqpPayloadStream::revisions(*c_, names_.work)->append(record.id, bytes);
}

Expected<std::string> AmqpQuarantine::revision_payload(const FleetRecord& record, const FleetRevision& revision) {
  return revision_payload_in(*AmqpPayloadStream::revisions(*c_, names_.work), record, revision);
}

Expected<std::vector<FleetRecord>> AmqpQuarantine::redrive_plan(const ReplayRun& run,
                                                                std::vector<std::string>& skipped) {
  return broker::redrive_plan(*this, run, skipped);
}
Expected<ReplayResult> AmqpQuarantine::redrive(const ReplayRun& run) {
  return broker::redrive(*amqp_redrive_route(*this, run), run);
}

}  // namespace pillbox::broker
