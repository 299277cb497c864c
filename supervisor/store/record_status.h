#pragma once
// The status of a quarantine record: the closed set the schema's CHECK
// allows, and the rules over it that every back end follows (which records
// are open, which a replay takes, where an operator's review moves one).
// Text only in SQL, JSON and on the command line.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace pillbox::store {

enum class RecordStatus : std::uint8_t {
  kQuarantined,  // on file, awaiting review (every record starts here)
  kAllowed,      // reviewed: an operator allowed it to be replayed (quarantine allow)
  kReplaying,    // claimed by a running `quarantine replay`
  kResolved,     // ran ok in a replay
  kFailedAgain,  // failed again in a replay
  kDiscarded,    // handled without a fix (an operator, or taken back by a run)
};

inline constexpr RecordStatus kAllRecordStatuses[] = {
    RecordStatus::kQuarantined, RecordStatus::kAllowed,     RecordStatus::kReplaying,
    RecordStatus::kResolved,    RecordStatus::kFailedAgain, RecordStatus::kDiscarded,
};

// Still waiting for someone (quarantined, allowed, replaying, failed-again):
// not yet resolved or discarded. Purging one loses evidence nobody has
// looked at; a task has at most one open record.
bool is_open(RecordStatus status);

// Which records a replay takes.
enum class ReplayScope : std::uint8_t {
  kOpen,     // `replay`: quarantined, failed-again and allowed
  kAllowed,  // `replay --allowed`: only those an operator allowed
  kAny,      // `replay --force`: any (the caller refuses one another replay holds)
};
inline ReplayScope replay_scope(bool force, bool allowed_only) {
  return force ? ReplayScope::kAny : allowed_only ? ReplayScope::kAllowed : ReplayScope::kOpen;
}
bool replayable(RecordStatus status, ReplayScope scope);
// Why a replay of `scope` leaves records it does not take, for a count of
// them: "are resolved, discarded or being replayed (--force replays them too)".
std::string not_replayable_words(ReplayScope scope);
// ... and for one record of `status`, for "record ID " + this: "is resolved
// (--force replays it anyway)".
std::string not_replayable_why(RecordStatus status, ReplayScope scope, const std::string& id);

// An operator's review of a record (quarantine allow): allowed to replay,
// or that taken back (allow --revoke).
enum class Review : std::uint8_t { kAllow, kRevoke };

// Where a review moves a record of `from`: allow takes quarantined and
// failed-again to allowed, revoke takes allowed back to quarantined
// (awaiting review). `already`: it is there (allowed; for revoke, not
// allowed), left as it is. `refusal`: why it may not move ("is resolved:
// ..."), for "record ID " + refusal; "" when it may.
struct ReviewStep {
  RecordStatus to = RecordStatus::kQuarantined;
  bool already = false;
  std::string refusal;
};
ReviewStep review_step(RecordStatus from, Review review);
// The audit trail's action of a review: "allowed", "allowance revoked".
std::string_view review_action(Review review);

// The statuses `keep` holds for, as SQL's list: "('quarantined', 'allowed')".
// The store's queries take the rules above from here, never retyped.
template <class Keep>
std::string sql_statuses(Keep keep);

std::string_view to_string(RecordStatus status);
std::optional<RecordStatus> record_status_from_string(std::string_view text);

template <class Keep>
std::string sql_statuses(Keep keep) {
  std::string out;
  for (RecordStatus s : kAllRecordStatuses) {
    if (keep(s)) out += (out.empty() ? "('" : ", '") + std::string(to_string(s)) + "'";
  }
  return out.empty() ? "(NULL)" : out + ")";
}

}  // namespace pillbox::store
