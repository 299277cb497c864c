#include "supervisor/broker/kafka_redrive.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "supervisor/broker/kafka_attempt_entry.h"
#include "supervisor/broker/kafka_fleet_record.h"
#include "supervisor/broker/kafka_producer.h"
#include "supervisor/broker/kafka_quarantine.h"
#include "supervisor/broker/kafka_result.h"
#include "supervisor/io/random_hex.h"
#include "supervisor/store/replay_store.h"

namespace pillbox::broker {
namespace {

// A claim's waiting_entry before the cluster says where its record went.
constexpr std::string_view kPending = "replay-";
// How often outcomes() looks at the attempt log again while it waits.
constexpr std::chrono::milliseconds kPollEvery{200};

bool pillbox_header(const std::string& name) { return name.rfind("pillbox-", 0) == 0 || name.rfind("pillbox.", 0) == 0; }

// "T/p@o" of topic `topic` read back, or nullopt when it is not one.
std::optional<KafkaPlace> parse_source_key(const std::string& key, const std::string& topic) {
  const std::string prefix = topic + "/";
  if (key.rfind(prefix, 0) != 0) return std::nullopt;
  auto place = parse_kafka_place(key.substr(prefix.size()));
  if (!place) return std::nullopt;
  return *place;
}

class KafkaRedriveRoute final : public RedriveRoute {
 public:
  KafkaRedriveRoute(KafkaQuarantine& q, const ReplayRun& run, std::string holder)
      : q_(q), run_(run), holder_(std::move(holder)) {}

  FleetDeadLetters& dead_letters() override { return q_; }
  std::string work_name() const override { return q_.topic(); }
  std::string results_name() const override { return kafka_results_topic(q_.topic()); }
  std::string dlq_name() const override { return kafka_dlq_topic(q_.topic()); }
  std::string no_outcome_hint() const override {
    return "are workers running on topic " + q_.topic() + ", writing their settled entries to " +
           attempt_log_topic(q_.topic()) + "?";
  }

  Expected<std::map<std::string, RedriveOutcome>> earlier_outcomes(const std::vector<FleetRecord>& plan,
                                                                   std::vector<std::string>& notices) override;
  Status mark() override;
  Expected<std::string> start(FleetRecord& record, const RedrivePayload& what, std::size_t batch_no,
                              ReplayResult& result) override;
  Status renew(const std::vector<std::string>& ids) override;
  Expected<std::vector<RedriveOutcome>> outcomes(const std::map<std::string, std::string>& waited,
                                                 std::chrono::milliseconds most) override;
  Status unlock(const std::string& id) override;

 private:
  // Reads partition `p` of the attempt log over [from, to) and hands each
  // settled entry of an offset in `offsets` to `found` (the first of each),
  // but an "ok" with no start of its delivery before it, whose offset goes
  // to `lone` instead.
  Status settled_entries(std::int32_t p, std::int64_t from, std::int64_t to, const std::set<std::int64_t>& offsets,
                         std::map<std::int64_t, AttemptEntry>& found, std::set<std::int64_t>& lone);
  // What a lone "ok" of the redrive `entry` means, for a message.
  std::string lone_ok(const std::string& entry) const;
  // The outcome a settled entry of the redrive `entry` says; nullopt when
  // it names a dead letter that is not of `entry` (forged: said in `why`).
  Expected<std::optional<RedriveOutcome>> outcome_of_settled(const std::string& entry, const AttemptEntry& settled,
                                                             std::string& why);
  // Takes back the claim `pending` of record `id` (its record was not
  // produced), best effort: the error that stops the replay is the produce's.
  void take_back(const std::string& id, const std::string& pending, const std::string& why);
  Status open_producer();

  KafkaQuarantine& q_;
  const ReplayRun& run_;
  const std::string holder_;  // this replay's name in a lease
  std::unique_ptr<KafkaProducer> producer_;
  std::map<std::int32_t, std::int64_t> from_;  // the attempt log's partitions, read up to here (mark())
  std::map<std::string, std::int64_t> renewed_until_;  // record id -> its lease's end as last written
  // The start entries of the records waited for that settled_entries read:
  // (T's partition, offset, delivery, group) -> where in the attempt log.
  using StartKey = std::tuple<std::int32_t, std::int64_t, std::uint32_t, std::string>;
  std::map<StartKey, std::int64_t> started_;
};

Status KafkaRedriveRoute::open_producer() {
  if (producer_) return Status::ok();
  // The Java clients' partitioner: a key lands where theirs put it.
  auto producer = open_kafka_tool_producer(q_.bootstrap(), "pillbox-replay", {{"partitioner", "murmur2_random"}});
  if (!producer) return Status::error(producer.error(), ErrorCode::kSetup);
  producer_ = std::move(*producer);
  return Status::ok();
}

Status KafkaRedriveRoute::settled_entries(std::int32_t p, std::int64_t from, std::int64_t to,
                                          const std::set<std::int64_t>& offsets,
                                          std::map<std::int64_t, AttemptEntry>& found, std::set<std::int64_t>& lone) {
  return q_.reader().read(attempt_log_topic(q_.topic()), p, from, to, [&](KafkaMessage&& m) {
    const ParsedAttemptEntry parsed = parse_attempt_entry(p, m.key, m.value);
    if (!parsed.entry || offsets.count(parsed.entry->offset) == 0) return true;
    const AttemptEntry& e = *parsed.entry;
    const StartKey start{e.partition, e.offset, e.delivery, e.group};
    if (e.kind == AttemptEntryKind::kStart) {
      started_.emplace(start, m.offset);  // the first of each
    } else if (e.kind == AttemptEntryKind::kSettled) {
      // An ok is believed as it is (a dead letter is checked against its
      // letter): a worker writes it after the start of the delivery it
      // settles, acknowledged before the record ran, so an ok with no such
      // start before it in the log was written by someone else. A forger
      // who writes the start too is believed: the attempt log is as
      // trusted as the state log (docs/distributed.md, Kafka: who may
      // write to what).
      const auto it = started_.find(start);
      const bool after_start = it != started_.end() && it->second < m.offset;
      if (e.settlement.how != KafkaSettlement::How::kOk || after_start) {
        found.emplace(e.offset, e);
      } else {
        lone.insert(e.offset);
      }
    }
    return true;
  }, kMaxAttemptEntryBytes + 1);
}

Expected<std::optional<RedriveOutcome>> KafkaRedriveRoute::outcome_of_settled(const std::string& entry,
                                                                              const AttemptEntry& settled,
                                                                              std::string& why) {
  if (settled.settlement.how == KafkaSettlement::How::kOk) {
    RedriveOutcome o;
    o.outcome.kind = Kind::kOk;
    o.verdict = store::ReplayVerdict::kResolved;
    o.entry = entry;
    o.worker = settled.worker.empty() ? "unknown" : settled.worker;
    o.outcome_entry = settled.settlement.where.empty() ? "none (the worker keeps no results)" : settled.settlement.where;
    o.output_omitted = settled.settlement.where.empty()
                           ? "the worker keeps no results (it was not given --results)"
                           : "its output is in its result, " + settled.settlement.where;
    return std::optional<RedriveOutcome>(std::move(o));
  }
  // "T.dlq p@o": the letter must be this redrive's (a settled entry is a
  // claim anyone who may write to the attempt log can make).
  const std::string prefix = dlq_name() + " ";
  const std::string& where = settled.settlement.where;
  auto id = where.rfind(prefix, 0) == 0 ? parse_kafka_record_id(where.substr(prefix.size()))
                                        : Expected<std::string>(Error::usage("not in " + dlq_name()));
  if (!id) {
    why = "the settled entry of " + entry + " names no letter of " + dlq_name() + ": not its outcome";
    return std::optional<RedriveOutcome>();
  }
  auto letter = q_.letter(*id);
  if (!letter) return Error{letter.error(), letter.error_code()};
  const KafkaDeadLetter read = read_kafka_dead_letter(*letter);
  if (read.dedupe_key != entry) {
    why = "the settled entry of " + entry + " names " + *id + " of " + dlq_name() + ", a letter of " +
          (read.dedupe_key.empty() ? std::string("no consistent source") : read.dedupe_key) + ": not its outcome";
    return std::optional<RedriveOutcome>();
  }
  return std::optional<RedriveOutcome>(redrive_failed_again(q_.letter_record(*letter), entry));
}

std::string KafkaRedriveRoute::lone_ok(const std::string& entry) const {
  return "the settled entry of its redrive " + entry + " in " + attempt_log_topic(q_.topic()) +
         " says ok with no start entry of its delivery before it: no worker wrote it (only workers should be "
         "allowed to write to that topic), so it is not the redrive's outcome; the workers skip a record settled "
         "there, so none will come: the record waits, and --force republishes it once the topic is safe";
}

Expected<std::map<std::string, RedriveOutcome>> KafkaRedriveRoute::earlier_outcomes(
    const std::vector<FleetRecord>& plan, std::vector<std::string>& notices) {
  std::map<std::int32_t, std::set<std::int64_t>> wanted;  // T's partition -> offsets
  for (const FleetRecord& r : plan) {
    if (const auto at = parse_source_key(r.state.waiting_entry, q_.topic())) wanted[at->partition].insert(at->offset);
  }
  std::map<std::string, RedriveOutcome> found;
  // The whole partition that retention keeps: an earlier replay's record
  // may have been settled any time since.
  for (const auto& [p, offsets] : wanted) {
    auto marks = q_.reader().watermarks(attempt_log_topic(q_.topic()), p);
    if (!marks) return Error{marks.error(), marks.error_code()};
    std::map<std::int64_t, AttemptEntry> settled;
    std::set<std::int64_t> lone;
    if (auto s = settled_entries(p, marks->low, marks->high, offsets, settled, lone); !s) {
      return Error{s.message(), s.code()};
    }
    for (const std::int64_t offset : lone) {
      if (settled.count(offset) == 0) notices.push_back(lone_ok(kafka_source_key(q_.topic(), p, offset)));
    }
    for (const auto& [offset, e] : settled) {
      const std::string entry = kafka_source_key(q_.topic(), p, offset);
      std::string why;
      auto o = outcome_of_settled(entry, e, why);
      if (!o) return Error{o.error(), o.error_code()};
      if (*o) {
        found.emplace(entry, std::move(**o));
      } else {
        notices.push_back(why);
      }
    }
  }
  return found;
}

Status KafkaRedriveRoute::mark() {
  // Once: outcomes are read on from there, batch after batch.
  if (!from_.empty()) return Status::ok();
  const std::string log = attempt_log_topic(q_.topic());
  auto partitions = q_.reader().partitions(log);
  if (!partitions) return Status::error(partitions.error(), partitions.error_code());
  if (*partitions == 0) {
    return Status::error("Kafka at " + q_.bootstrap().joined() + " has no topic " + log + ": a replay finds how "
                         "its records ended there (is topic " + q_.topic() + " worked by pillbox workers?)",
                         ErrorCode::kSetup);
  }
  for (std::int32_t p = 0; p < *partitions; ++p) {
    auto marks = q_.reader().watermarks(log, p);
    if (!marks) return Status::error(marks.error(), marks.error_code());
    from_[p] = marks->high;
  }
  return Status::ok();
}

void KafkaRedriveRoute::take_back(const std::string& id, const std::string& pending, const std::string& why) {
  (void)q_.change_state(id, false, [&](FleetState& s, const FleetRecord&) {
    if (s.waiting_entry != pending) return Status::ok();
    s.waiting_entry.clear();
    s.updated_at = store::now_ms();
    s.audit.push_back({s.updated_at, run_.actor, "redrive-failed", "not put back on " + q_.topic() + ": " + why});
    return Status::ok();
  });
  (void)unlock(id);
}

Expected<std::string> KafkaRedriveRoute::start(FleetRecord& record, const RedrivePayload& what, std::size_t batch_no,
                                               ReplayResult& result) {
  const std::string id = record.id;
  auto hex = random_hex(8);
  if (!hex) return Error{hex.error(), ErrorCode::kSetup};
  const std::string pending = std::string(kPending) + *hex;
  std::string skip;
  bool taken = false;
  auto claimed = q_.change_state(id, false, [&](FleetState& s, const FleetRecord& now) {
    const std::int64_t at = store::now_ms();
    if (const std::string by = kafka_lease_holder(s, at); !by.empty() && by != holder_) {
      taken = true;
      skip = "record " + id + " is being replayed right now by another replay (" + by + ", its lock in " +
             kafka_state_log_topic(q_.topic()) + "): not redriven twice at once";
      return Status::error(skip, ErrorCode::kUsage);
    }
    if (!store::replayable(s.status, run_.scope())) {
      skip = "record " + id + " " + not_replayable_why(s.status, run_.scope(), id);
      return Status::error(skip, ErrorCode::kUsage);
    }
    if (auto allowed = check_redrive_allowance(q_, now, run_); !allowed) {  // revoked since the plan, say
      skip = allowed.message();
      return Status::error(skip, ErrorCode::kUsage);
    }
    if (const std::string why = patched_since(s, what, id); !why.empty()) {
      skip = why;
      return Status::error(skip, ErrorCode::kUsage);
    }
    if (!s.waiting_entry.empty() && !run_.force) {
      skip = "record " + id + ": its earlier redrive (" + s.waiting_entry + ") has no outcome yet: " +
             (s.waiting_entry.rfind(kPending, 0) == 0
                  ? "its replay stopped before the cluster said where the record went (look for the header " +
                        std::string(kKafkaReplayHeader) + " = " + id + " in " + q_.topic() + ")"
                  : "not settled by a worker yet (see " + attempt_log_topic(q_.topic()) + ")") +
             "; not redriven again until it is settled (--force republishes it)";
      return Status::error(skip, ErrorCode::kUsage);
    }
    s.lease_by = holder_;
    s.lease_until = at + kKafkaReplayLease.count();
    s.waiting_entry = pending;
    s.waiting_revision = what.revision;
    s.updated_at = at;
    s.audit.push_back({at, run_.actor, "redriven",
                       "put back on " + q_.topic() + " for the fleet's workers (batch " + std::to_string(batch_no) +
                           ", " + pending + ")"});
    return Status::ok();
  });
  if (!claimed) {
    if (!skip.empty()) {
      if (taken) ++result.taken_by_others;
      result.skipped.push_back(skip);
      return std::string();
    }
    return Error{claimed.error(), claimed.error_code()};
  }
  record = std::move(*claimed);
  renewed_until_[id] = record.state.lease_until;
  auto letter = q_.letter(id);
  if (!letter) {
    take_back(id, pending, letter.error());
    return Error{letter.error(), letter.error_code()};
  }
  Status sent = open_producer();
  std::optional<Expected<KafkaDelivered>> reported;
  if (sent) {
    KafkaOutgoing m = kafka_redrive_record(*letter, q_.topic(), id);
    if (what.revision > 0) m.value = what.bytes;  // a patch: its payload, with the original's key and headers
    reported = producer_->produce_and_wait(m, static_cast<int>(kKafkaDeliveryTimeout.count()));
  }
  if (sent && !reported) {
    // It may have been written: the claim stays, so it is not produced twice.
    return Error{"no delivery report from Kafka at " + q_.bootstrap().joined() + " for the redrive of record " + id +
                     " within " + std::to_string(kKafkaDeliveryTimeout.count() / 1000) + " s; it may be on " +
                     q_.topic() + " (header " + std::string(kKafkaReplayHeader) + " = " + id +
                     "): the record waits (" + pending + "), --force republishes it",
                 ErrorCode::kSetup};
  }
  if (sent && !*reported) sent = Status::error(reported->error(), ErrorCode::kSetup);
  if (!sent) {
    take_back(id, pending, sent.message());
    return Error{"cannot republish record " + id + " to " + q_.topic() + ": " + sent.message(), ErrorCode::kSetup};
  }
  const KafkaDelivered at = **reported;
  const std::string entry = kafka_source_key(q_.topic(), at.partition, at.offset);
  auto placed = q_.change_state(id, false, [&](FleetState& s, const FleetRecord&) {
    if (s.waiting_entry != pending) return Status::ok();  // --force by another replay since: its claim now
    s.waiting_entry = entry;
    if (!s.audit.empty() && s.audit.back().action == "redriven") s.audit.back().detail += ": " + entry;
    return Status::ok();
  });
  if (!placed) {
    return Error{"record " + id + " was republished as " + entry + " but its state could not say so (" +
                     placed.error() + "): it waits (" + pending + "); its outcome is " + entry + "'s",
                 placed.error_code()};
  }
  record = std::move(*placed);
  return entry;
}

Status KafkaRedriveRoute::renew(const std::vector<std::string>& ids) {
  // Written when half the lease is gone: every write stays in T.dlq.state.
  const std::int64_t now = store::now_ms();
  for (const std::string& id : ids) {
    auto it = renewed_until_.find(id);
    if (it != renewed_until_.end() && it->second - now > kKafkaReplayLease.count() / 2) continue;
    auto renewed = q_.change_state(id, false, [&](FleetState& s, const FleetRecord&) {
      if (s.lease_by != holder_) return Status::ok();  // not ours (ran out and taken): the claim still holds
      s.lease_until = store::now_ms() + kKafkaReplayLease.count();
      return Status::ok();
    });
    if (!renewed) return Status::error(renewed.error(), renewed.error_code());
    renewed_until_[id] = renewed->state.lease_until;
  }
  return Status::ok();
}

Status KafkaRedriveRoute::unlock(const std::string& id) {
  renewed_until_.erase(id);
  auto unlocked = q_.change_state(id, false, [&](FleetState& s, const FleetRecord&) {
    if (s.lease_by != holder_) return Status::ok();
    s.lease_by.clear();
    s.lease_until = 0;
    return Status::ok();
  });
  if (!unlocked) return Status::error(unlocked.error(), unlocked.error_code());
  return Status::ok();
}

Expected<std::vector<RedriveOutcome>> KafkaRedriveRoute::outcomes(const std::map<std::string, std::string>& waited,
                                                                  std::chrono::milliseconds most) {
  std::vector<RedriveOutcome> found;
  if (from_.empty()) return found;  // mark() first
  std::map<std::int32_t, std::set<std::int64_t>> wanted;
  for (const auto& [entry, id] : waited) {
    if (const auto at = parse_source_key(entry, q_.topic())) wanted[at->partition].insert(at->offset);
  }
  const auto deadline = std::chrono::steady_clock::now() + most;
  for (;;) {
    for (const auto& [p, offsets] : wanted) {
      auto marks = q_.reader().watermarks(attempt_log_topic(q_.topic()), p);
      if (!marks) return Error{marks.error(), marks.error_code()};
      std::int64_t& from = from_[p];
      std::map<std::int64_t, AttemptEntry> settled;
      std::set<std::int64_t> lone;
      if (auto s = settled_entries(p, from, marks->high, offsets, settled, lone); !s) {
        return Error{s.message(), s.code()};
      }
      from = std::max(from, marks->high);
      for (const std::int64_t offset : lone) {
        // The workers skip a record settled in the log, so no other
        // outcome comes: waiting out --batch-timeout would say less.
        if (settled.count(offset) == 0) {
          const std::string entry = kafka_source_key(q_.topic(), p, offset);
          const auto of = waited.find(entry);
          return Error{"record " + (of == waited.end() ? std::string("?") : of->second) + ": " + lone_ok(entry),
                       ErrorCode::kSetup};
        }
      }
      for (const auto& [offset, e] : settled) {
        std::string why;
        auto o = outcome_of_settled(kafka_source_key(q_.topic(), p, offset), e, why);
        if (!o) return Error{o.error(), o.error_code()};
        if (*o) found.push_back(std::move(**o));
      }
    }
    if (!found.empty() || std::chrono::steady_clock::now() + kPollEvery > deadline) return found;
    std::this_thread::sleep_for(kPollEvery);
  }
}

}  // namespace

std::unique_ptr<RedriveRoute> kafka_redrive_route(KafkaQuarantine& quarantine, const ReplayRun& run) {
  auto hex = random_hex(8);
  return std::make_unique<KafkaRedriveRoute>(quarantine, run,
                                             run.actor + " (replay " + (hex ? *hex : std::string("?")) + ")");
}

KafkaOutgoing kafka_redrive_record(const KafkaMessage& letter, const std::string& topic, const std::string& record_id) {
  KafkaOutgoing out;
  out.topic = topic;
  out.key = letter.key;
  out.value = letter.value;
  for (const auto& [name, value] : letter.headers) {
    if (!pillbox_header(name)) out.headers.emplace_back(name, value);
  }
  out.headers.emplace_back(std::string(kKafkaReplayHeader), record_id);
  return out;
}

std::string kafka_lease_holder(const FleetState& state, std::int64_t now_ms) {
  // A lease is a claim anyone who may write to T.dlq.state can make. A
  // replay writes one that ends a lease from its now; one that ends later
  // than a lease and as much again for the writers' clocks (which the
  // lease already trusts to within a lease) was written by no replay, and
  // would hold the record for as long as it says: years, for 2^63-1. It
  // holds nothing (the claim, not the lease, keeps a record from being
  // republished twice).
  const std::int64_t longest = 2 * kKafkaReplayLease.count();
  if (state.lease_until <= now_ms || state.lease_until - now_ms > longest) return "";
  return state.lease_by;
}

std::string kafka_replayed_record(const KafkaDeadLetter& letter) {
  const std::string carried = std::string(kRenamedHeaderPrefix) + std::string(kKafkaReplayHeader);
  for (const auto& [name, value] : letter.carried) {
    if (name == carried && value) return *value;
  }
  return "";
}

bool kafka_names_redrive(const FleetState& state, const std::string& dedupe_key) {
  if (dedupe_key.empty()) return false;
  if (state.waiting_entry == dedupe_key) return true;
  return std::any_of(state.redrives.begin(), state.redrives.end(),
                     [&](const FleetAttempt& a) { return a.entry == dedupe_key; });
}

}  // namespace pillbox::broker
