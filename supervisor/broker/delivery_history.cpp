#include "supervisor/broker/delivery_history.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <utility>

#include "supervisor/classify/outcome_json.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

// A delivery pillbox writes: a message of at most kMaxRecordedMessage bytes,
// a few frames and numbers.
constexpr std::size_t kMaxDeliveryBytes = 64 << 10;

}  // namespace

RecordedDelivery recorded_outcome(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                  const OutcomeRecord& outcome, bool charged, bool transient, std::string note) {
  RecordedDelivery d = recorded_release(delivery, worker, at_ms, std::move(note));
  static_cast<OutcomeRecord&>(d) = outcome;
  d.message.resize(std::min(d.message.size(), kMaxRecordedMessage));
  d.charged = charged;
  d.transient = transient;
  return d;
}

RecordedDelivery recorded_outcome(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                  const Outcome& outcome, bool charged, bool transient, std::string note) {
  return recorded_outcome(delivery, worker, at_ms, outcome_record(outcome), charged, transient, std::move(note));
}

RecordedDelivery recorded_release(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                  std::string note) {
  RecordedDelivery d;
  d.delivery = delivery;
  d.worker = worker;
  d.at_ms = at_ms;
  d.charged = false;
  d.note = std::move(note);
  return d;
}

RecordedDelivery recorded_suspect_release(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms,
                                          std::string note) {
  RecordedDelivery d = recorded_release(delivery, worker, at_ms, std::move(note));
  d.keeps_suspicion = true;
  return d;
}

RecordedDelivery recorded_start(std::uint32_t delivery, const std::string& worker, std::int64_t at_ms) {
  RecordedDelivery d = recorded_release(delivery, worker, at_ms, "started: a suspect, run alone");
  d.started = true;
  return d;
}

std::string delivery_json(const RecordedDelivery& d) {
  nlohmann::json j = {{"delivery", d.delivery}, {"worker", d.worker},   {"at_ms", d.at_ms},
                      {"kind", d.kind},         {"charged", d.charged}, {"transient", d.transient}};
  if (!d.kind.empty()) put_outcome_record(d, j);  // a release ran nothing: no outcome
  if (!d.note.empty()) j["note"] = d.note;
  if (d.started) j["started"] = true;
  if (d.keeps_suspicion) j["suspect"] = true;
  // A child's frames and messages need not be UTF-8.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::optional<RecordedDelivery> parse_delivery(std::uint32_t delivery, std::string_view text) {
  // Anyone who can write to Redis can write this hash: bounded.
  const auto j = parse_untrusted_json(text, kMaxDeliveryBytes).value;
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  try {
    // Strict: a field of the wrong type means the delivery is not ours.
    auto outcome = read_outcome_record(j, /*strict=*/true);
    if (!outcome) return std::nullopt;
    RecordedDelivery d;
    static_cast<OutcomeRecord&>(d) = std::move(*outcome);
    d.delivery = delivery;
    d.worker = j.value("worker", "");
    if (const auto at = j.find("at_ms"); at != j.end()) {
      const auto ms = json_whole_number(*at);  // null or a float: not ours
      if (!ms) return std::nullopt;
      d.at_ms = *ms;
    }
    if (!d.kind.empty() && !kind_from_string(d.kind)) return std::nullopt;
    d.charged = j.value("charged", true);
    d.transient = j.value("transient", false);
    d.note = j.value("note", "");
    d.started = j.value("started", false) && d.kind.empty();
    d.keeps_suspicion = j.value("suspect", false) && d.kind.empty() && !d.started;
    d.message.resize(std::min(d.message.size(), kMaxRecordedMessage));
    return d;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // a field of the wrong type
  }
}

EntryHistory entry_history(std::uint32_t current, const std::map<std::uint32_t, std::string>& fields,
                           UnmarkedSuspect unmarked) {
  EntryHistory h;
  bool previous_unreported = false;  // delivery n - 1 never reported back: n is a suspect's
  for (std::uint32_t n = 1; n < current; ++n) {
    const auto it = fields.find(n);
    const bool suspect = std::exchange(previous_unreported, true);
    if (it == fields.end()) {
      // A suspect records its start before it runs: without the marker, it
      // never started (see the header).
      (suspect && unmarked == UnmarkedSuspect::kUnstarted ? h.unstarted : h.lost).push_back(n);
      continue;
    }
    auto d = parse_delivery(n, it->second);
    if (d && d->started) {
      h.lost.push_back(n);  // it began to run and never reported back
      h.lost_starts.push_back(std::move(*d));
      continue;
    }
    // A suspect given back unrun leaves the suspicion where it was.
    previous_unreported = d && d->keeps_suspicion && suspect;
    if (d) {
      h.recorded.push_back(std::move(*d));
    } else {
      ++h.unreadable;
      h.recorded.push_back(recorded_release(n, "", 0, "unreadable record"));
    }
  }
  h.last_lost = previous_unreported;
  return h;
}

std::vector<store::AttemptSummary> engine_history(const EntryHistory& history, std::uint32_t current) {
  std::vector<store::AttemptSummary> out;
  for (const RecordedDelivery& d : history.recorded) {
    if (d.kind.empty()) continue;  // a release: nothing ran (not an attempt that never finished)
    out.push_back({.n = d.delivery, .finished = true, .kind = d.kind, .fingerprint = d.fingerprint,
                   .charged = d.charged && !d.transient});
  }
  if (history.last_lost) {
    store::AttemptSummary lost;
    lost.n = current - 1;
    out.push_back(lost);
  }
  return out;
}

Outcome outcome_of(const RecordedDelivery& d) { return pillbox::outcome_of(d, Kind::kSupervisorLost); }

}  // namespace pillbox::broker
