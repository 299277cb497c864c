// The circuit breaker: poison pill or outage? Explicit time points stand in
// for the clock, so probe timing is tested without sleeping.
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "supervisor/flow/circuit_breaker.h"

using namespace pillbox;
using std::chrono::milliseconds;

namespace {

using Clock = CircuitBreaker::Clock;
const Clock::time_point t0 = Clock::time_point{} + std::chrono::hours(1);

BreakerSettings settings(std::size_t window = 10, double threshold = 0.8) {
  BreakerSettings s;
  s.window = window;
  s.threshold = threshold;
  s.probe_interval = milliseconds(1000);
  return s;
}

std::string payload(int i) { return "key-" + std::to_string(i) + "/sha-" + std::to_string(i); }

// Records `count` distinct payloads (ids from `first`) failing with
// `fingerprint`; returns how many of the calls returned true.
int fail_distinct(CircuitBreaker& b, int first, int count, const std::string& fingerprint,
                  Clock::time_point now = t0) {
  int opened = 0;
  for (int i = first; i < first + count; ++i) opened += b.record(payload(i), true, fingerprint, now) ? 1 : 0;
  return opened;
}

// Opens a fresh breaker at `now` with 10 distinct failures of "fp-outage".
void open_it(CircuitBreaker& b, Clock::time_point now = t0) {
  REQUIRE(fail_distinct(b, 0, 10, "fp-outage", now) == 1);
  REQUIRE(b.open());
}

}  // namespace

TEST_CASE("circuit breaker: distinct payloads failing one way open it, on exactly the opening call") {
  CircuitBreaker b(settings());
  CHECK_FALSE(b.open());
  for (int i = 0; i < 9; ++i) {
    CHECK_FALSE(b.record(payload(i), true, "fp-outage", t0));
    CHECK_FALSE(b.open());
  }
  CHECK(b.record(payload(9), true, "fp-outage", t0));
  CHECK(b.open());
  CHECK(b.dominant_fingerprint() == "fp-outage");
  CHECK(b.failures_when_opened() == 10);
  CHECK(b.times_opened() == 1);
  // Already open: more failures do not "open" it again.
  CHECK_FALSE(b.record(payload(10), true, "fp-outage", t0));
  CHECK(b.open());
  CHECK(b.times_opened() == 1);
}

TEST_CASE("circuit breaker: distinct failures with distinct fingerprints are poison pills, not an outage") {
  CircuitBreaker b(settings());
  for (int i = 0; i < 30; ++i) CHECK_FALSE(b.record(payload(i), true, "fp-" + std::to_string(i), t0));
  CHECK_FALSE(b.open());
  CHECK(b.times_opened() == 0);
  CHECK(b.dominant_fingerprint().empty());
}

TEST_CASE("circuit breaker: one fingerprint must account for at least half of the failures") {
  SUBCASE("5 + 5: exactly half opens it") {
    CircuitBreaker b(settings());
    CHECK(fail_distinct(b, 0, 5, "fp-a") == 0);
    CHECK(fail_distinct(b, 5, 5, "fp-b") == 1);
    CHECK(b.open());
  }
  SUBCASE("4 + 3 + 3: no fingerprint reaches half") {
    CircuitBreaker b(settings());
    CHECK(fail_distinct(b, 0, 4, "fp-a") == 0);
    CHECK(fail_distinct(b, 4, 3, "fp-b") == 0);
    CHECK(fail_distinct(b, 7, 3, "fp-c") == 0);
    CHECK_FALSE(b.open());
  }
  SUBCASE("7 of one + 1 + 1 + 1 opens it, naming the dominant one") {
    CircuitBreaker b(settings());
    CHECK(fail_distinct(b, 0, 1, "fp-x") == 0);
    CHECK(fail_distinct(b, 1, 1, "fp-y") == 0);
    CHECK(fail_distinct(b, 2, 1, "fp-z") == 0);
    CHECK(fail_distinct(b, 3, 7, "fp-main") == 1);
    CHECK(b.dominant_fingerprint() == "fp-main");
  }
}

TEST_CASE("circuit breaker: failures under the threshold do not open it") {
  CircuitBreaker b(settings());
  CHECK(fail_distinct(b, 0, 7, "fp-outage") == 0);
  for (int i = 7; i < 10; ++i) CHECK_FALSE(b.record(payload(i), false, "", t0));
  CHECK_FALSE(b.open());

  // 8 of 10 (the threshold, 0.8) does: the window slides over the oldest.
  CircuitBreaker c(settings());
  for (int i = 0; i < 2; ++i) CHECK_FALSE(c.record(payload(i), false, "", t0));
  CHECK(fail_distinct(c, 2, 8, "fp-outage") == 1);
  CHECK(c.failures_when_opened() == 8);
}

TEST_CASE("circuit breaker: the window holds the last `window` distinct payloads") {
  CircuitBreaker b(settings());
  // Successes first, then failures push them out of the window.
  for (int i = 0; i < 10; ++i) CHECK_FALSE(b.record(payload(i), false, "", t0));
  CHECK(fail_distinct(b, 10, 7, "fp-outage") == 0);  // 7 failures + 3 successes
  CHECK(fail_distinct(b, 17, 1, "fp-outage") == 1);  // 8 failures + 2 successes
}

TEST_CASE("circuit breaker: one payload failing many times is one entry, not an outage") {
  CircuitBreaker b(settings());
  for (int i = 0; i < 20; ++i) CHECK_FALSE(b.record(payload(0), true, "fp-outage", t0));
  CHECK_FALSE(b.open());

  // A retried payload replaces its entry: 9 distinct failing payloads plus
  // retries of one of them stay below the window.
  CircuitBreaker c(settings());
  CHECK(fail_distinct(c, 0, 9, "fp-outage") == 0);
  for (int i = 0; i < 5; ++i) CHECK_FALSE(c.record(payload(3), true, "fp-outage", t0));
  CHECK_FALSE(c.open());
  // A retry that succeeds replaces the failure with a success: 8 failures
  // and 1 success in 9 entries; a tenth distinct payload fills the window.
  CHECK_FALSE(c.record(payload(3), false, "", t0));
  CHECK_FALSE(c.open());
  CHECK(fail_distinct(c, 100, 1, "fp-outage") == 1);
  CHECK(c.failures_when_opened() == 9);

  // 7 failures, then 2 successes, then one of those retried failing: still
  // 9 distinct payloads (8 failed), so not yet (appending would have made
  // 10 entries with 8 failures: open); a tenth failing payload fills it.
  CircuitBreaker d(settings());
  CHECK(fail_distinct(d, 0, 7, "fp-outage") == 0);
  CHECK_FALSE(d.record(payload(7), false, "", t0));
  CHECK_FALSE(d.record(payload(8), false, "", t0));
  CHECK_FALSE(d.record(payload(7), true, "fp-outage", t0));
  CHECK_FALSE(d.open());
  CHECK(fail_distinct(d, 9, 1, "fp-outage") == 1);
  CHECK(d.failures_when_opened() == 9);
}

TEST_CASE("circuit breaker: fewer than `window` entries never open it") {
  CircuitBreaker b(settings(10, 0.1));
  CHECK(fail_distinct(b, 0, 9, "fp-outage") == 0);
  CHECK_FALSE(b.open());
  CircuitBreaker big(settings(50, 0.5));
  CHECK(fail_distinct(big, 0, 49, "fp-outage") == 0);
  CHECK_FALSE(big.open());
  CHECK(fail_distinct(big, 49, 1, "fp-outage") == 1);
}

TEST_CASE("circuit breaker: while open, one probe at a time, every probe_interval") {
  CircuitBreaker b(settings());
  open_it(b);
  CHECK(b.next_probe_at() == t0 + milliseconds(1000));
  CHECK_FALSE(b.may_probe(t0));
  CHECK_FALSE(b.may_probe(t0 + milliseconds(999)));
  CHECK(b.may_probe(t0 + milliseconds(1000)));
  CHECK(b.may_probe(t0 + milliseconds(5000)));

  // One at a time.
  const auto t1 = t0 + milliseconds(1500);
  b.probe_started();
  CHECK_FALSE(b.may_probe(t1));
  CHECK_FALSE(b.may_probe(t1 + std::chrono::hours(1)));
  CHECK_FALSE(b.next_probe_at().has_value());

  // A failed probe: still open, the next one interval after it ended.
  const auto t2 = t0 + milliseconds(2200);
  b.probe_ended(false, t2);
  CHECK(b.open());
  CHECK(b.next_probe_at() == t2 + milliseconds(1000));
  CHECK_FALSE(b.may_probe(t2));
  CHECK_FALSE(b.may_probe(t2 + milliseconds(999)));
  CHECK(b.may_probe(t2 + milliseconds(1000)));

  // A successful probe closes it.
  const auto t3 = t2 + milliseconds(1000);
  b.probe_started();
  b.probe_ended(true, t3 + milliseconds(10));
  CHECK_FALSE(b.open());
  CHECK_FALSE(b.may_probe(t3 + std::chrono::hours(1)));
  CHECK_FALSE(b.next_probe_at().has_value());
  CHECK(b.times_opened() == 1);
}

TEST_CASE("circuit breaker: a success from a non-probe task closes it too") {
  CircuitBreaker b(settings());
  open_it(b);
  CHECK_FALSE(b.record(payload(50), true, "fp-outage", t0));  // another failure while open
  CHECK(b.open());
  CHECK_FALSE(b.record(payload(51), false, "", t0 + milliseconds(10)));
  CHECK_FALSE(b.open());
  CHECK_FALSE(b.may_probe(t0 + std::chrono::hours(1)));
}

TEST_CASE("circuit breaker: closing starts over with an empty window; it can open again") {
  CircuitBreaker b(settings());
  open_it(b);
  b.probe_started();
  b.probe_ended(true, t0 + milliseconds(1000));
  REQUIRE_FALSE(b.open());
  // The failures from before the close are forgotten.
  CHECK(fail_distinct(b, 200, 9, "fp-second") == 0);
  CHECK_FALSE(b.open());
  CHECK(fail_distinct(b, 209, 1, "fp-second") == 1);
  CHECK(b.open());
  CHECK(b.dominant_fingerprint() == "fp-second");
  CHECK(b.times_opened() == 2);
  // The probe schedule restarts from the second opening.
  const auto t5 = t0 + milliseconds(7000);
  CircuitBreaker c(settings());
  open_it(c, t5);
  CHECK_FALSE(c.may_probe(t5 + milliseconds(999)));
  CHECK(c.may_probe(t5 + milliseconds(1000)));
}

TEST_CASE("circuit breaker: disabled, it never opens") {
  BreakerSettings s = settings();
  s.enabled = false;
  CircuitBreaker b(s);
  CHECK(fail_distinct(b, 0, 100, "fp-outage") == 0);
  CHECK_FALSE(b.open());
  CHECK_FALSE(b.may_probe(t0 + std::chrono::hours(1)));
  CHECK_FALSE(b.next_probe_at().has_value());
  CHECK(b.times_opened() == 0);

  // A zero window never opens either.
  CircuitBreaker zero(settings(0, 0.8));
  CHECK(fail_distinct(zero, 0, 100, "fp-outage") == 0);
  CHECK_FALSE(zero.open());
}

TEST_CASE("circuit breaker: a success never opens it, even when it completes a window of failures") {
  pillbox::BreakerSettings settings;
  settings.window = 10;
  settings.threshold = 0.8;
  pillbox::CircuitBreaker breaker(settings);
  const auto now = pillbox::CircuitBreaker::Clock::now();
  for (int i = 0; i < 9; ++i) CHECK_FALSE(breaker.record("p" + std::to_string(i), i != 0, "pb1-outage", now));
  // 8 failures of 9, then the 10th payload succeeds: 8 of 10 failed, but the
  // success is no part of an outage.
  CHECK_FALSE(breaker.record("p9", false, "", now));
  CHECK_FALSE(breaker.open());
  // The next failure is.
  CHECK(breaker.record("p10", true, "pb1-outage", now));
  CHECK(breaker.open());
}

TEST_CASE("circuit breaker: suspects a fingerprint when most of the latest payloads fail with it") {
  BreakerSettings settings;
  settings.window = 20;  // "latest" = the last max(4, 20/4) = 5 payloads
  settings.threshold = 0.8;
  CircuitBreaker breaker(settings);
  const auto now = Clock::now();
  for (int i = 0; i < 10; ++i) breaker.record("ok" + std::to_string(i), false, "", now);
  CHECK_FALSE(breaker.suspects("pb1-x"));
  for (int i = 0; i < 3; ++i) breaker.record("bad" + std::to_string(i), true, "pb1-x", now);
  CHECK_FALSE(breaker.suspects("pb1-x"));  // 3 of the last 5
  breaker.record("bad3", true, "pb1-x", now);
  CHECK(breaker.suspects("pb1-x"));  // 4 of the last 5
  CHECK_FALSE(breaker.suspects("pb1-y"));
  CHECK_FALSE(breaker.open());  // 4 of 20: far from opening
  breaker.record("ok-again", false, "", now);
  breaker.record("ok-again-2", false, "", now);
  CHECK_FALSE(breaker.suspects("pb1-x"));  // 3 of the last 5 again

  SUBCASE("fewer than 4 payloads seen: never") {
    CircuitBreaker fresh(settings);
    for (int i = 0; i < 3; ++i) fresh.record("b" + std::to_string(i), true, "pb1-x", now);
    CHECK_FALSE(fresh.suspects("pb1-x"));
    fresh.record("b3", true, "pb1-x", now);
    CHECK(fresh.suspects("pb1-x"));
  }
  SUBCASE("disabled: never") {
    settings.enabled = false;
    CircuitBreaker off(settings);
    for (int i = 0; i < 10; ++i) off.record("b" + std::to_string(i), true, "pb1-x", now);
    CHECK_FALSE(off.suspects("pb1-x"));
  }
}

TEST_CASE("circuit breaker: known-good probes verify a burst of poison on the second clearing, not the first") {
  CircuitBreaker b(settings());
  open_it(b);
  b.probe_now(t0);
  CHECK(b.may_probe(t0));  // a known-good payload answers at once
  b.probe_started();
  // The handler works: closed, but one success could be an outage that just ended.
  CHECK_FALSE(b.probe_ended(true, t0 + milliseconds(5), /*known_good=*/true));
  CHECK_FALSE(b.open());
  CHECK_FALSE(b.verified("fp-outage"));
  // The same fingerprint fills the window again while the handler works.
  CHECK(fail_distinct(b, 100, 10, "fp-outage") == 1);
  b.probe_started();
  CHECK(b.probe_ended(true, t0 + milliseconds(10), /*known_good=*/true));
  CHECK(b.verified("fp-outage"));
  CHECK_FALSE(b.open());
  // Verified: its failures never open the breaker again, nor raise suspicion.
  CHECK(fail_distinct(b, 200, 30, "fp-outage") == 0);
  CHECK_FALSE(b.open());
  CHECK_FALSE(b.suspects("fp-outage"));
  // Another fingerprint still can, and the verified failures do not help it.
  CHECK(fail_distinct(b, 300, 10, "fp-real-outage") == 1);
  CHECK(b.dominant_fingerprint() == "fp-real-outage");
}

TEST_CASE("circuit breaker: a fresh probe that succeeds verifies nothing; a failed known-good probe keeps it open") {
  CircuitBreaker b(settings());
  open_it(b);
  b.probe_started();
  CHECK_FALSE(b.probe_ended(false, t0 + milliseconds(1000), /*known_good=*/true));
  CHECK(b.open());
  b.probe_started();
  CHECK_FALSE(b.probe_ended(true, t0 + milliseconds(2000)));
  CHECK_FALSE(b.open());
  CHECK(fail_distinct(b, 100, 10, "fp-outage") == 1);
  b.probe_started();
  CHECK_FALSE(b.probe_ended(true, t0 + milliseconds(3000), /*known_good=*/true));  // the first known-good clearing
  CHECK_FALSE(b.verified("fp-outage"));
}

TEST_CASE("circuit breaker: open longer than max_wait is waiting too long") {
  BreakerSettings s = settings();
  s.max_wait = milliseconds(3000);
  CircuitBreaker b(s);
  CHECK_FALSE(b.waited_too_long(t0 + std::chrono::hours(1)));  // closed
  open_it(b, t0);
  CHECK(b.opened_at() == t0);
  CHECK_FALSE(b.waited_too_long(t0 + milliseconds(2999)));
  CHECK(b.waited_too_long(t0 + milliseconds(3000)));
  s.max_wait = milliseconds(0);  // no limit
  CircuitBreaker unlimited(s);
  open_it(unlimited, t0);
  CHECK_FALSE(unlimited.waited_too_long(t0 + std::chrono::hours(24 * 365)));
}

TEST_CASE("circuit breaker: a fingerprint being decided is never the face of an outage; open_for opens at once") {
  CircuitBreaker b(settings());
  b.set_deciding("fp-burst", true);
  CHECK(fail_distinct(b, 0, 10, "fp-burst") == 0);
  CHECK_FALSE(b.open());
  CHECK(b.failed_with("fp-burst") == 10);
  CHECK(b.failed_with("fp-other") == 0);
  // Decided to be an outage after all (the known-good check failed).
  b.set_deciding("fp-burst", false);
  b.open_for("fp-burst", t0);
  CHECK(b.open());
  CHECK(b.dominant_fingerprint() == "fp-burst");
  CHECK(b.failures_when_opened() == 10);
  CHECK_FALSE(b.may_probe(t0));                      // the check that failed was the probe
  CHECK(b.may_probe(t0 + milliseconds(1000)));
  // Decided to be the payloads' own: verified, never a face again.
  CircuitBreaker c(settings());
  c.verify("fp-burst");
  CHECK(fail_distinct(c, 0, 10, "fp-burst") == 0);
  CHECK_FALSE(c.open());
  BreakerSettings disabled = settings();
  disabled.enabled = false;
  CircuitBreaker d(disabled);
  d.open_for("fp", t0);
  CHECK_FALSE(d.open());
}

TEST_CASE("circuit breaker: asked to check first, a full window names its face instead of opening; a passed check quiets it for a window") {
  CircuitBreaker b(settings());
  std::string check;
  for (int i = 0; i < 9; ++i) CHECK_FALSE(b.record(payload(i), true, "fp-burst", t0, &check));
  CHECK(check.empty());  // not full yet
  CHECK_FALSE(b.record(payload(9), true, "fp-burst", t0, &check));
  CHECK(check == "fp-burst");
  CHECK_FALSE(b.open());
  CHECK(b.times_opened() == 0);
  // The check passed: for the next `window` outcomes the fingerprint is no
  // outage's face, however it fills the window...
  b.passed_check("fp-burst");
  for (int i = 10; i < 19; ++i) {
    check.clear();
    CHECK_FALSE(b.record(payload(i), true, "fp-burst", t0, &check));
    CHECK(check.empty());
  }
  // ...then it asks again (bad inputs go on: once per window's worth).
  CHECK_FALSE(b.record(payload(19), true, "fp-burst", t0, &check));
  CHECK(check == "fp-burst");
  // Without the question (no payload known to work), it opens as before.
  CHECK(b.record(payload(20), true, "fp-burst", t0));
  CHECK(b.open());
}
