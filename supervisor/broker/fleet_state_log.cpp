#include "supervisor/broker/fleet_state_log.h"

#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

#include "supervisor/io/random_hex.h"
#include "supervisor/io/untrusted_json.h"

namespace pillbox::broker {
namespace {

// Compare-and-set rounds before change() gives up (each lost round means
// another process changed the record in between).
constexpr int kCasRounds = 16;

struct StateEntry {
  std::string record;
  std::int64_t version = 0;
  FleetState state;
};

// An entry of the log read back, or none when it is not pillbox's.
std::optional<StateEntry> read_state_entry(const StateLogEntry& e) {
  if (e.body == nullptr) return std::nullopt;
  auto parsed = parse_untrusted_json(*e.body, kMaxStateBytes);
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
  return StateEntry{record->get<std::string>(), version->get<std::int64_t>(), std::move(*fleet_state)};
}

}  // namespace

Status FleetStateLog::fold(RecordStates& states, std::int64_t from, std::int64_t to,
                           const std::function<bool(const StateLogEntry&)>& until) {
  return log_.read(from, to, [&](const StateLogEntry& e) {
    if (auto s = read_state_entry(e)) {
      RecordStateVersion& current = states[s->record];
      // The first of each next version wins; a later one lost its race.
      if (s->version == current.version + 1) current = RecordStateVersion{s->version, std::move(s->state)};
    } else {
      ++unreadable_;
    }
    return until(e);
  });
}

Expected<RecordStates> FleetStateLog::load() {
  RecordStates states;
  unreadable_ = 0;
  end_ = 0;
  auto end = log_.end();
  if (!end) return Error{end.error(), end.error_code()};
  if (auto s = fold(states, 0, *end, [](const StateLogEntry&) { return false; }); !s) {
    return Error{s.message(), s.code()};
  }
  end_ = *end;
  return states;
}

Expected<FleetState> FleetStateLog::change(const std::string& id, const std::function<Status(FleetState&)>& change) {
  if (auto s = log_.prepare(); !s) return Error{s.message(), s.code()};
  const std::string name = log_.name();
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
                   std::to_string(kMaxStateBytes) + " a state in " + name +
                   " may be (an audit trail of thousands of actions, or a state not pillbox wrote); not changed"};
    }
    if (auto s = log_.append(text, *writer); !s) return Error{s.message(), s.code()};
    // Read on from where the log ended until this change comes back: it
    // won if no other version `version + 1` of the record came first.
    bool won = false;
    bool beaten = false;
    bool unread = false;
    auto s = fold(*states, end_, -1, [&](const StateLogEntry& seen) {
      if (seen.writer != nullptr && *seen.writer == *writer) {
        // In effect only as readers read it: this entry, read back as a
        // state of this record at this version.
        const auto own = read_state_entry(seen);
        unread = !own || own->record != id || own->version != version + 1;
        won = !beaten && !unread;
        return true;
      }
      if (auto other = read_state_entry(seen); other && other->record == id && other->version == version + 1) {
        beaten = true;
      }
      return false;
    });
    if (!s) return Error{s.message(), s.code()};
    if (unread) {
      return Error{"record " + id + "'s change came back from " + name + " as no state a reader keeps; not in effect"};
    }
    if (won) return next;
  }
  return Error{"record " + id + "'s state kept changing under us (" + std::to_string(kCasRounds) +
               " tries; other operators at work?); try again"};
}

}  // namespace pillbox::broker
