#pragma once
// What operators did with the records of a fleet's quarantine (discard,
// allow, reproduce's verdict), where the broker keeps no values that can
// change: each change is an entry of its own in an append-only log
// (RabbitMQ's stream NAME.dlq.state: amqp_state_log.h; Kafka's topic
// T.dlq.state: kafka_state_log.h), never changed:
//
//   body     {"record": "<the record's id>", "version": N, "state": <fleet_state.h's JSON>}
//   header   pillbox-writer: the writing process's random id
//
// A record's state is its first entry of version 1, then the first of
// version 2 after it, and so on, in the log's order: every reader computes
// the same. A change is a compare and set: read the log, append version
// N + 1, read on from where the log ended until the change comes back;
// when another version N + 1 of that record comes first, the change lost,
// and is tried again on what won (fleet_quarantine.h's Redis CAS, by
// another means). An entry that is not pillbox's (not JSON of this form)
// is left out and counted (unreadable()).
//
// The log is as trusted as NAME:dlq:state is on Redis: whoever may write to
// it can write a state. It must keep every entry (no retention, no
// compaction): a state removed is a record back to "quarantined".
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

#include "shared/status.h"
#include "supervisor/broker/fleet_state.h"

namespace pillbox::broker {

// The header that names an entry's writer.
inline constexpr std::string_view kStateWriterHeader = "pillbox-writer";
// A state entry is at most this (its audit trail grows with each
// operator's action; a record with thousands is not a state pillbox writes).
inline constexpr std::size_t kMaxStateBytes = 1u << 20;

struct RecordStateVersion {
  std::int64_t version = 0;  // 0: nobody acted on it yet
  FleetState state;
};
using RecordStates = std::map<std::string, RecordStateVersion>;

// One entry of a log as the broker's adapter read it.
struct StateLogEntry {
  const std::string* body = nullptr;    // null: none a reader keeps (over kMaxStateBytes, not text)
  const std::string* writer = nullptr;  // its pillbox-writer header, null when none
};

// The broker's part: one append-only log, read by position.
class StateLogAccess {
 public:
  virtual ~StateLogAccess() = default;
  // Its name, for messages (NAME.dlq.state).
  virtual std::string name() const = 0;
  // The position after its last entry now; 0 when there is no log yet.
  virtual Expected<std::int64_t> end() = 0;
  // Its entries from `from`, in order, each to `stop` (true: stop after
  // it), up to `to`; `to` < 0: on to the end, until `stop` says so (an
  // entry appended and acknowledged is there to be read). Entries that are
  // not states of any kind (a broker's own notices) may be skipped.
  virtual Status read(std::int64_t from, std::int64_t to, const std::function<bool(const StateLogEntry&)>& stop) = 0;
  // Makes the log ready for append (declares or checks it).
  virtual Status prepare() = 0;
  // Appends `body` with `writer` as its pillbox-writer header, and returns
  // once the broker has it.
  virtual Status append(const std::string& body, const std::string& writer) = 0;
};

class FleetStateLog {
 public:
  // `log` outlives this.
  explicit FleetStateLog(StateLogAccess& log) : log_(log) {}

  // Every record's state, from the log's first entry (none yet: empty).
  Expected<RecordStates> load();
  // Applies `change` to record `id`'s state as a compare and set (up to
  // 16 tries against other writers). Returns the state written.
  Expected<FleetState> change(const std::string& id, const std::function<Status(FleetState&)>& change);
  // Entries the last load() left out (not pillbox's).
  std::int64_t unreadable() const { return unreadable_; }

 private:
  // Folds the log's entries at [from, to) into `states` until `until`
  // says stop (true: stop after this entry). `to` < 0: on to the end.
  Status fold(RecordStates& states, std::int64_t from, std::int64_t to,
              const std::function<bool(const StateLogEntry&)>& until);

  StateLogAccess& log_;
  std::int64_t end_ = 0;  // the position after the log's last entry at the last load()
  std::int64_t unreadable_ = 0;
};

}  // namespace pillbox::broker
