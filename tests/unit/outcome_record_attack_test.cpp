// Attacks on the OutcomeRecord change (HEAD 92d9b9a): the JSON reader/writer
// (supervisor/classify/outcome_json.h), the SQL mapping
// (supervisor/store/outcome_columns.h) and the readers of data another
// process wrote that now go through them: broker::parse_delivery (strict),
// broker::parse_dead_letter (lenient), QuarantineStore::get/list and
// outcome_of. Every Redis entry and store row is assumed malicious.
//
// Cases that may crash the process (stack overflow, bad_alloc) run in a
// forked child, so one failure does not end the run: the child's end is
// checked (exit 0 expected; exit 3 means an exception escaped, with its
// what() on stderr; a signal is a crash).
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "supervisor/broker/delivery_history.h"
#include "supervisor/broker/fleet_record.h"
#include "supervisor/classify/outcome.h"
#include "supervisor/classify/outcome_json.h"
#include "supervisor/classify/outcome_record.h"
#include "supervisor/store/quarantine_json.h"
#include "tests/unit/cpu_clock.h"
#include "tests/unit/store_fixture.h"

// PILLBOX_SANITIZED: the sanitizer build, whose test files may be compiled
// without instrumentation but run under ASan's runtime all the same.
#if defined(__SANITIZE_ADDRESS__) || defined(PILLBOX_SANITIZED)
#define ATTACK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTACK_ASAN 1
#endif
#endif
#ifndef ATTACK_ASAN
#define ATTACK_ASAN 0
#endif

namespace {

using namespace pillbox;
using nlohmann::json;

// ---------------------------------------------------------------- helpers

struct ChildEnd {
  bool exited = false;
  int code = -1;
  int sig = 0;
  long max_rss_kb = 0;
  double seconds = 0;
  std::string describe() const {
    return exited ? "exited " + std::to_string(code) + (code == 3 ? " (exception escaped)" : "")
                  : "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
};

// Runs `f` in a child (with RLIMIT_AS `as_bytes` when not 0 and not under ASan).
ChildEnd in_child(const std::function<void()>& f, rlim_t as_bytes = 0) {
  std::fflush(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    // The child's crash is the parent's to report, not doctest's handlers'.
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGILL, SIGFPE}) std::signal(sig, SIG_DFL);
    if (as_bytes != 0 && !ATTACK_ASAN) {
      rlimit rl{as_bytes, as_bytes};
      setrlimit(RLIMIT_AS, &rl);
    }
    try {
      f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "attack child: exception escaped: %s\n", e.what());
      std::fflush(stderr);
      _exit(3);
    }
    std::fflush(nullptr);
    _exit(0);
  }
  int status = 0;
  rusage ru{};
  wait4(pid, &status, 0, &ru);
  ChildEnd end;
  end.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  end.max_rss_kb = ru.ru_maxrss;
  if (WIFEXITED(status)) {
    end.exited = true;
    end.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    end.sig = WTERMSIG(status);
  }
  return end;
}

Outcome crash_outcome() {
  Outcome o;
  o.kind = Kind::kCrash;
  o.signal = SIGSEGV;
  o.fingerprint = "pb1-0123456789abcdef";
  o.crash_state = {"parse_header", "main"};
  o.message = "killed by SIGSEGV";
  o.cpu_ms = 35;
  o.wall_ms = 40;
  o.max_rss_kb = 2048;
  return o;
}

std::string nested_array(std::size_t depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}

// ----------------------------------------------- the code HEAD~1 ran (copied)

namespace old {

// HEAD~1 supervisor/classify/outcome_json.{h,cpp}
struct OutcomeFields {
  std::string kind;
  std::optional<std::string> fingerprint;
  json crash_state;
  std::string message;
  int signal = 0;
  std::string syscall;
  std::int64_t exit_code = -1;
  std::int64_t cpu_ms = 0;
  std::int64_t wall_ms = 0;
  std::int64_t max_rss_kb = 0;
};

OutcomeFields outcome_fields(const Outcome& o) {
  OutcomeFields f;
  f.kind = std::string(to_string(o.kind));
  if (!o.fingerprint.empty()) f.fingerprint = o.fingerprint;
  f.crash_state = o.crash_state;
  f.message = o.message;
  f.signal = o.signal;
  f.syscall = o.syscall;
  f.exit_code = o.exit_code;
  f.cpu_ms = static_cast<std::int64_t>(o.cpu_ms);
  f.wall_ms = static_cast<std::int64_t>(o.wall_ms);
  f.max_rss_kb = static_cast<std::int64_t>(o.max_rss_kb);
  return f;
}

void put_outcome_fields(const OutcomeFields& f, json& j) {
  j["kind"] = f.kind;
  j["fingerprint"] = f.fingerprint ? json(*f.fingerprint) : json(nullptr);
  j["crash_state"] = f.crash_state;
  j["message"] = f.message;
  j["signal"] = f.signal != 0 ? json(signal_name(f.signal)) : json(nullptr);
  j["syscall"] = f.syscall.empty() ? json(nullptr) : json(f.syscall);
  j["exit_code"] = f.exit_code >= 0 ? json(f.exit_code) : json(nullptr);
  j["cpu_ms"] = f.cpu_ms;
  j["wall_ms"] = f.wall_ms;
  j["max_rss_kb"] = f.max_rss_kb;
}

// HEAD~1 supervisor/store/quarantine_json.cpp recorded_outcome_fields: the
// store's crash_state text, parsed, or the text itself.
OutcomeFields recorded_outcome_fields(const OutcomeRecord& e, const std::string& crash_state_text) {
  OutcomeFields f;
  f.kind = e.kind;
  f.fingerprint = e.fingerprint;
  const json parsed = json::parse(crash_state_text, nullptr, false);
  f.crash_state = parsed.is_discarded() ? json(crash_state_text) : parsed;
  f.message = e.message;
  f.signal = static_cast<int>(e.signal);
  f.syscall = e.syscall;
  f.exit_code = e.exit_code;
  f.cpu_ms = e.cpu_ms;
  f.wall_ms = e.wall_ms;
  f.max_rss_kb = e.max_rss_kb;
  return f;
}

// HEAD~1 supervisor/broker/delivery_history.cpp delivery_json
std::string delivery_json(const broker::RecordedDelivery& d) {
  json j = {{"delivery", d.delivery}, {"worker", d.worker},   {"at_ms", d.at_ms},
            {"kind", d.kind},         {"charged", d.charged}, {"transient", d.transient}};
  if (!d.fingerprint.empty()) j["fingerprint"] = d.fingerprint;
  if (!d.note.empty()) j["note"] = d.note;
  if (d.started) j["started"] = true;
  if (!d.kind.empty()) {
    j["signal"] = static_cast<int>(d.signal);
    j["exit_code"] = static_cast<int>(d.exit_code);
    if (!d.syscall.empty()) j["syscall"] = d.syscall;
    j["message"] = d.message;
    j["crash_state"] = d.crash_state;
    j["cpu_ms"] = static_cast<std::uint64_t>(d.cpu_ms);
    j["wall_ms"] = static_cast<std::uint64_t>(d.wall_ms);
    j["max_rss_kb"] = static_cast<std::uint64_t>(d.max_rss_kb);
  }
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

template <typename T>
bool read_number(const json& j, const char* name, T& out) {
  const auto it = j.find(name);
  if (it == j.end()) return true;
  if (it->is_number_unsigned()) {
    const auto v = it->template get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(std::numeric_limits<T>::max())) return false;
    out = static_cast<T>(v);
    return true;
  }
  if (!it->is_number_integer()) return false;
  const auto v = it->template get<std::int64_t>();
  if constexpr (std::is_unsigned_v<T>) {
    if (v < 0) return false;
  } else {
    if (v < static_cast<std::int64_t>(std::numeric_limits<T>::min()) ||
        v > static_cast<std::int64_t>(std::numeric_limits<T>::max())) {
      return false;
    }
  }
  out = static_cast<T>(v);
  return true;
}

// HEAD~1 parse_delivery: does a worker still running the previous build read it?
bool parse_delivery_ok(std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return false;
  try {
    std::int64_t at_ms = 0;
    int signal = 0, exit_code = -1;
    std::uint64_t cpu = 0, wall = 0, rss = 0;
    (void)j.value("worker", "");
    if (!read_number(j, "at_ms", at_ms) || !read_number(j, "signal", signal) ||
        !read_number(j, "exit_code", exit_code) || !read_number(j, "cpu_ms", cpu) ||
        !read_number(j, "wall_ms", wall) || !read_number(j, "max_rss_kb", rss)) {
      return false;
    }
    const std::string kind = j.value("kind", "");
    if (!kind.empty() && !kind_from_string(kind)) return false;
    (void)j.value("fingerprint", "");
    (void)j.value("charged", true);
    (void)j.value("transient", false);
    (void)j.value("note", "");
    (void)j.value("started", false);
    (void)j.value("syscall", "");
    (void)j.value("message", "");
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

}  // namespace old

// ============================================ 1. byte-identical JSON output

TEST_CASE("attack 1a: run --json outcome fields are byte-identical to HEAD~1") {
  std::vector<Outcome> outcomes;
  outcomes.push_back(crash_outcome());
  Outcome ok;
  ok.kind = Kind::kOk;
  ok.exit_code = 0;
  ok.cpu_ms = 1;
  outcomes.push_back(ok);
  Outcome sec = crash_outcome();
  sec.kind = Kind::kSeccompViolation;
  sec.signal = SIGSYS;
  sec.syscall = "ptrace";
  outcomes.push_back(sec);
  Outcome rt = crash_outcome();
  rt.kind = Kind::kKilled;
  rt.signal = 40;  // a real-time signal: "signal 40"
  outcomes.push_back(rt);
  Outcome bad = crash_outcome();
  bad.crash_state = {"\xff\xfe", "ok", ""};
  bad.message = "bad \xc3 utf8";
  bad.cpu_ms = ~0ULL;  // > INT64_MAX
  bad.exit_code = 255;
  bad.signal = 0;
  outcomes.push_back(bad);
  Outcome huge = crash_outcome();
  huge.crash_state.assign(1000, "frame");
  outcomes.push_back(huge);
  for (const Outcome& o : outcomes) {
    json before = json::object(), after = json::object();
    old::put_outcome_fields(old::outcome_fields(o), before);
    put_outcome_record(outcome_record(o), after);
    CHECK(after.dump(-1, ' ', false, json::error_handler_t::replace) ==
          before.dump(-1, ' ', false, json::error_handler_t::replace));
  }
}

TEST_CASE("attack 1b: a well-formed quarantine record's outcome fields are byte-identical to HEAD~1") {
  Outcome o = crash_outcome();
  o.crash_state = {"a", "b\xff", "c"};
  o.message = "m\xff";
  o.exit_code = 3;
  o.syscall = "open";
  OutcomeRecord e = outcome_record(o);
  const std::string stored = crash_state_text(e.crash_state);  // as HEAD~1 wrote the column
  e.crash_state = crash_state_of_text(stored);                 // as HEAD reads it back
  json before = json::object(), after = json::object();
  old::put_outcome_fields(old::recorded_outcome_fields(e, stored), before);
  put_outcome_record(e, after);
  CHECK(after.dump(-1, ' ', false, json::error_handler_t::replace) ==
        before.dump(-1, ' ', false, json::error_handler_t::replace));
}

// The delivery's JSON changed on purpose (one mapping: the record's), so a
// worker before the change reads a delivery written after it as not its own
// (unreadable: uncharged, never a crash). docs/distributed.md says a fleet's
// workers upgrade together; these two cases pin down both halves.
TEST_CASE("attack 1c: delivery_json writes the outcome as put_outcome_record does") {
  const auto d = broker::recorded_outcome(1, "worker-a", 1700000000000, crash_outcome(), true, false);
  const json j = json::parse(broker::delivery_json(d));
  json expected = json::object();
  put_outcome_record(d, expected);
  for (const auto& field : expected.items()) {
    INFO(field.key());
    CHECK(j[field.key()] == field.value());
  }
  CHECK(j["signal"] == "SIGSEGV");
  CHECK(j["exit_code"].is_null());
}

TEST_CASE("attack 1d: a worker before the change reads a delivery written after it as not its own") {
  const auto d = broker::recorded_outcome(1, "worker-a", 1700000000000, crash_outcome(), true, false);
  CHECK_FALSE(old::parse_delivery_ok(broker::delivery_json(d)));
}

TEST_CASE("attack 1e: a delivery HEAD~1 wrote reads the same on HEAD") {
  Outcome o = crash_outcome();
  o.exit_code = -1;
  const auto d = broker::recorded_outcome(1, "worker-a", 1700000000000, o, true, false);
  const auto back = broker::parse_delivery(1, old::delivery_json(d));
  REQUIRE(back.has_value());
  CHECK(static_cast<const OutcomeRecord&>(*back) == static_cast<const OutcomeRecord&>(d));
  CHECK(back->charged);
}

// ===================================== 2. parse_delivery (strict, Redis hash)

void check_refused_and_uncharged(const std::string& text) {
  INFO("delivery: " << text.substr(0, 200));
  const auto d = broker::parse_delivery(1, text);
  CHECK_FALSE(d.has_value());
  const auto h = broker::entry_history(2, {{1, text}});
  CHECK(h.unreadable == 1);
  REQUIRE(h.recorded.size() == 1);
  CHECK_FALSE(h.recorded[0].charged);
}

TEST_CASE("attack 2a: strict: numbers out of range, floats, -0 edge cases are refused and never charged") {
  for (const char* field : {"signal", "exit_code", "cpu_ms", "wall_ms", "max_rss_kb", "at_ms"}) {
    for (const char* v : {"1e308", "-1e308", "18446744073709551615", "9223372036854775808",
                          "-9223372036854775809", "1.0", "0.5", "true", "[]", "{}"}) {
      check_refused_and_uncharged(std::string(R"({"kind":"crash","charged":true,")") + field + "\":" + v + "}");
    }
  }
  // -0 is a whole number 0: read, no crash.
  const auto z = broker::parse_delivery(1, R"({"kind":"crash","signal":-0,"exit_code":-0})");
  REQUIRE(z.has_value());
  CHECK(z->signal == 0);
  CHECK(z->exit_code == 0);
}

TEST_CASE("attack 2b: strict: a signal name that is no signal is refused (SIGRTMIN+40, SIGFOO, \"11\", \"\")") {
  for (const char* v : {"\"SIGRTMIN+40\"", "\"SIGFOO\"", "\"11\"", "\"\"", "\"signal 99\"", "\"sigsegv\""}) {
    check_refused_and_uncharged(std::string(R"({"kind":"crash","charged":true,"signal":)") + v + "}");
  }
}

TEST_CASE("attack 2c: strict: a crash_state that is not an array of strings is refused") {
  for (const char* v : {"5", "\"parse_header\"", "{}", "true", "[1,2]", "[\"a\",{\"b\":1}]", "[null]"}) {
    check_refused_and_uncharged(std::string(R"({"kind":"crash","charged":true,"crash_state":)") + v + "}");
  }
}

TEST_CASE("attack 2d: strict: a signal number no process can die of is refused (65, 99999, INT_MAX)") {
  for (const char* v : {"65", "99999", "2147483647"}) {
    check_refused_and_uncharged(std::string(R"({"kind":"crash","charged":true,"signal":)") + v + "}");
  }
}

TEST_CASE("attack 2e: strict: a kind this build does not know, or of the wrong type, is refused") {
  for (const char* v : {"\"no-such-kind\"", "\"CRASH\"", "5", "[]", "{}", "true"}) {
    check_refused_and_uncharged(std::string(R"({"charged":true,"kind":)") + v + "}");
  }
  // Duplicate keys: the last one is the one read.
  check_refused_and_uncharged(R"({"kind":"crash","kind":5})");
  check_refused_and_uncharged(R"({"kind":"crash","kind":"no-such-kind"})");
}

TEST_CASE("attack 2f: strict: other fields of the wrong type, null where a value must be") {
  for (const char* t : {R"({"kind":"crash","worker":5})", R"({"kind":"crash","charged":null})",
                        R"({"kind":"crash","charged":1})", R"({"kind":"crash","transient":"no"})",
                        R"({"kind":"crash","note":[]})", R"({"kind":"crash","message":5})",
                        R"({"kind":"crash","fingerprint":{}})", R"({"kind":"crash","started":"yes"})"}) {
    check_refused_and_uncharged(t);
  }
}

TEST_CASE("attack 2g: strict: deep nesting, huge text, invalid UTF-8 are unreadable, never a crash") {
  check_refused_and_uncharged(R"({"kind":"crash","crash_state":)" + nested_array(100000) + "}");
  check_refused_and_uncharged(R"({"kind":"crash","origin":)" + nested_array(65) + "}");
  check_refused_and_uncharged(std::string(R"({"kind":"crash","message":")") + std::string(1 << 20, 'x') + "\"}");
  check_refused_and_uncharged(std::string(100 << 20, '['));
  check_refused_and_uncharged("{\"kind\":\"crash\",\"crash_state\":[\"\xff\xfe\"]}");
  check_refused_and_uncharged("{\"kind\":\"crash\",\"message\":\"\xc3\"}");
  check_refused_and_uncharged(R"({"kind":"crash","message":"\ud800"})");
}

TEST_CASE("attack 2h: strict: a kind null is not a charged attempt") {
  const auto d = broker::parse_delivery(1, R"({"kind":null,"charged":true})");
  // HEAD~1 refused it (kind null is not text); if read, it must be a release, not counted.
  if (d) {
    broker::EntryHistory h;
    h.recorded.push_back(*d);
    // As the engine reads it: a release (nothing ran), never a charged attempt.
    CHECK(broker::engine_history(h, 2).empty());
  }
}

TEST_CASE("attack 2i: a delivery's message is cut to kMaxRecordedMessage, and written/read back") {
  Outcome o = crash_outcome();
  o.message = std::string(broker::kMaxRecordedMessage - 1, 'a') + "\xc3\xa9" + std::string(100, 'b');
  const auto d = broker::recorded_outcome(1, "w", 1, o, true, false);
  CHECK(d.message.size() == broker::kMaxRecordedMessage);
  const auto back = broker::parse_delivery(1, broker::delivery_json(d));
  REQUIRE(back.has_value());
  CHECK(back->message.size() <= broker::kMaxRecordedMessage);
}

// ===================================== 3. read/put_outcome_record directly

TEST_CASE("attack 3a: every signal 1..64 round-trips through put/read") {
  for (int sig = 1; sig <= 64; ++sig) {
    OutcomeRecord r;
    r.kind = "killed";
    r.signal = sig;
    json j = json::object();
    put_outcome_record(r, j);
    const auto back = read_outcome_record(j, true);
    INFO(sig << " written as " << j["signal"].dump());
    REQUIRE(back.has_value());
    CHECK(back->signal == sig);
  }
}

TEST_CASE("attack 3b: a signal the strict reader accepts is written so it reads back the same") {
  for (std::int64_t sig : {65LL, 99999LL, 2147483647LL}) {
    json in = json::object();
    in["kind"] = "killed";
    in["signal"] = sig;
    const auto r = read_outcome_record(in, true);
    if (!r) continue;  // refused: fine
    json out = json::object();
    put_outcome_record(*r, out);
    const auto back = read_outcome_record(out, true);
    INFO(sig << " written as " << out["signal"].dump());
    REQUIRE(back.has_value());
    CHECK(back->signal == r->signal);
  }
}

TEST_CASE("attack 3c: 10^6 frames: put, dump, parse, read back, quickly") {
  OutcomeRecord r;
  r.kind = "crash";
  r.crash_state.reserve(1000000);
  for (int i = 0; i < 1000000; ++i) r.crash_state.push_back("f" + std::to_string(i));
  // The thread's CPU time, not the wall clock: a loaded host (CI runs
  // other tests beside this one) must not fail it; quadratic work would
  // take hours either way.
  const double t0 = pillbox::test::thread_cpu_seconds();
  json j = json::object();
  put_outcome_record(r, j);
  const std::string text = j.dump();
  const auto back = read_outcome_record(json::parse(text), true);
  REQUIRE(back.has_value());
  CHECK(back->crash_state == r.crash_state);
  CHECK(crash_state_of_text(crash_state_text(r.crash_state)) == r.crash_state);
  const double s = pillbox::test::thread_cpu_seconds() - t0;
  INFO("CPU seconds: " << s);
  CHECK(s < 20.0);
}

TEST_CASE("attack 3d: read_outcome_record on a json nested 10^6 deep (no depth guard in front) does not crash") {
  const ChildEnd end = in_child([] {
    json deep = json::array();
    json* p = &deep;
    for (int i = 0; i < 1000000; ++i) {
      p->push_back(json::array());
      p = &p->back();
    }
    json j = json::object();
    j["kind"] = "crash";
    j["crash_state"] = std::move(deep);
    j["message"] = json::object();
    (void)read_outcome_record(j, true);
    (void)read_outcome_record(j, false);
  });
  INFO(end.describe());
  CHECK((end.exited && end.code == 0));
}

// ===================================== 4. crash_state_of_text (store column)

TEST_CASE("attack 4a: crash_state_of_text of an array holding a frame nested 10^6 deep does not crash") {
  const std::string text = "[" + nested_array(1000000) + "]";  // 2 MB, valid JSON
  const ChildEnd end = in_child([&] {
    const auto frames = crash_state_of_text(text);
    if (frames.size() != 1) _exit(4);
  });
  INFO(end.describe());
  CHECK((end.exited && end.code == 0));
}

TEST_CASE("attack 4b: crash_state_of_text of 100 MB of '[' returns its text as one frame, in bounded memory") {
  if (ATTACK_ASAN) {
    MESSAGE("skipped under ASan (RLIMIT_AS does not mix with its shadow memory)");
    return;
  }
  const ChildEnd end = in_child(
      [] {
        const std::string text(100u << 20, '[');
        const auto frames = crash_state_of_text(text);
        if (frames.size() != 1 || frames[0].size() != text.size()) _exit(4);
      },
      /*as_bytes=*/rlim_t(2) << 30);  // 2 GiB: twenty times the row
  INFO(end.describe() << ", max rss " << end.max_rss_kb << " KiB, " << end.seconds << " s");
  CHECK((end.exited && end.code == 0));
  CHECK(end.seconds < 30.0);
}

TEST_CASE("attack 4c: crash_state_of_text edge values never throw") {
  for (const std::string t : {"[1e308]", "[-0]", "[18446744073709551615]", "[9223372036854775808]", "[\"\\ud800\"]",
                              "\xff\xfe", "[\"\xff\"]", "", "null", "[]]", "[[]", "[\"a\",\"a\"]", "{\"a\":1,\"a\":2}"}) {
    INFO(t);
    std::vector<std::string> frames;
    CHECK_NOTHROW(frames = crash_state_of_text(t));
    OutcomeRecord r;
    r.kind = "crash";
    r.fingerprint = "pb1-x";
    r.crash_state = frames;
    json j = json::object();
    put_outcome_record(r, j);
    CHECK_NOTHROW((void)j.dump(-1, ' ', false, json::error_handler_t::replace));
  }
}

// ===================================== 5. QuarantineStore rows

struct Row {
  test::StoreFixture env;
  std::int64_t id = 0;
  explicit Row(const std::string& name) : env(name) {
    const std::int64_t now = store::now_ms();
    REQUIRE(env.ledger->begin().is_ok());
    store::QuarantineEntry e = env.entry("k", "payload", "pb1-0123456789abcdef", now);
    static_cast<OutcomeRecord&>(e) = outcome_record(crash_outcome());
    auto r = env.qs->insert(e, "payload", now, "test");
    REQUIRE_MESSAGE(r.has_value(), r.error());
    REQUIRE(env.ledger->commit().is_ok());
    id = r->id;
  }
  void set(const std::string& assignment) {
    const auto st = env.db().exec("UPDATE quarantine SET " + assignment + " WHERE id = " + std::to_string(id));
    REQUIRE_MESSAGE(st.is_ok(), assignment);
  }
  store::QuarantineRecord get() {
    auto got = env.qs->get(id);
    REQUIRE_MESSAGE(got.has_value(), got.error());
    REQUIRE(got->has_value());
    return **got;
  }
};

TEST_CASE("attack 5a: a store row whose crash_state nests 10^6 deep: get and list do not crash") {
  Row row("attack-deep-row");
  row.set("crash_state = '[' || '" + nested_array(1000000) + "' || ']'");
  const ChildEnd got = in_child([&] { (void)row.env.qs->get(row.id); });
  INFO("get: " << got.describe());
  CHECK((got.exited && got.code == 0));
  const ChildEnd listed = in_child([&] { (void)row.env.qs->list(store::ListFilter{}); });
  INFO("list: " << listed.describe());
  CHECK((listed.exited && listed.code == 0));
}

TEST_CASE("attack 5b: a store row's signal that does not fit an int is not read as another signal") {
  Row row("attack-signal-row");
  row.set("signal = 4294967307");  // 2^32 + 11
  const auto rec = row.get();
  CHECK(rec.entry.signal == 4294967307LL);
  CHECK(outcome_of(rec.entry).signal != SIGSEGV);
  const json j = json::parse(quarantine_record_json(rec, 0, false, ""));
  CHECK(j["signal"] != "SIGSEGV");
}

TEST_CASE("attack 5c: a store row's exit_code that does not fit an int is not read as exit 0") {
  Row row("attack-exit-row");
  row.set("exit_code = 4294967296");  // 2^32
  const auto rec = row.get();
  CHECK(outcome_of(rec.entry).exit_code != 0);
}

TEST_CASE("attack 5d: store rows with REAL/TEXT/negative figures and invalid UTF-8 read without crash") {
  Row row("attack-odd-row");
  row.set("signal = 1e308, exit_code = -1e308, cpu_ms = -1, wall_ms = 'abc', max_rss_kb = 9.5e18, "
          "message = CAST(X'FFFE41' AS TEXT), crash_state = CAST(X'5B22FF225D' AS TEXT), kind = 'from-the-future'");
  const auto rec = row.get();
  std::string text;
  CHECK_NOTHROW(text = quarantine_record_json(rec, 0, false, ""));
  CHECK_NOTHROW(static_cast<void>(json::parse(text).is_object()));
  const Outcome o = outcome_of(rec.entry);
  CHECK(o.kind == Kind::kProtocolError);
  // A negative figure from a row is not turned into 2^64 - 1 ms.
  CHECK(o.cpu_ms != ~0ULL);
}

TEST_CASE("attack 5e: a store row of 10^6 frames reads back whole") {
  test::StoreFixture env("attack-many-frames");
  const std::int64_t now = store::now_ms();
  REQUIRE(env.ledger->begin().is_ok());
  store::QuarantineEntry e = env.entry("k", "payload", "pb1-0123456789abcdef", now);
  for (int i = 0; i < 1000000; ++i) e.crash_state.push_back(std::to_string(i));
  auto r = env.qs->insert(e, "payload", now, "test");
  REQUIRE_MESSAGE(r.has_value(), r.error());
  REQUIRE(env.ledger->commit().is_ok());
  auto got = env.qs->get(r->id);
  REQUIRE(got.has_value());
  REQUIRE(got->has_value());
  CHECK((*got)->entry.crash_state == e.crash_state);
}

// ===================================== 6. parse_dead_letter (lenient)

broker::FleetRecord dead_letter(const std::string& record) {
  broker::EntryFields f = {{"key", "k"},         {"kind", "crash"}, {"fingerprint", "pb1-fallback"},
                           {"payload", "payload"}, {"record", record}};
  return broker::parse_dead_letter("1700000000000-0", f);
}

TEST_CASE("attack 6a: lenient: a dead letter's bad outcome fields keep their defaults, the rest is still read") {
  const auto fr = dead_letter(
      R"({"kind":5,"fingerprint":null,"message":"still here","signal":"SIGRTMIN+40","exit_code":1e308,)"
      R"("cpu_ms":-1,"wall_ms":18446744073709551615,"max_rss_kb":9223372036854775808,"syscall":[],)"
      R"("crash_state":["a",1,{"x":[]},"b"]})");
  const auto& e = fr.record.entry;
  CHECK(e.kind == "crash");                // the entry's own field
  CHECK(e.fingerprint == "pb1-fallback");  // the entry's own field
  CHECK(e.message == "still here");
  CHECK(e.signal == 0);
  CHECK(e.exit_code == -1);
  CHECK(e.cpu_ms == 0);
  CHECK(e.wall_ms == 0);
  CHECK(e.max_rss_kb == 0);
  CHECK(e.syscall.empty());
  CHECK(e.crash_state == std::vector<std::string>{"a", "b"});
}

TEST_CASE("attack 6b: lenient: a dead letter's other figures (payload_size, repeats, deliveries) as floats are not converted") {
  // number_of (fleet_record.cpp) still does get<int64_t>() on any number:
  // 1e308 -> int64 is undefined behaviour (UBSan: float-cast-overflow).
  const auto fr = dead_letter(
      R"({"kind":"crash","payload_size":1e308,"repeats":-1e308,"deliveries":1e300,)"
      R"("attempts_history":[{"delivery":1e308,"at_ms":1e308,"kind":"crash"}]})");
  CHECK(fr.record.entry.payload_size == 7);  // the payload's own size, as for any unreadable figure
  CHECK(fr.record.repeats == 0);
  CHECK(fr.deliveries == 0);
  REQUIRE(fr.attempts.size() == 1);
  CHECK(fr.attempts[0].ended_at == 0);
}

TEST_CASE("attack 6c: lenient: dead letters that are not records never crash") {
  for (const std::string& r : {std::string(""), std::string("not json"), std::string("[1,2]"), std::string("null"),
                              std::string(2 << 20, '['), "{\"crash_state\":" + nested_array(200000) + "}",
                              "{\"crash_state\":" + nested_array(60) + "}", std::string("{\"message\":\"\xff\"}"),
                              std::string(R"({"message":null,"kind":null})")}) {
    INFO(r.substr(0, 80));
    broker::FleetRecord fr;
    CHECK_NOTHROW(fr = dead_letter(r));
    CHECK(fr.record.entry.kind == "crash");
    CHECK_NOTHROW((void)quarantine_record_json(fr.record, 0, false, ""));
    CHECK_NOTHROW((void)outcome_of(fr.record.entry));
  }
}

TEST_CASE("attack 6d: lenient: a dead letter with ~330k frames (1 MB) reads quickly") {
  std::string r = R"({"kind":"crash","crash_state":[)";
  while (r.size() < (1 << 20) - 16) r += "\"\",";
  r += "\"\"]}";
  const double t0 = pillbox::test::thread_cpu_seconds();  // CPU, not wall: see cpu_clock.h
  const auto fr = dead_letter(r);
  const double s = pillbox::test::thread_cpu_seconds() - t0;
  CHECK(fr.record.entry.crash_state.size() > 300000);
  CHECK(s < 5.0);
}

}  // namespace
