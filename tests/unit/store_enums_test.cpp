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
        std::vector<std::string>{"quarantined", "replaying", "resolved", "failed-again", "discarded"});
  check_round_trip(kAllRecordStatuses, record_status_from_string);
  CHECK_FALSE(record_status_from_string("").has_value());
  CHECK_FALSE(record_status_from_string("Quarantined").has_value());
  CHECK_FALSE(record_status_from_string("failed_again").has_value());
  CHECK_FALSE(record_status_from_string("resolved ").has_value());
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
