// The `regex` handler (libstdc++ std::regex, deliberately unbounded):
// catastrophic backtracking must end at the CPU limit, deep recursion as a
// stack overflow, and ordinary subjects must give exact results.
#include <doctest/doctest.h>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

TEST_CASE("catastrophic backtracking ends as cpu-limit at the CPU limit, not the wall limit") {
  e2e::TempDir dir;
  const std::string subject = dir.write("evil", std::string(30, 'a') + "!");
  // The wall limit stays at 10 s: only the CPU limit can end this task in time.
  const auto r = run_pillbox({"run", "--json", "--handler", "regex", "--arg", "pattern=(a+)+$", "--cpu", "2s",
                              "--timeout", "10s", subject});
  long wall_ms = -1, cpu_ms = -1;
  {
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    REQUIRE(r.records.size() == 1);
    const auto& rec = r.records[0];
    CHECK(rec["key"] == subject);
    CHECK(rec["status"] == "failed");
    CHECK(rec["kind"] == "cpu-limit");
    CHECK(rec["fingerprint"].is_string());
    wall_ms = rec["wall_ms"].get<long>();
    cpu_ms = rec["cpu_ms"].get<long>();
    // Ended by the 2 s of CPU, well before the 10 s wall limit. Not "right
    // after 2 s of wall time": with the suite running two tests at a time on
    // 2 cores, 2 s of CPU took more than 3.5 s of wall time once (load 7).
    CHECK(wall_ms < 2000 + 4000);
    // It really ran to the limit. Not 1900: on this VM the kernel's RLIMIT_CPU
    // accounting runs ahead of the rusage wait4 reports, by up to ~15 % under
    // load (a plain `ulimit -t 2` busy loop reports 1.64-1.72 s there). A limit
    // applied at 1 s instead of 2 s still fails this.
    CHECK(cpu_ms >= 1500);
    CHECK(cpu_ms < 2000 + 500);
  }
  MESSAGE("cpu-limit task: cpu_ms " << cpu_ms << ", wall_ms " << wall_ms);
}

TEST_CASE("deep recursion in the regex executor is a stack-overflow; other tasks of the run still succeed") {
  e2e::TempDir dir;
  const std::string deep = dir.write("deep", std::string(100000, 'a'));
  const std::string fine = dir.write("fine", "xxabbay");
  const auto r = run_pillbox({"run", "--json", "--handler", "regex", "--arg", "pattern=(a|b)*", deep, fine});
  INFO(r.describe());
  CHECK(r.exit_code == 1);  // some failed
  REQUIRE(r.records.size() == 2);

  const auto& so = r.record(deep);
  CHECK(so["kind"] == "stack-overflow");
  CHECK(so["status"] == "failed");
  CHECK(so["signal"] == "SIGSEGV");
  REQUIRE(so["crash_state"].is_array());
  CHECK(!so["crash_state"].empty());
  bool mentions_dfs = false;
  for (const auto& f : so["crash_state"]) mentions_dfs |= f.get<std::string>().find("_M_dfs") != std::string::npos;
  CHECK_MESSAGE(mentions_dfs, "crash_state " << so["crash_state"].dump());

  // (a|b)* matches the empty string at position 0 of "xxabbay".
  const auto& ok = r.record(fine);
  CHECK(ok["kind"] == "ok");
  CHECK(ok["status"] == "ok");
  REQUIRE(ok.contains("output"));
  const std::string out = ok["output"];
  REQUIRE(!out.empty());
  CHECK(out.back() == '\n');
  const auto j = nlohmann::json::parse(out);
  CHECK(j["matched"] == true);
  CHECK(j["position"] == 0);
  CHECK(j["length"] == 0);
  CHECK(j["match"] == "");
}

TEST_CASE("ordinary subjects give exact results and exit code 0") {
  e2e::TempDir dir;
  const std::string dates = dir.write("dates", "released on 2024-03-17, patched 2024-04-01");
  const std::string none = dir.write("none", "no digits here");
  const std::string quoted = dir.write("quoted", "id=\"1999-12-31\"\n");
  const auto r = run_pillbox({"run", "--json", "--handler", "regex", "--arg", "pattern=\\d{4}-\\d{2}-\\d{2}", dates,
                              none, quoted});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 3);
  CHECK(r.count_kind("ok") == 3);

  auto output = [&](const std::string& key) {
    const auto& rec = r.record(key);
    REQUIRE(rec["status"] == "ok");
    REQUIRE(rec.contains("output"));
    const std::string out = rec["output"];
    CHECK(out.size() > 1);
    CHECK(out.back() == '\n');
    return nlohmann::json::parse(out);
  };
  const auto d = output(dates);
  CHECK(d["matched"] == true);
  CHECK(d["position"] == 12);
  CHECK(d["length"] == 10);
  CHECK(d["match"] == "2024-03-17");
  const auto n = output(none);
  CHECK(n["matched"] == false);
  CHECK(!n.contains("match"));
  const auto q = output(quoted);
  CHECK(q["matched"] == true);
  CHECK(q["position"] == 4);
  CHECK(q["match"] == "1999-12-31");
}

TEST_CASE("mode=match anchors at both ends, icase=yes ignores case") {
  e2e::TempDir dir;
  const std::string whole = dir.write("whole", "Hello");
  const std::string part = dir.write("part", "Hello, world");
  const auto r = run_pillbox({"run", "--json", "--handler", "regex", "--arg", "pattern=h[a-z]+o", "--arg", "mode=match",
                              "--arg", "icase=yes", whole, part});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 2);
  const auto w = nlohmann::json::parse(r.record(whole)["output"].get<std::string>());
  CHECK(w["matched"] == true);
  CHECK(w["match"] == "Hello");
  const auto p = nlohmann::json::parse(r.record(part)["output"].get<std::string>());
  CHECK(p["matched"] == false);
}
