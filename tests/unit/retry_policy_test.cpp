// The retry policy (docs/architecture.md, 'Verdicts: retries, quarantine,
// outages'): pure functions of a task's attempt history, so every rule is
// exercised here without a process.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "supervisor/flow/retry_policy.h"

using namespace pillbox;
using std::chrono::milliseconds;

namespace {

using History = std::vector<store::AttemptSummary>;

store::AttemptSummary attempt(std::uint32_t n, Kind kind, const std::string& fingerprint, bool charged = true) {
  return store::AttemptSummary{n, true, std::string(to_string(kind)), fingerprint, charged, false};
}

// An attempt during which the supervisor died: never finished. `solo`: it ran
// alone (as a task suspected of killing the supervisor does).
// An attempt during which pillbox crashed (a fatal signal of its own: evidence).
store::AttemptSummary lost(std::uint32_t n, bool solo = true) { return store::AttemptSummary{n, false, "", "", true, solo, true}; }
// An attempt during which pillbox was killed from outside (no evidence).
store::AttemptSummary killed_from_outside(std::uint32_t n, bool solo = true) {
  return store::AttemptSummary{n, false, "", "", true, solo, false};
}

Outcome outcome(Kind kind, const std::string& fingerprint, int exit_code = -1) {
  Outcome o;
  o.kind = kind;
  o.fingerprint = fingerprint;
  o.exit_code = exit_code;
  return o;
}

RetrySettings settings(std::uint32_t max_attempts = 3) {
  RetrySettings s;
  s.max_attempts = max_attempts;
  return s;
}

// The history after `kinds.size()` finished, charged attempts, the last one
// producing `fingerprints.back()`.
History finished(const std::vector<Kind>& kinds, const std::vector<std::string>& fingerprints) {
  History h;
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    h.push_back(attempt(static_cast<std::uint32_t>(i + 1), kinds[i], fingerprints[i]));
  }
  return h;
}

}  // namespace

TEST_CASE("retry policy: ok is done, whatever came before") {
  const RetrySettings s = settings();
  CHECK(judge(s, {attempt(1, Kind::kOk, "")}, outcome(Kind::kOk, "")).decision == Decision::kDone);
  const History h = {attempt(1, Kind::kCrash, "fp-a"), attempt(2, Kind::kCrash, "fp-b"), attempt(3, Kind::kOk, "")};
  const Judgement j = judge(s, h, outcome(Kind::kOk, ""));
  CHECK(j.decision == Decision::kDone);
  CHECK(j.reason == "ok");
}

TEST_CASE("retry policy: a deterministic kind failing twice the same way is quarantined at attempt 2") {
  const RetrySettings s = settings(5);
  const Outcome crash = outcome(Kind::kCrash, "fp-a");
  CHECK(judge(s, finished({Kind::kCrash}, {"fp-a"}), crash).decision == Decision::kRetry);
  const Judgement j = judge(s, finished({Kind::kCrash, Kind::kCrash}, {"fp-a", "fp-a"}), crash);
  CHECK(j.decision == Decision::kQuarantine);
  CHECK(j.reason.find("fp-a") != std::string::npos);

  // Every deterministic kind behaves the same way.
  for (Kind k : {Kind::kStackOverflow, Kind::kCpuLimit, Kind::kOom, Kind::kSeccompViolation, Kind::kOutputLimit,
                 Kind::kHandlerError}) {
    CAPTURE(to_string(k));
    CHECK(judge(s, finished({k, k}, {"fp-k", "fp-k"}), outcome(k, "fp-k")).decision == Decision::kQuarantine);
  }
}

TEST_CASE("retry policy: different fingerprints are retried until max_attempts, then quarantined") {
  const RetrySettings s = settings(3);
  CHECK(judge(s, finished({Kind::kCrash}, {"fp-a"}), outcome(Kind::kCrash, "fp-a")).decision == Decision::kRetry);
  CHECK(judge(s, finished({Kind::kCrash, Kind::kCrash}, {"fp-a", "fp-b"}), outcome(Kind::kCrash, "fp-b")).decision ==
        Decision::kRetry);
  const Judgement j = judge(s, finished({Kind::kCrash, Kind::kCrash, Kind::kCrash}, {"fp-a", "fp-b", "fp-c"}),
                            outcome(Kind::kCrash, "fp-c"));
  CHECK(j.decision == Decision::kQuarantine);
  CHECK(j.reason.find("3 of 3") != std::string::npos);

  // Only the previous attempt counts: a-b-a is not "twice in a row".
  CHECK(judge(settings(5), finished({Kind::kCrash, Kind::kCrash, Kind::kCrash}, {"fp-a", "fp-b", "fp-a"}),
              outcome(Kind::kCrash, "fp-a"))
            .decision == Decision::kRetry);
}

TEST_CASE("retry policy: uncharged attempts are skipped when finding the previous attempt and when counting") {
  const RetrySettings s = settings(3);
  const Outcome crash = outcome(Kind::kCrash, "fp-a");

  // fp-a (counted), fp-b (not charged), fp-a now: the previous counted one is fp-a.
  History h = {attempt(1, Kind::kCrash, "fp-a"), attempt(2, Kind::kCrash, "fp-b", false), attempt(3, Kind::kCrash, "fp-a")};
  CHECK(judge(settings(5), h, crash).decision == Decision::kQuarantine);

  // fp-a not charged, then fp-a: there is no previous counted attempt.
  h = {attempt(1, Kind::kCrash, "fp-a", false), attempt(2, Kind::kCrash, "fp-a")};
  CHECK(judge(s, h, crash).decision == Decision::kRetry);

  // Three attempts with different fingerprints, one of them not charged: two
  // failures counted, under the budget of three.
  h = {attempt(1, Kind::kCrash, "fp-x"), attempt(2, Kind::kCrash, "fp-y", false), attempt(3, Kind::kCrash, "fp-a")};
  CHECK(judge(s, h, crash).decision == Decision::kRetry);
  h.push_back(attempt(4, Kind::kCrash, "fp-b"));
  CHECK(judge(s, h, outcome(Kind::kCrash, "fp-b")).decision == Decision::kQuarantine);

  // Transient kinds count only charged attempts toward the give-up budget too.
  h = {attempt(1, Kind::kKilled, "k", false), attempt(2, Kind::kKilled, "k", false), attempt(3, Kind::kKilled, "k")};
  CHECK(judge(s, h, outcome(Kind::kKilled, "k")).decision == Decision::kRetry);
}

TEST_CASE("retry policy: unfinished attempts are skipped when finding the previous attempt and when counting") {
  const RetrySettings s = settings(3);
  const Outcome crash = outcome(Kind::kCrash, "fp-a");

  // fp-a, supervisor lost, fp-a: quarantined, the lost attempt is in between.
  History h = {attempt(1, Kind::kCrash, "fp-a"), lost(2), attempt(3, Kind::kCrash, "fp-a")};
  CHECK(judge(settings(5), h, crash).decision == Decision::kQuarantine);

  // lost, lost, fp-a: one counted failure.
  h = {lost(1), lost(2), attempt(3, Kind::kCrash, "fp-a")};
  CHECK(judge(s, h, crash).decision == Decision::kRetry);

  // An unfinished attempt that remembers a fingerprint still does not count.
  h = {store::AttemptSummary{1, false, "crash", "fp-a", true}, attempt(2, Kind::kCrash, "fp-a")};
  CHECK(judge(s, h, crash).decision == Decision::kRetry);

  // fp-x, lost, fp-y: two counted failures, under the budget of three.
  h = {attempt(1, Kind::kCrash, "fp-x"), lost(2), attempt(3, Kind::kCrash, "fp-y")};
  CHECK(judge(s, h, outcome(Kind::kCrash, "fp-y")).decision == Decision::kRetry);
  // ... lost, fp-z: the third counted failure.
  h.push_back(lost(4));
  h.push_back(attempt(5, Kind::kCrash, "fp-z"));
  CHECK(judge(s, h, outcome(Kind::kCrash, "fp-z")).decision == Decision::kQuarantine);

  // Transient kinds: lost attempts are not held against the budget.
  h = {lost(1), lost(2), attempt(3, Kind::kKilled, "k")};
  CHECK(judge(s, h, outcome(Kind::kKilled, "k")).decision == Decision::kRetry);
}

TEST_CASE("retry policy: a wall timeout is not deterministic: retried until max_attempts, then quarantined") {
  const RetrySettings s = settings(3);
  const Outcome timeout = outcome(Kind::kWallTimeout, "fp-t");
  CHECK(judge(s, finished({Kind::kWallTimeout}, {"fp-t"}), timeout).decision == Decision::kRetry);
  // Same fingerprint twice: still retried (not deterministic).
  CHECK(judge(s, finished({Kind::kWallTimeout, Kind::kWallTimeout}, {"fp-t", "fp-t"}), timeout).decision ==
        Decision::kRetry);
  const Judgement j =
      judge(s, finished({Kind::kWallTimeout, Kind::kWallTimeout, Kind::kWallTimeout}, {"fp-t", "fp-t", "fp-t"}), timeout);
  CHECK(j.decision == Decision::kQuarantine);
  CHECK(j.reason.find("wall-timeout") != std::string::npos);

  // Protocol errors are not deterministic either.
  CHECK(judge(s, finished({Kind::kProtocolError, Kind::kProtocolError}, {"fp-p", "fp-p"}),
              outcome(Kind::kProtocolError, "fp-p"))
            .decision == Decision::kRetry);
}

TEST_CASE("retry policy: killed and sandbox-error are retried, then given up at the budget, never quarantined") {
  const RetrySettings s = settings(3);
  for (Kind k : {Kind::kKilled, Kind::kSandboxError}) {
    CAPTURE(to_string(k));
    CHECK(is_transient(s, outcome(k, "fp")));
    const Outcome o = outcome(k, "fp");
    // Transient attempts are not charged to the payload; the budget is this run's count.
    const History h1 = {attempt(1, k, "fp", false)};
    const History h3 = {attempt(1, k, "fp", false), attempt(2, k, "fp", false), attempt(3, k, "fp", false)};
    CHECK(judge(s, h1, o, 1).decision == Decision::kRetry);
    CHECK(judge(s, h3, o, 2).decision == Decision::kRetry);
    const Judgement j = judge(s, h3, o, 3);
    CHECK(j.decision == Decision::kGiveUp);
    CHECK(j.reason.find("not quarantined") != std::string::npos);
    CHECK(judge(s, h3, o, 4).decision == Decision::kGiveUp);
    // Even after earlier deterministic failures with the same fingerprint.
    CHECK(judge(s, {attempt(1, Kind::kCrash, "fp"), attempt(2, k, "fp", false)}, o, 1).decision == Decision::kRetry);
    CHECK(judge(s, {attempt(1, Kind::kCrash, "fp"), attempt(2, Kind::kCrash, "fp"), attempt(3, k, "fp", false)}, o, 3)
              .decision == Decision::kGiveUp);
  }
}

TEST_CASE("retry policy: any failure before the payload was sent is retried, then given up, never quarantined") {
  const RetrySettings s = settings(3);
  // A plugin that crashes in its init in every child: the same deterministic
  // fingerprint every time, and still not the payload's fault.
  for (Kind k : {Kind::kCrash, Kind::kProtocolError, Kind::kHandlerError, Kind::kOom}) {
    CAPTURE(to_string(k));
    Outcome o = outcome(k, "fp");
    CHECK_FALSE(is_transient(s, o));
    o.before_payload = true;
    CHECK(is_transient(s, o));
    const History h2 = {attempt(1, k, "fp", false), attempt(2, k, "fp", false)};
    const Judgement retry = judge(s, h2, o, 2);
    CHECK(retry.decision == Decision::kRetry);
    CHECK(retry.reason == std::string(to_string(k)) + " before the payload was sent: not the payload's fault");
    CHECK(judge(s, h2, o, 3).decision == Decision::kGiveUp);
  }
}

TEST_CASE("retry policy: transient failures do not count toward quarantine") {
  const RetrySettings s = settings(3);
  // Two transient failures, then a crash: one charged failure, not "3 of 3".
  const History h = {attempt(1, Kind::kKilled, "k", false), attempt(2, Kind::kKilled, "k", false),
                     attempt(3, Kind::kCrash, "fp-a")};
  CHECK(judge(s, h, outcome(Kind::kCrash, "fp-a")).decision == Decision::kRetry);
}

TEST_CASE("retry policy: an exec exit code named by --retry-exit-code is transient; another is deterministic") {
  RetrySettings s = settings(3);
  s.retry_exit_codes = {75};

  const Outcome tempfail = outcome(Kind::kHandlerError, "fp-e", 75);
  CHECK(is_transient(s, tempfail));
  const History h = {attempt(1, Kind::kHandlerError, "fp-e", false), attempt(2, Kind::kHandlerError, "fp-e", false)};
  CHECK(judge(s, h, tempfail, 1).decision == Decision::kRetry);
  CHECK(judge(s, h, tempfail, 2).decision == Decision::kRetry);  // uncharged: never "the same fingerprint twice"
  CHECK(judge(s, h, tempfail, 3).decision == Decision::kGiveUp);

  const Outcome other = outcome(Kind::kHandlerError, "fp-e", 3);
  CHECK_FALSE(is_transient(s, other));
  CHECK(judge(s, finished({Kind::kHandlerError}, {"fp-e"}), other).decision == Decision::kRetry);
  CHECK(judge(s, finished({Kind::kHandlerError, Kind::kHandlerError}, {"fp-e", "fp-e"}), other).decision ==
        Decision::kQuarantine);

  // A listed code only matters for handler errors that exited; not for a
  // crash, nor for a handler error that never exited (-1).
  CHECK_FALSE(is_transient(s, outcome(Kind::kCrash, "fp", 75)));
  CHECK_FALSE(is_transient(s, outcome(Kind::kHandlerError, "fp", -1)));
  RetrySettings minus_one = settings(3);
  minus_one.retry_exit_codes = {-1};
  CHECK_FALSE(is_transient(minus_one, outcome(Kind::kHandlerError, "fp", -1)));
  // With no codes listed, 75 is an ordinary handler error.
  CHECK_FALSE(is_transient(settings(3), tempfail));
}

TEST_CASE("retry policy: the payload kills the supervisor only after max_attempts unfinished attempts, mostly solo") {
  const RetrySettings s = settings(3);
  CHECK_FALSE(kills_the_supervisor(s, {}));
  CHECK_FALSE(kills_the_supervisor(s, {lost(1)}));
  CHECK_FALSE(kills_the_supervisor(s, {lost(1), lost(2)}));
  CHECK(kills_the_supervisor(s, {lost(1), lost(2), lost(3)}));
  // The first loss usually happens with other tasks running: not solo.
  CHECK(kills_the_supervisor(s, {lost(1, false), lost(2), lost(3)}));
  // Lost only while others ran: any crash of pillbox, not evidence against this payload.
  CHECK_FALSE(kills_the_supervisor(s, {lost(1, false), lost(2, false), lost(3, false)}));
  CHECK_FALSE(kills_the_supervisor(s, {lost(1, false), lost(2, false), lost(3)}));
  CHECK(kills_the_supervisor(s, {attempt(1, Kind::kCrash, "fp"), lost(2), lost(3), lost(4)}));
  CHECK_FALSE(kills_the_supervisor(s, {lost(1), lost(2), lost(3), attempt(4, Kind::kCrash, "fp")}));
  CHECK_FALSE(kills_the_supervisor(s, {lost(1), attempt(2, Kind::kCrash, "fp"), lost(3), lost(4)}));
  CHECK_FALSE(kills_the_supervisor(s, {lost(1), lost(2), attempt(3, Kind::kKilled, "fp", false)}));
  // max_attempts 1: one solo loss is enough; one loss among others is not.
  CHECK(kills_the_supervisor(settings(1), {lost(1)}));
  CHECK_FALSE(kills_the_supervisor(settings(1), {lost(1, false)}));
  CHECK(suspected_of_killing_the_supervisor({attempt(1, Kind::kCrash, "fp"), lost(2, false)}));
  CHECK_FALSE(suspected_of_killing_the_supervisor({lost(1), attempt(2, Kind::kCrash, "fp")}));
  CHECK_FALSE(suspected_of_killing_the_supervisor({}));
}

TEST_CASE("retry policy: a kill from outside is never evidence against the payload; repeated, the task gives up") {
  const RetrySettings s = settings(3);
  using H = std::vector<store::AttemptSummary>;
  // Three losses alone, but pillbox was killed each time: not the payload's doing.
  const H outside = {killed_from_outside(1, false), killed_from_outside(2), killed_from_outside(3), killed_from_outside(4)};
  CHECK_FALSE(kills_the_supervisor(s, outside));
  CHECK(suspected_of_killing_the_supervisor(outside));  // it still runs alone next
  CHECK_FALSE(lost_without_evidence_too_often(s, outside));
  // 2 x max_attempts solo losses without evidence in a row: give up.
  H six = outside;
  six.push_back(killed_from_outside(5));
  CHECK_FALSE(lost_without_evidence_too_often(s, six));
  six.push_back(killed_from_outside(6));
  six.push_back(killed_from_outside(7));
  CHECK(lost_without_evidence_too_often(s, six));
  CHECK_FALSE(kills_the_supervisor(s, six));
  // Unexplained losses between crashes neither count nor break the row.
  CHECK(kills_the_supervisor(s, {lost(1, false), killed_from_outside(2), lost(3), killed_from_outside(4), lost(5)}));
  // A finished attempt ends the row; a budget reset (uncharged) does not count.
  CHECK_FALSE(lost_without_evidence_too_often(
      s, {killed_from_outside(1), killed_from_outside(2), killed_from_outside(3), attempt(4, Kind::kCrash, "fp"),
          killed_from_outside(5), killed_from_outside(6), killed_from_outside(7)}));
  H reset = six;
  for (auto& a : reset) a.charged = false;
  CHECK_FALSE(lost_without_evidence_too_often(s, reset));
  CHECK_FALSE(kills_the_supervisor(s, {lost(1), lost(2), {3, false, "", "", false, true, true}}));
}

TEST_CASE("retry policy: backoff_delay is full jitter within [0, min(max, base * 2^(failures-1))]") {
  RetrySettings s;
  s.backoff_base = milliseconds(1000);
  s.backoff_max = milliseconds(60000);
  std::mt19937_64 rng(12345);
  constexpr int kDraws = 4000;

  auto ceiling = [&](std::uint32_t failures) -> std::int64_t {
    std::int64_t c = s.backoff_base.count();
    for (std::uint32_t i = 1; i < failures && c < s.backoff_max.count(); ++i) c *= 2;
    return std::min<std::int64_t>(c, s.backoff_max.count());
  };

  for (std::uint32_t failures : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 20u, 63u, 64u, 65u, 1000u}) {
    CAPTURE(failures);
    const std::int64_t top = ceiling(failures);
    std::int64_t lo = std::numeric_limits<std::int64_t>::max();
    std::int64_t hi = -1;
    int below_half = 0;
    std::set<std::int64_t> distinct;
    bool in_range = true;
    for (int i = 0; i < kDraws; ++i) {
      const std::int64_t d = backoff_delay(s, failures, rng).count();
      if (d < 0 || d > top) in_range = false;
      lo = std::min(lo, d);
      hi = std::max(hi, d);
      if (d * 2 < top) ++below_half;
      distinct.insert(d);
    }
    CHECK(in_range);
    CHECK(lo >= 0);
    CHECK(hi <= top);
    // Spread over the whole range: near both ends, not constant.
    CHECK(hi * 10 >= top * 9);
    CHECK(lo * 10 <= top);
    CHECK(distinct.size() > 100);
    CHECK(below_half > kDraws / 4);
    CHECK(below_half < kDraws * 3 / 4);
  }
  // The cap is reached from 7 failures on (1000 * 2^6 = 64000 > 60000).
  CHECK(ceiling(6) == 32000);
  CHECK(ceiling(7) == 60000);
}

TEST_CASE("retry policy: backoff_delay never overflows, and handles zero and inverted settings") {
  std::mt19937_64 rng(42);

  RetrySettings huge;
  huge.backoff_base = milliseconds(1000);
  huge.backoff_max = milliseconds(std::numeric_limits<milliseconds::rep>::max());
  for (std::uint32_t failures : {1u, 33u, 64u, 65u, 1000u, std::numeric_limits<std::uint32_t>::max()}) {
    CAPTURE(failures);
    for (int i = 0; i < 200; ++i) CHECK(backoff_delay(huge, failures, rng).count() >= 0);
  }

  RetrySettings big_base;
  big_base.backoff_base = milliseconds(std::numeric_limits<milliseconds::rep>::max() / 2 + 7);
  big_base.backoff_max = milliseconds(std::numeric_limits<milliseconds::rep>::max());
  for (int i = 0; i < 200; ++i) CHECK(backoff_delay(big_base, 1000, rng).count() >= 0);

  RetrySettings normal;
  for (int i = 0; i < 200; ++i) {
    const auto d = backoff_delay(normal, 1000, rng);
    CHECK(d.count() >= 0);
    CHECK(d <= normal.backoff_max);
  }

  // base over max: the max wins even at the first failure.
  RetrySettings inverted;
  inverted.backoff_base = milliseconds(5000);
  inverted.backoff_max = milliseconds(100);
  for (int i = 0; i < 200; ++i) CHECK(backoff_delay(inverted, 1, rng) <= milliseconds(100));

  RetrySettings zero;
  zero.backoff_base = milliseconds(0);
  zero.backoff_max = milliseconds(0);
  CHECK(backoff_delay(zero, 5, rng) == milliseconds(0));
  CHECK(backoff_delay(zero, 0, rng) == milliseconds(0));

  // failures = 0 behaves like the first failure.
  for (int i = 0; i < 200; ++i) CHECK(backoff_delay(normal, 0, rng) <= normal.backoff_base);

  // The same seed gives the same delays.
  std::mt19937_64 a(7);
  std::mt19937_64 b(7);
  for (int i = 0; i < 50; ++i) CHECK(backoff_delay(normal, 4, a) == backoff_delay(normal, 4, b));
}

TEST_CASE("retry policy: a slot made anew for the task costs it no transient attempt, 3 times at most") {
  RetrySettings s;
  s.max_attempts = 1;
  Outcome renewed;
  renewed.kind = Kind::kSandboxError;
  renewed.before_payload = true;
  renewed.slot_renewed = true;
  Outcome other = renewed;
  other.slot_renewed = false;
  std::uint32_t renewals = 0;
  CHECK_FALSE(counts_as_transient(renewed, renewals));
  CHECK_FALSE(counts_as_transient(renewed, renewals));
  CHECK_FALSE(counts_as_transient(renewed, renewals));
  CHECK(counts_as_transient(renewed, renewals));  // a fourth: a fault of ours, not a slot's
  std::uint32_t none = 0;
  CHECK(counts_as_transient(other, none));
  CHECK(none == 0);
  // Not counted, so with --max-attempts 1 it is retried, not given up.
  CHECK(judge(s, {attempt(1, Kind::kSandboxError, "", false)}, renewed, 0).decision == Decision::kRetry);
  CHECK(judge(s, {attempt(1, Kind::kSandboxError, "", false)}, other, 1).decision == Decision::kGiveUp);
}
