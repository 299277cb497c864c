#include "supervisor/broker/kafka_quarantine.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "supervisor/broker/fleet_log_minimize_keeper.h"
#include "supervisor/broker/kafka_fleet_record.h"
#include "supervisor/broker/kafka_payload_log.h"
#include "supervisor/broker/kafka_redrive.h"
#include "supervisor/ops/minimize.h"

namespace pillbox::broker {
namespace {

// Offsets of one partition read per window of a listing, newest first.
constexpr std::int64_t kWindow = 64;
// Payloads up to this size are kept by a listing; larger ones by get() only.
constexpr std::size_t kListedPayloadBytes = 64u << 10;

// A record's state as read, its lease (a replay at work) applied.
void apply_read_state(FleetRecord& r, const FleetState& state) {
  apply_state(r, state, kafka_lease_holder(state, store::now_ms()));
}

// One partition's place in a listing: the window read last (oldest first:
// its newest is at the back) and where the next window ends.
struct Cursor {
  std::int32_t partition = 0;
  std::int64_t low = 0;
  std::int64_t next_end = 0;
  std::vector<std::pair<std::int64_t, FleetRecord>> window;  // (timestamp, record), oldest first
};

}  // namespace

Expected<KafkaQuarantine> KafkaQuarantine::open(const KafkaBootstrap& bootstrap, const std::string& topic) {
  if (auto named = check_kafka_topic_name(topic); !named) return Error{named.message(), ErrorCode::kUsage};
  auto reader = KafkaPartitionReader::open(bootstrap, "pillbox-quarantine");
  if (!reader) return Error{reader.error(), ErrorCode::kSetup};
  const std::string dlq = kafka_dlq_topic(topic);
  auto partitions = (*reader)->partitions(dlq);
  if (!partitions) return Error{partitions.error(), partitions.error_code()};
  if (*partitions == 0) {
    return Error{"Kafka at " + bootstrap.joined() + " has no topic " + dlq + ": the dead letters of topic " + topic +
                     " go there, and no worker has been given it (check --topic; `pillbox worker --kafka " +
                     bootstrap.joined() + " --topic " + topic + " --create-topics` makes it)",
                 ErrorCode::kSetup};
  }
  return KafkaQuarantine(std::move(*reader), topic, *partitions);
}

bool KafkaQuarantine::answers() {
  auto partitions = reader_->partitions(kafka_dlq_topic(topic_));
  return partitions && *partitions > 0;
}

std::string KafkaQuarantine::where() const { return reader_->bootstrap().joined() + " " + kafka_dlq_topic(topic_); }

std::string KafkaQuarantine::hint_options() const {
  return " --kafka " + reader_->bootstrap().joined() + " --topic " + topic_;
}

Expected<std::string> KafkaQuarantine::parse_id(const std::string& text) const { return parse_kafka_record_id(text); }

FleetRecord KafkaQuarantine::record_of(const KafkaMessage& letter, std::size_t max_payload) const {
  FleetRecord r = kafka_fleet_record(read_kafka_dead_letter(letter), kafka_dead_letter_signature(letter, key()));
  if (r.payload.size() > max_payload) {
    // Its sha256 and size are the bytes' (kafka_fleet_record), kept.
    r.payload.clear();
    r.payload.shrink_to_fit();
    r.payload_omitted = true;
  }
  return r;
}

Status KafkaQuarantine::find_copies(std::int32_t p, std::int64_t end) {
  std::int64_t& scanned = scanned_to_[p];
  if (end <= scanned) return Status::ok();
  auto marks = reader_->watermarks(kafka_dlq_topic(topic_), p);
  if (!marks) return Status::error(marks.error(), marks.error_code());
  // Oldest first from where the last read stopped (a copy comes after its
  // record); the payloads' bytes are not kept, only their sha256.
  std::map<std::string, std::int64_t>& first = first_of_[p];
  std::int64_t read_to = std::max(scanned, marks->low);
  auto s = reader_->read(kafka_dlq_topic(topic_), p, read_to, end, [&](KafkaMessage&& m) {
    read_to = m.offset + 1;
    const KafkaDeadLetter letter = read_kafka_dead_letter(m);
    const std::string copy_key = kafka_copy_key(letter, kafka_dead_letter_signature(m, key()));
    if (copy_key.empty()) return true;
    const auto [it, inserted] = first.emplace(copy_key, m.offset);
    if (!inserted) copy_of_[kafka_record_id(p, m.offset)] = kafka_record_id(p, it->second);
    return true;
  });
  if (!s) return s;
  scanned = std::max(read_to, end);
  return Status::ok();
}

std::string KafkaQuarantine::copy_of(const std::string& id) const {
  const auto it = copy_of_.find(id);
  return it == copy_of_.end() ? "" : it->second;
}

Expected<RecordStates> KafkaQuarantine::states() {
  FleetStateLog log(*state_log_);
  auto loaded = log.load();
  unreadable_states_ = log.unreadable();
  return loaded;
}

std::string KafkaQuarantine::attempt_of(const KafkaMessage& m, const RecordStates& states) {
  const KafkaDeadLetter letter = read_kafka_dead_letter(m);
  const std::string replayed = kafka_replayed_record(letter);
  if (replayed.empty()) return "";
  const auto it = states.find(replayed);
  if (it == states.end() || !kafka_names_redrive(it->second.state, letter.dedupe_key)) return "";
  return replayed;
}

Status KafkaQuarantine::each(const std::function<bool(const FleetRecord&)>& fn) {
  copies_ = 0;
  attempts_ = 0;
  auto states = this->states();
  if (!states) return Status::error(states.error(), states.error_code());
  const std::string dlq = kafka_dlq_topic(topic_);
  std::vector<Cursor> cursors;
  for (std::int32_t p = 0; p < partitions_; ++p) {
    auto marks = reader_->watermarks(dlq, p);
    if (!marks) return Status::error(marks.error(), marks.error_code());
    if (auto s = find_copies(p, marks->high); !s) return s;
    cursors.push_back(Cursor{p, marks->low, marks->high, {}});
  }
  // Fills a cursor's window with the next one down that has a record (or
  // none left).
  auto fill = [&](Cursor& c) -> Status {
    while (c.window.empty() && c.next_end > c.low) {
      const std::int64_t from = std::max(c.low, c.next_end - kWindow);
      auto s = reader_->read(dlq, c.partition, from, c.next_end, [&](KafkaMessage&& m) {
        FleetRecord r = record_of(m, kListedPayloadBytes);
        if (!copy_of(r.id).empty()) {
          ++copies_;
          return true;
        }
        if (!attempt_of(m, *states).empty()) {
          ++attempts_;
          return true;
        }
        c.window.emplace_back(m.timestamp_ms, std::move(r));
        return true;
      });
      if (!s) return s;
      c.next_end = from;
    }
    return Status::ok();
  };
  for (Cursor& c : cursors) {
    if (auto s = fill(c); !s) return s;
  }
  for (;;) {
    // The newest letter at the front of any window; ties: the lower partition.
    Cursor* newest = nullptr;
    for (Cursor& c : cursors) {
      if (c.window.empty()) continue;
      if (newest == nullptr || c.window.back().first > newest->window.back().first) newest = &c;
    }
    if (newest == nullptr) return Status::ok();
    FleetRecord r = std::move(newest->window.back().second);
    newest->window.pop_back();
    if (const auto found = states->find(r.id); found != states->end()) apply_read_state(r, found->second.state);
    if (!fn(r)) return Status::ok();
    if (auto s = fill(*newest); !s) return s;
  }
}

std::string KafkaQuarantine::left_out() const {
  std::string said;
  if (copies_ > 0) {
    said = std::to_string(copies_) + " letter" + (copies_ == 1 ? "" : "s") + " of " + kafka_dlq_topic(topic_) +
           " left out: dead-lettered again, each a copy of an earlier record (the same pillbox.dedupe, value and "
           "signature: a worker stopped after its dead letter and before its settle entry, and the record ran "
           "again)";
  }
  if (attempts_ > 0) {
    said += (said.empty() ? "" : "\n") + std::to_string(attempts_) + " letter" + (attempts_ == 1 ? "" : "s") + " of " +
            kafka_dlq_topic(topic_) + " left out: the dead letter of a replay that failed again, an attempt of the "
            "record it replayed (shown by that record)";
  }
  if (unreadable_states_ > 0) {
    said += (said.empty() ? "" : "\n") + std::to_string(unreadable_states_) + " record" +
            (unreadable_states_ == 1 ? "" : "s") + " of " + kafka_state_log_topic(topic_) +
            " left out: not a state pillbox writes (leave that topic to pillbox)";
  }
  return said;
}

Expected<FleetRecord> KafkaQuarantine::get(const std::string& id) {
  auto r = dead_letter_at(id);
  if (!r) return r;
  auto states = this->states();
  if (!states) return Error{states.error(), states.error_code()};
  auto m = letter(r->id);
  if (!m) return Error{m.error(), m.error_code()};
  if (const std::string of = attempt_of(*m, *states); !of.empty()) {
    return Error::usage(r->id + " is the dead letter of a replay of record " + of + " that failed again, an attempt "
                        "of that record, not a record of its own (quarantine show " + of + hint_options() + ")");
  }
  if (const auto found = states->find(r->id); found != states->end()) apply_read_state(*r, found->second.state);
  return r;
}

Expected<KafkaMessage> KafkaQuarantine::letter(const std::string& id) {
  auto place = parse_kafka_place(id);
  if (!place) return Error{place.error(), place.error_code()};
  const std::string checked = kafka_record_id(place->partition, place->offset);
  std::optional<KafkaMessage> found;
  if (place->partition < partitions_) {
    auto s = reader_->read(kafka_dlq_topic(topic_), place->partition, place->offset, place->offset + 1,
                           [&](KafkaMessage&& m) {
      found = std::move(m);
      return false;
    });
    if (!s) return Error{s.message(), s.code()};
  }
  if (!found) return Error::usage("no letter " + checked + " in " + kafka_dlq_topic(topic_));
  return std::move(*found);
}

Expected<FleetRecord> KafkaQuarantine::dead_letter_at(const std::string& id) {
  auto place = parse_kafka_place(id);
  if (!place) return Error{place.error(), place.error_code()};
  const std::int32_t p = place->partition;
  const std::int64_t offset = place->offset;
  const std::string checked = kafka_record_id(p, offset);
  const std::string dlq = kafka_dlq_topic(topic_);
  const std::string none = "no record " + checked + " in the fleet's quarantine (" + dlq + " on " +
                           reader_->bootstrap().joined();
  const std::string see = "; see: pillbox quarantine list" + hint_options() + ")";
  if (p >= partitions_) {
    return Error::usage(none + " has " + std::to_string(partitions_) + " partition" + (partitions_ == 1 ? "" : "s") +
                        see);
  }
  auto marks = reader_->watermarks(dlq, p);
  if (!marks) return Error{marks.error(), marks.error_code()};
  std::optional<FleetRecord> found;
  if (offset >= marks->low && offset < marks->high) {
    auto s = reader_->read(dlq, p, offset, offset + 1, [&](KafkaMessage&& m) {
      found = record_of(m, ~std::size_t{0});
      return false;
    });
    if (!s) return Error{s.message(), s.code()};
  }
  if (!found) {
    return Error::usage(none + " holds offsets " + std::to_string(marks->low) + " to " +
                        std::to_string(marks->high - 1) + " of partition " + std::to_string(p) +
                        ", what retention has not removed" + see);
  }
  if (auto s = find_copies(p, offset + 1); !s) return Error{s.message(), s.code()};
  if (const std::string first = copy_of(found->id); !first.empty()) {
    return Error::usage(found->id + " is a copy of record " + first + ", not a record of its own: its record was "
                        "dead-lettered again with the same pillbox.dedupe, value and signature (pillbox settles at "
                        "least once); act on record " + first + " (quarantine show " + first + hint_options() + ")");
  }
  return std::move(*found);
}

store::AuditEntry KafkaQuarantine::dead_lettering(const FleetRecord& r) const {
  const bool by_worker = r.broker.is_object() && r.broker.contains("deliveries");
  std::string source = r.stream.empty() ? std::string("?") : r.stream;
  source = "record " + (r.source_entry.empty() ? std::string("?") : r.source_entry) + " of topic " + source;
  if (!by_worker) {
    return {r.record.created_at, "unknown producer", "quarantined",
            "written to " + kafka_dlq_topic(topic_) + " without a record pillbox can read (about " + source + ")"};
  }
  std::string worker = "a worker";
  if (!r.attempts.empty() && !r.attempts.back().worker.empty()) worker = r.attempts.back().worker;
  return {r.record.created_at, "worker " + worker, "quarantined",
          (r.reason.empty() ? std::string("dead-lettered") : r.reason) + " (delivery " + std::to_string(r.deliveries) +
              " of " + source + ")"};
}

void KafkaQuarantine::add_broker_json(const FleetRecord& r, nlohmann::json& full) const { full["kafka"] = r.broker; }

Expected<FleetRecord> KafkaQuarantine::change_state(const std::string& id, bool refuse_while_replaying,
                                                    const StateChange& change) {
  // Its state comes from the log's compare and set, read once there; a
  // copy is refused by dead_letter_at.
  auto record = dead_letter_at(id);
  if (!record) return record;
  FleetStateLog log(*state_log_);
  auto written = log.change(record->id, [&](FleetState& state) {
    apply_read_state(*record, state);
    // Checked in each round: a replay takes its lease by the same compare and set.
    if (refuse_while_replaying && record->replaying) {
      return Status::error("record " + record->id + " is being replayed right now (by " + record->replaying_by +
                               "); act on it when that replay is over",
                           ErrorCode::kUsage);
    }
    return change(state, *record);
  });
  if (!written) return Error{written.error(), written.error_code()};
  apply_read_state(*record, *written);
  return record;
}

Expected<PayloadBytes> KafkaQuarantine::minimized_payload(const FleetRecord& r) {
  return minimized_payload_in(*KafkaPayloadLog::minimized(*reader_, topic_), r, hint_options());
}

std::unique_ptr<MinimizeKeeper> KafkaQuarantine::minimize_keeper(const std::string& id, const std::string& actor) {
  return log_minimize_keeper(*this, KafkaPayloadLog::minimized(*reader_, topic_), id, actor);
}

Expected<std::int64_t> KafkaQuarantine::keep_revision_payload(const FleetRecord& record, std::string_view bytes) {
  return KafkaPayloadLog::revisions(*reader_, topic_)->append(record.id, bytes);
}

Expected<std::string> KafkaQuarantine::revision_payload(const FleetRecord& record, const FleetRevision& revision) {
  return revision_payload_in(*KafkaPayloadLog::revisions(*reader_, topic_), record, revision);
}

Expected<std::vector<FleetRecord>> KafkaQuarantine::redrive_plan(const ReplayRun& run,
                                                                 std::vector<std::string>& skipped) {
  return broker::redrive_plan(*this, run, skipped);
}

Expected<ReplayResult> KafkaQuarantine::redrive(const ReplayRun& run) {
  return broker::redrive(*kafka_redrive_route(*this, run), run);
}

}  // namespace pillbox::broker
