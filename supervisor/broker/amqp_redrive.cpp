#include "supervisor/broker/amqp_redrive.h"

#include <amqp.h>

#include <algorithm>
#include <map>
#include <optional>

#include "shared/sha256.h"
#include "supervisor/broker/amqp_dead_letter.h"
#include "supervisor/broker/amqp_state_log.h"
#include "supervisor/broker/amqp_stream_reader.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/store/replay_store.h"

namespace pillbox::broker {
namespace {

// What an outcome needs of a dead letter: its record, not its payload.
constexpr std::uint64_t kOutcomeBodyBytes = 64u << 10;

Error setup(std::string message) { return Error{std::move(message), ErrorCode::kSetup}; }

bool sendable(std::string_view s) { return !s.empty() && s.size() <= 255 && s.find('\0') == std::string_view::npos; }

// The sha256 of the body that came (a body not kept was hashed as it passed).
std::string body_sha256(const AmqpMessage& m) { return m.body_omitted ? m.omitted_body_sha256 : sha256_hex(m.body); }

class AmqpRedriveRoute final : public RedriveRoute {
 public:
  AmqpRedriveRoute(AmqpQuarantine& q, const ReplayRun& run)
      : q_(q), run_(run), state_log_(amqp_state_log_name(q.names().work)) {}

  FleetDeadLetters& dead_letters() override { return q_; }
  std::string work_name() const override { return q_.names().work; }
  std::string results_name() const override { return state_log_; }
  std::string dlq_name() const override { return q_.names().dlq; }
  std::string no_outcome_hint() const override {
    return "are workers running on " + q_.names().work + ", of a pillbox that writes their notices to " + state_log_ + "?";
  }

  Expected<std::map<std::string, RedriveOutcome>> earlier_outcomes(const std::vector<FleetRecord>& plan,
                                                                   std::vector<std::string>& notices) override;
  Status mark() override;
  Expected<std::string> start(FleetRecord& record, const RedrivePayload& what, std::size_t batch_no,
                              ReplayResult& result) override;
  Status renew(const std::vector<std::string>&) override { return Status::ok(); }  // held by the connection
  Expected<std::vector<RedriveOutcome>> outcomes(const std::map<std::string, std::string>& waited,
                                                 std::chrono::milliseconds most) override;
  Status unlock(const std::string& id) override { return q_.unlock(id); }

 private:
  AmqpConnection& c() { return q_.connection(); }
  // The state log exists (workers of an older pillbox did not make it).
  Status declare_state_log() { return broker::declare_state_log(c(), q_.names().work); }
  // The outcome `m` of NAME.dlq (at `offset`) or of the state log says of
  // one of `waited` (attempt -> record), if any.
  std::optional<RedriveOutcome> from_dead_letter(const AmqpMessage& m, const std::map<std::string, std::string>& waited);
  std::optional<RedriveOutcome> from_notice(const AmqpMessage& m, const std::map<std::string, std::string>& waited);
  // Takes back a claim whose message was not published (best effort: the
  // error that stops the replay is the publish's).
  void take_back(const std::string& id, const std::string& attempt, const std::string& why);
  // Whether `sha256` is that of the payload the redrive `attempt`
  // republished: a tag is read off NAME by whoever consumes it, and put on
  // another payload by whoever may publish there; a worker's dead letter or
  // notice of that one is not the redrive's outcome (found by an attack
  // review: a good record marked failed again by another payload's crash).
  bool of_payload(const std::string& attempt, const std::string& sha256) const {
    const auto it = payloads_.find(attempt);
    return it != payloads_.end() && it->second == sha256;
  }

  AmqpQuarantine& q_;
  const ReplayRun& run_;
  const std::string state_log_;
  std::optional<std::int64_t> dlq_from_;    // where outcomes are read from on (mark())
  std::optional<std::int64_t> state_from_;
  std::map<std::string, std::string> payloads_;  // redrive attempt -> sha256 of the payload it republished
};

std::optional<RedriveOutcome> AmqpRedriveRoute::from_dead_letter(const AmqpMessage& m,
                                                                 const std::map<std::string, std::string>& waited) {
  const auto tag = replay_tag(m.headers);
  if (!tag) return std::nullopt;
  const auto it = waited.find(tag->attempt);
  if (it == waited.end() || it->second != tag->record || is_canary(m, q_.names().work)) return std::nullopt;
  if (!of_payload(tag->attempt, body_sha256(m))) return std::nullopt;
  return redrive_failed_again(q_.record_of(m), tag->attempt);
}

std::optional<RedriveOutcome> AmqpRedriveRoute::from_notice(const AmqpMessage& m,
                                                            const std::map<std::string, std::string>& waited) {
  const auto notice = read_replay_notice(m);
  if (!notice) return std::nullopt;
  const auto it = waited.find(notice->tag.attempt);
  if (it == waited.end() || it->second != notice->tag.record) return std::nullopt;
  if (!of_payload(notice->tag.attempt, notice->payload_sha256)) return std::nullopt;
  RedriveOutcome o;
  o.outcome.kind = Kind::kOk;
  o.verdict = store::ReplayVerdict::kResolved;
  o.entry = notice->tag.attempt;
  o.worker = notice->worker.empty() ? "unknown" : notice->worker;
  o.outcome_entry = std::to_string(stream_offset(m)) + " of " + state_log_;
  // The result is its user's, in its reply_to or NAME.results: the replay
  // takes none (and so has no output to show).
  o.output_omitted = "its output went with its result to its reply_to, else " + q_.names().work + ".results" +
                     (notice->output_omitted.empty() ? std::string()
                                                     : " (" + table_cell(notice->output_omitted, 200) + ")");
  return o;
}

Expected<std::map<std::string, RedriveOutcome>> AmqpRedriveRoute::earlier_outcomes(const std::vector<FleetRecord>& plan,
                                                                                    std::vector<std::string>&) {
  std::map<std::string, std::string> wanted;  // attempt -> record id
  std::int64_t lowest = -1;                   // the oldest of their records
  for (const FleetRecord& r : plan) {
    if (r.state.waiting_entry.empty()) continue;
    wanted.emplace(r.state.waiting_entry, r.id);
    // The earlier redrive republished the revision its state names, or the
    // record's payload as it is in NAME.dlq.
    const auto revision = std::find_if(r.state.revisions.begin(), r.state.revisions.end(),
                                       [&](const FleetRevision& v) { return v.n == r.state.waiting_revision; });
    if (r.state.waiting_revision > 0 && revision != r.state.revisions.end()) {
      payloads_[r.state.waiting_entry] = revision->payload_sha256;
    } else if (r.payload_omitted) {
      auto whole = q_.message_at(r.id);
      if (!whole) return Error{whole.error(), whole.error_code()};
      payloads_[r.state.waiting_entry] = sha256_hex(whole->body);
    } else {
      payloads_[r.state.waiting_entry] = sha256_hex(r.payload);
    }
    const std::int64_t offset = std::stoll(r.id);
    if (lowest < 0 || offset < lowest) lowest = offset;
  }
  std::map<std::string, RedriveOutcome> found;
  if (wanted.empty()) return found;
  // A redrive's dead letter comes after its record's; a notice anywhere in
  // the log. What is not found is still waiting (start() says so): a
  // message on NAME cannot be looked up without taking it.
  AmqpStreamReader dlq(c(), q_.names().dlq, kOutcomeBodyBytes);
  auto dlq_end = dlq.end();
  if (!dlq_end) return Error{dlq_end.error()};
  auto s = dlq.read(lowest + 1, *dlq_end, [&](AmqpMessage&& m) {
    if (auto o = from_dead_letter(m, wanted); o && found.count(o->entry) == 0) found.emplace(o->entry, std::move(*o));
    return true;
  });
  if (!s) return Error{s.message()};
  if (auto d = declare_state_log(); !d) return Error{d.message(), d.code()};
  AmqpStreamReader log(c(), state_log_, kOutcomeBodyBytes);
  auto log_end = log.end();
  if (!log_end) return Error{log_end.error()};
  s = log.read(0, *log_end, [&](AmqpMessage&& m) {
    if (auto o = from_notice(m, wanted); o && found.count(o->entry) == 0) found.emplace(o->entry, std::move(*o));
    return true;
  });
  if (!s) return Error{s.message()};
  return found;
}

Status AmqpRedriveRoute::mark() {
  // Once: outcomes are read on from there, batch after batch.
  if (dlq_from_ && state_from_) return Status::ok();
  if (auto d = declare_state_log(); !d) return d;
  AmqpStreamReader dlq(c(), q_.names().dlq, kOutcomeBodyBytes);
  auto dlq_end = dlq.end();
  if (!dlq_end) return Status::error(dlq_end.error());
  AmqpStreamReader log(c(), state_log_, kOutcomeBodyBytes);
  auto log_end = log.end();
  if (!log_end) return Status::error(log_end.error());
  dlq_from_ = *dlq_end;
  state_from_ = *log_end;
  return Status::ok();
}

void AmqpRedriveRoute::take_back(const std::string& id, const std::string& attempt, const std::string& why) {
  (void)q_.change_state(id, false, [&](FleetState& s, const FleetRecord&) {
    if (s.waiting_entry != attempt) return Status::ok();
    s.waiting_entry.clear();
    s.waiting_revision = 0;
    s.updated_at = store::now_ms();
    s.audit.push_back({s.updated_at, run_.actor, "redrive-failed", "not put back on " + q_.names().work + ": " + why});
    return Status::ok();
  });
  (void)unlock(id);
}

Expected<std::string> AmqpRedriveRoute::start(FleetRecord& record, const RedrivePayload& what, std::size_t batch_no,
                                              ReplayResult& result) {
  const std::string& id = record.id;
  if (auto locked = q_.lock(id); !locked) {
    const int refused = c().refusal() ? c().refusal()->code : 0;
    // RabbitMQ says RESOURCE_LOCKED for a queue of that name that is not
    // exclusive too (durable, declared by someone else; PRECONDITION_FAILED
    // for one with other arguments): one a passive declare finds is no
    // replay's lock (another connection's exclusive queue is refused to it
    // as well). Said as it is, not as another replay at work, and left to
    // whoever made it (found by an attack review).
    if (refused == AMQP_RESOURCE_LOCKED && !c().check_queue(q_.lock_name(id))) {
      ++result.taken_by_others;
      result.skipped.push_back("record " + id + " is being replayed right now by another replay (it holds " +
                               q_.lock_name(id) + "): not redriven twice at once");
      return std::string();
    }
    if (refused == AMQP_RESOURCE_LOCKED || refused == AMQP_PRECONDITION_FAILED) {
      result.skipped.push_back("record " + id + " cannot be locked: " + q_.lock_name(id) +
                               " exists and is not a replay's lock (a queue someone else declared, not exclusive "
                               "to a connection); not redriven while it is there (delete that queue to replay it)");
      return std::string();
    }
    return Error{locked.message(), locked.code()};
  }
  auto attempt = new_replay_attempt();
  if (!attempt) {
    (void)unlock(id);
    return Error{attempt.error()};
  }
  std::string skip;
  auto claimed = q_.change_state(id, false, [&](FleetState& s, const FleetRecord& now) {
    if (!store::replayable(now.record.status, run_.scope())) {
      skip = "record " + id + " " + not_replayable_why(now.record.status, run_.scope(), id);
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
      skip = "record " + id + ": its earlier redrive (attempt " + s.waiting_entry + ") has no outcome yet: still on " +
             q_.names().work + " or held by a worker, or lost (" + q_.names().work +
             " purged); not redriven again until it is settled (--force republishes it)";
      return Status::error(skip, ErrorCode::kUsage);
    }
    s.waiting_entry = *attempt;
    s.waiting_revision = what.revision;
    s.updated_at = store::now_ms();
    s.audit.push_back({s.updated_at, run_.actor, "redriven",
                       "put back on " + q_.names().work + " for the fleet's workers (batch " + std::to_string(batch_no) +
                           ", attempt " + *attempt + ")"});
    return Status::ok();
  });
  if (!claimed) {
    (void)unlock(id);
    if (!skip.empty()) {
      result.skipped.push_back(skip);
      return std::string();
    }
    return Error{claimed.error(), claimed.error_code()};
  }
  record = std::move(*claimed);
  auto dead = q_.message_at(id);
  if (!dead) {
    take_back(id, *attempt, dead.error());
    return Error{dead.error(), dead.error_code()};
  }
  AmqpOutgoing m = redrive_message(*dead, ReplayTag{*attempt, id});
  if (what.revision > 0) m.body = what.bytes;  // a patch: its payload, as the original's message was sent
  payloads_[*attempt] = what.revision > 0 ? what.sha256 : sha256_hex(dead->body);
  Status sent = c().confirm_publishes();
  if (sent) sent = c().publish(q_.names().work, m);
  if (sent) sent = c().wait_confirmed();
  if (!sent) {
    take_back(id, *attempt, sent.message());
    if (sent.code() == ErrorCode::kUsage) {
      // It cannot be sent as it is (its headers and the tag over one
      // frame): this record is left, the rest go on.
      result.skipped.push_back("record " + id + " cannot be republished: " + sent.message());
      return std::string();
    }
    return setup(sent.message());
  }
  return *attempt;
}

Expected<std::vector<RedriveOutcome>> AmqpRedriveRoute::outcomes(const std::map<std::string, std::string>& waited,
                                                                 std::chrono::milliseconds most) {
  std::vector<RedriveOutcome> found;
  if (!dlq_from_ || !state_from_) return found;  // mark() first
  // One consume at a time on this connection: half the wait on each.
  const auto half = std::max(std::chrono::milliseconds(50), most / 2);
  AmqpStreamReader dlq(c(), q_.names().dlq, kOutcomeBodyBytes);
  auto next = dlq.read_new(*dlq_from_, half, [&](AmqpMessage&& m) {
    if (auto o = from_dead_letter(m, waited)) found.push_back(std::move(*o));
  });
  if (!next) return Error{next.error()};
  dlq_from_ = *next;
  AmqpStreamReader log(c(), state_log_, kOutcomeBodyBytes);
  next = log.read_new(*state_from_, half, [&](AmqpMessage&& m) {
    if (auto o = from_notice(m, waited)) found.push_back(std::move(*o));
  });
  if (!next) return Error{next.error()};
  state_from_ = *next;
  return found;
}

}  // namespace

std::unique_ptr<RedriveRoute> amqp_redrive_route(AmqpQuarantine& quarantine, const ReplayRun& run) {
  return std::make_unique<AmqpRedriveRoute>(quarantine, run);
}

AmqpOutgoing redrive_message(const AmqpMessage& dead_letter, const ReplayTag& tag) {
  AmqpOutgoing out;
  out.body = dead_letter.body;
  out.message_id = dead_letter.message_id;
  out.correlation_id = dead_letter.correlation_id;
  const AmqpDeadLetter d = read_dead_letter(dead_letter);
  // pillbox's dead letter keeps the original's reply_to in pillbox-original;
  // one the broker wrote keeps the message's properties as they were.
  if (d.from_pillbox()) {
    if (d.original.is_object() && d.original.contains("reply_to") && d.original["reply_to"].is_string()) {
      const std::string& r = d.original["reply_to"].get_ref<const std::string&>();
      if (sendable(r)) out.reply_to = r;
    }
  } else if (sendable(dead_letter.reply_to)) {
    out.reply_to = dead_letter.reply_to;
  }
  for (const AmqpField& f : dead_letter.headers) {
    if (f.name.rfind("x-", 0) == 0 || f.name.rfind("pillbox-", 0) == 0 || f.name == "CC" || f.name == "BCC") continue;
    out.headers.push_back(f);
  }
  add_replay_tag(out.headers, tag);
  return out;
}

}  // namespace pillbox::broker
