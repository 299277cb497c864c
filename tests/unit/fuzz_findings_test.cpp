// What pillbox fuzz keeps and what import recognizes: the behaviour features
// of an outcome (supervisor/fuzz/fuzz_corpus.h), which kinds are findings,
// and fuzzer artifact names (supervisor/ops/artifact_import.h).
#include <doctest/doctest.h>

#include <algorithm>

#include "supervisor/ops/artifact_import.h"
#include "supervisor/fuzz/fuzz_corpus.h"
#include "supervisor/fuzz/fuzz_session.h"

namespace {

bool has(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

}  // namespace

TEST_CASE("fuzz corpus: CPU time, output and memory count in powers of two") {
  pillbox::Outcome o;
  o.kind = pillbox::Kind::kOk;
  o.cpu_ms = 0;
  CHECK(has(pillbox::fuzz::behaviour_features(o), "cpu:0"));
  o.cpu_ms = 1;
  CHECK(has(pillbox::fuzz::behaviour_features(o), "cpu:1"));
  o.cpu_ms = 5;
  CHECK(has(pillbox::fuzz::behaviour_features(o), "cpu:3"));
  o.cpu_ms = 7;
  CHECK(has(pillbox::fuzz::behaviour_features(o), "cpu:3"));  // same bucket as 5: not new
  o.cpu_ms = 8;
  CHECK(has(pillbox::fuzz::behaviour_features(o), "cpu:4"));
  o.output = std::string(100, 'x');
  CHECK(has(pillbox::fuzz::behaviour_features(o), "ok/output:7"));
  o.max_rss_kb = 3 * 1024;
  CHECK(has(pillbox::fuzz::behaviour_features(o), "rss:2"));

  pillbox::fuzz::FuzzCorpus corpus;
  o.cpu_ms = 5;
  CHECK(corpus.observe(pillbox::fuzz::behaviour_features(o)));
  o.cpu_ms = 6;
  CHECK_FALSE(corpus.observe(pillbox::fuzz::behaviour_features(o)));
  o.cpu_ms = 9;  // twice as slow: kept
  CHECK(corpus.observe(pillbox::fuzz::behaviour_features(o)));
}

TEST_CASE("fuzz corpus: rejection messages differ by words, not by the numbers in them") {
  pillbox::Outcome a;
  a.kind = pillbox::Kind::kHandlerError;
  a.message = "bad xref at offset 1234";
  pillbox::Outcome b = a;
  b.message = "bad xref at offset 98765";
  pillbox::Outcome c = a;
  c.message = "missing trailer";
  pillbox::fuzz::FuzzCorpus corpus;
  CHECK(corpus.observe(pillbox::fuzz::behaviour_features(a)));
  CHECK_FALSE(corpus.observe(pillbox::fuzz::behaviour_features(b)));
  CHECK(corpus.observe(pillbox::fuzz::behaviour_features(c)));
}

TEST_CASE("fuzz corpus: bounded in entries and in distinct rejection messages; seeds stay") {
  using namespace pillbox::fuzz;
  FuzzCorpus corpus;
  corpus.add_seed({"the seed", "input seed", "", 0, ""});
  std::mt19937_64 rng(1);
  for (std::size_t i = 0; i < kMaxCorpusEntries + 50; ++i) corpus.add({"entry " + std::to_string(i), "input seed", "", 1, ""}, rng);
  CHECK(corpus.size() == kMaxCorpusEntries);
  bool seed_kept = false;
  for (int i = 0; i < 20000 && !seed_kept; ++i) seed_kept = corpus.pick(rng).bytes == "the seed";
  CHECK(seed_kept);

  // Messages that differ in words (a parser echoing its input): at most
  // kMaxErrorFeatures of them count as new behaviour.
  FuzzCorpus errors;
  std::size_t news = 0;
  for (std::size_t i = 0; i < kMaxErrorFeatures + 100; ++i) {
    std::string word;
    for (std::size_t n = i + 1; n > 0; n /= 26) word += static_cast<char>('a' + n % 26);
    pillbox::Outcome o;
    o.kind = pillbox::Kind::kHandlerError;
    o.message = "unexpected token " + word;
    const auto features = behaviour_features(o);
    std::vector<std::string> only_error;
    for (const auto& f : features) {
      if (f.rfind("error:", 0) == 0) only_error.push_back(f);
    }
    if (errors.observe(only_error)) ++news;
  }
  CHECK(news == kMaxErrorFeatures);
}

TEST_CASE("fuzz corpus: a lineage keeps the newest steps since the seed") {
  using pillbox::fuzz::extend_lineage;
  CHECK(extend_lineage("", "flip-bit") == "flip-bit");
  CHECK(extend_lineage("flip-bit", "dict-insert,arith-8") == "flip-bit | dict-insert,arith-8");
  std::string chain;
  for (int i = 1; i <= 12; ++i) chain = extend_lineage(chain, "op" + std::to_string(i));
  CHECK(chain == "… | op5 | op6 | op7 | op8 | op9 | op10 | op11 | op12");
}

TEST_CASE("fuzz: poison pills are findings, clean rejections and sandbox errors are not") {
  using pillbox::Kind;
  for (Kind k : {Kind::kCrash, Kind::kStackOverflow, Kind::kCpuLimit, Kind::kWallTimeout, Kind::kOom,
                 Kind::kSeccompViolation, Kind::kOutputLimit, Kind::kProtocolError}) {
    CHECK(pillbox::fuzz::is_fuzz_finding(k));
  }
  for (Kind k : {Kind::kOk, Kind::kHandlerError, Kind::kSandboxError, Kind::kSupervisorLost, Kind::kKilled}) {
    CHECK_FALSE(pillbox::fuzz::is_fuzz_finding(k));
  }
}

TEST_CASE("import: libFuzzer and AFL++ artifact names are recognized, other files are not") {
  const std::string sha1 = "3ef71e2871fbc3548edfaa03d48d5f20c4303126";
  struct Case {
    std::string path;
    std::string tool;
    std::string artifact;
  };
  const std::vector<Case> known = {
      {"/x/crash-" + sha1, "libfuzzer", "crash"},
      {"/x/oom-" + sha1, "libfuzzer", "oom"},
      {"/x/timeout-" + sha1, "libfuzzer", "timeout"},
      {"/x/leak-" + sha1, "libfuzzer", "leak"},
      {"/x/slow-unit-" + sha1, "libfuzzer", "slow-unit"},
      {"/x/wire_frame-crash-" + sha1, "libfuzzer", "crash"},  // -artifact_prefix=wire_frame-
      {"/out/default/crashes/id:000000,sig:11,src:000000,time:10,execs:20,op:havoc,rep:2", "afl++", "crashes"},
      {"/out/default/hangs/id:000003,src:000001,time:99,execs:7,op:flip1,pos:0", "afl++", "hangs"},
      {"/out/default/crashes/id_000001,sig_06", "afl++", "crashes"},
  };
  for (const auto& c : known) {
    CAPTURE(c.path);
    const auto a = pillbox::recognize_artifact(c.path);
    REQUIRE(a.has_value());
    CHECK(a->tool == c.tool);
    CHECK(a->artifact == c.artifact);
    CHECK(a->path == c.path);
  }
  for (const std::string& other : std::vector<std::string>{"/out/default/crashes/README.txt", "/out/default/queue/id:000000,time:0",
                                  "/x/crash-1234", "/x/crash-" + sha1 + ".txt", "/x/seed.bin"}) {
    CAPTURE(other);
    CHECK_FALSE(pillbox::recognize_artifact(other).has_value());
  }
}
