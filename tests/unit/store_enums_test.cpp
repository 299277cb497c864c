// The store's closed sets (record statuses, task states, replay verdicts):
// their text is what the schema's CHECKs, the JSON and the CLI use, so each
// value must have its own word and come back from it.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "shared/enum_text.h"
#include "supervisor/store/record_status.h"
#include "supervisor/store/replay_verdict.h"
#include "supervisor/store/task_state.h"

using namespace pillbox::store;

namespace {

template <class Enum, std::size_t N>
std::vector<std::string> words_of(const Enum (&all)[N]) {
  std::vector<std::string> out;
  for (Enum e : all) out.emplace_back(to_string(e));
  return out;
}

// Every value's word parses back to it.
template <class Enum, std::size_t N, class Parse>
void check_round_trip(const Enum (&all)[N], Parse parse) {
  for (Enum e : all) {
    const std::string word(to_string(e));
    CAPTURE(word);
    const auto back = parse(word);
    REQUIRE(back.has_value());
    CHECK(*back == e);
  }
}

}  // namespace

TEST_CASE("record status: each value has the schema's word and comes back from it") {
  // The words of the quarantine table's CHECK (schema.cpp), in its order.
  CHECK(words_of(kAllRecordStatuses) ==
        std::vector<std::string>{"quarantined", "allowed", "replaying", "resolved", "failed-again", "discarded"});
  check_round_trip(kAllRecordStatuses, record_status_from_string);
  CHECK_FALSE(record_status_from_string("").has_value());
  CHECK_FALSE(record_status_from_string("Quarantined").has_value());
  CHECK_FALSE(record_status_from_string("failed_again").has_value());
  CHECK_FALSE(record_status_from_string("resolved ").has_value());
}

TEST_CASE("record status: open, replayed and reviewed by one rule, for every back end") {
  using S = RecordStatus;
  // Open: not yet resolved or discarded; allowed is still waiting for its replay.
  for (S s : kAllRecordStatuses) {
    CAPTURE(to_string(s));
    CHECK(is_open(s) == (s != S::kResolved && s != S::kDiscarded));
  }
  // A plain replay takes what it took before, and allowed records too;
  // --allowed only those; --force any.
  for (S s : kAllRecordStatuses) {
    CAPTURE(to_string(s));
    CHECK(replayable(s, ReplayScope::kOpen) == (s == S::kQuarantined || s == S::kFailedAgain || s == S::kAllowed));
    CHECK(replayable(s, ReplayScope::kAllowed) == (s == S::kAllowed));
    CHECK(replayable(s, ReplayScope::kAny));
  }
  CHECK(replay_scope(false, false) == ReplayScope::kOpen);
  CHECK(replay_scope(false, true) == ReplayScope::kAllowed);
  CHECK(replay_scope(true, false) == ReplayScope::kAny);
  CHECK(sql_statuses([](S s) { return replayable(s, ReplayScope::kOpen); }) ==
        "('quarantined', 'allowed', 'failed-again')");
  CHECK(sql_statuses([](S) { return false; }) == "(NULL)");
  CHECK(not_replayable_why(S::kQuarantined, ReplayScope::kAllowed, "7") ==
        "is quarantined, not allowed (pillbox quarantine allow 7 allows it)");

  // allow: awaiting review -> allowed; revoke: allowed -> quarantined.
  CHECK(review_step(S::kQuarantined, Review::kAllow).to == S::kAllowed);
  CHECK(review_step(S::kFailedAgain, Review::kAllow).to == S::kAllowed);
  CHECK(review_step(S::kAllowed, Review::kAllow).already);
  CHECK(review_step(S::kAllowed, Review::kRevoke).to == S::kQuarantined);
  CHECK_FALSE(review_step(S::kAllowed, Review::kRevoke).already);
  CHECK(review_step(S::kQuarantined, Review::kRevoke).already);
  CHECK(review_step(S::kFailedAgain, Review::kRevoke).already);
  // Refused, with a sentence that says why.
  CHECK(review_step(S::kResolved, Review::kAllow).refusal.starts_with("is resolved: a replay ran it ok"));
  CHECK(review_step(S::kDiscarded, Review::kAllow).refusal.starts_with("is discarded: an operator handled it"));
  for (Review r : {Review::kAllow, Review::kRevoke}) {
    CHECK(review_step(S::kReplaying, r).refusal.starts_with("is being replayed right now"));
  }
  for (S s : kAllRecordStatuses) {
    const ReviewStep step = review_step(s, Review::kAllow);
    CAPTURE(to_string(s));
    // Whatever moves is open before and after: a review never closes a record.
    if (step.refusal.empty() && !step.already) CHECK((is_open(s) && is_open(step.to)));
  }
}

TEST_CASE("task state: each value has the schema's word and comes back from it") {
  // The words of the tasks table's CHECK (schema.cpp), in its order.
  CHECK(words_of(kAllTaskStates) == std::vector<std::string>{"pending", "ok", "quarantined", "gave-up"});
  check_round_trip(kAllTaskStates, task_state_from_string);
  CHECK_FALSE(task_state_from_string("").has_value());
  CHECK_FALSE(task_state_from_string("running").has_value());
  CHECK_FALSE(task_state_from_string("gave up").has_value());
  CHECK_FALSE(task_state_from_string("OK").has_value());
}

TEST_CASE("replay verdict: each value has the word replay prints and comes back from it") {
  CHECK(words_of(kAllReplayVerdicts) == std::vector<std::string>{"resolved", "failed-again"});
  const auto parse = [](std::string_view text) { return pillbox::enum_from_text(kAllReplayVerdicts, text); };
  check_round_trip(kAllReplayVerdicts, parse);
  CHECK_FALSE(parse("").has_value());
  CHECK_FALSE(parse("quarantined").has_value());
  CHECK_FALSE(parse("failed again").has_value());
}

TEST_CASE("replay verdict: the record takes the status of the same word") {
  CHECK(status_after(ReplayVerdict::kResolved) == RecordStatus::kResolved);
  CHECK(status_after(ReplayVerdict::kFailedAgain) == RecordStatus::kFailedAgain);
  for (ReplayVerdict v : kAllReplayVerdicts) CHECK(std::string(to_string(status_after(v))) == std::string(to_string(v)));
}

TEST_CASE("store enums: no two values share a word") {
  for (const auto& words : {words_of(kAllRecordStatuses), words_of(kAllTaskStates), words_of(kAllReplayVerdicts)}) {
    CHECK(std::set<std::string>(words.begin(), words.end()).size() == words.size());
  }
}
