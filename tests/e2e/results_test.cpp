// Results are never lost (issue 14, point 4): the results of ok tasks are
// kept in the store by default, bounded by --keep-results (the oldest
// evicted), read back with `pillbox results`, and written by a later
// `run --out` for tasks it skips as done. Every input accounted for (point
// 5): a JSON line's key is a string or comes from its payload; a key given
// twice keeps both results apart.
#include <dirent.h>
#include <sys/stat.h>

#include <doctest/doctest.h>
#include <set>

#include "shared/base64.h"
#include "shared/sha256.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

std::string line_of(const nlohmann::json& j) { return j.dump() + "\n"; }

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') names.insert(e->d_name);
    }
    ::closedir(d);
  }
  return names;
}

// `pillbox results --json` records by key (one result per key expected).
std::map<std::string, nlohmann::json> results_by_key(const std::string& store) {
  const auto r = run_pillbox({"results", "--store", store, "--json"});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  std::map<std::string, nlohmann::json> by_key;
  for (const auto& j : r.records) by_key[j["key"].get<std::string>()] = j;
  return by_key;
}

std::string binary_bytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s += static_cast<char>(i);
  return s;
}

}  // namespace

TEST_CASE("a run without --json or --out keeps its results; `pillbox results` gives them back exactly") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string text = "hello, kept result\n";
  const std::string binary = binary_bytes();
  const std::string input = line_of({{"key", "text"}, {"payload", text}}) +
                            line_of({{"key", "bin/1"}, {"payload_b64", pillbox::base64_encode(binary)}});
  const auto run = run_pillbox({"run", "--store", store, "--handler", "echo", "--quiet", "-"}, input);
  INFO(run.describe());
  REQUIRE(run.exit_code == 0);
  CHECK(run.out.empty());  // printed nowhere...

  // ... and kept: raw bytes for one key,
  const auto one = run_pillbox({"results", "--store", store, "text"});
  INFO(one.describe());
  CHECK(one.exit_code == 0);
  CHECK(one.out == text);
  const auto raw = run_pillbox({"results", "--store", store, "bin/1"});
  CHECK(raw.exit_code == 0);
  CHECK(raw.out == binary);

  // as JSON like run --json (output or output_b64),
  auto all = results_by_key(store);
  REQUIRE(all.size() == 2);
  CHECK(all["text"]["result"] == "kept");
  CHECK(all["text"]["output"] == text);
  CHECK(all["text"]["payload_sha256"] == pillbox::sha256_hex(text));
  CHECK(all["bin/1"]["size"] == 256);
  CHECK(*pillbox::base64_decode(all["bin/1"]["output_b64"].get<std::string>()) == binary);

  // and as files named like run --out's.
  const std::string out = dir.path() + "/out";
  const auto files = run_pillbox({"results", "--store", store, "-o", out});
  INFO(files.describe());
  CHECK(files.exit_code == 0);
  CHECK(files_in(out) == std::set<std::string>{"text.out", "bin%2F1.out"});
  CHECK(e2e::read_file(out + "/text.out") == text);
  CHECK(e2e::read_file(out + "/bin%2F1.out") == binary);

  // A key no task has: an error naming it, exit 2.
  const auto unknown = run_pillbox({"results", "--store", store, "no-such-key"});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("no task with key 'no-such-key'") != std::string::npos);
}

TEST_CASE("--keep-results 0 keeps none, and `pillbox results` says so") {
  e2e::TempDir dir;
  REQUIRE(::mkdir(dir.file("in").c_str(), 0755) == 0);
  const std::string store = dir.path() + "/store";
  const std::string a = dir.write("in/a.txt", "aaaa");
  const auto run = run_pillbox({"run", "--store", store, "--keep-results", "0", "--handler", "echo", "--quiet", a});
  INFO(run.describe());
  REQUIRE(run.exit_code == 0);
  CHECK(e2e::sql_int(store + "/pillbox.db", "SELECT count(*) FROM results") == 0);
  const auto r = run_pillbox({"results", "--store", store, a});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK(r.out.empty());
  CHECK(r.err.find("not kept") != std::string::npos);
  CHECK(r.err.find("--rerun") != std::string::npos);

  const auto bad = run_pillbox({"run", "--no-store", "--keep-results", "1M", "--handler", "echo", a});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--keep-results") != std::string::npos);
  const auto typo = run_pillbox({"run", "--store", store, "--keep-results", "lots", "--handler", "echo", a});
  CHECK(typo.exit_code == 2);
  CHECK(typo.err.find("--keep-results expects a size") != std::string::npos);
}

TEST_CASE("over --keep-results the oldest results are evicted; one larger than the limit is not kept") {
  e2e::TempDir dir;
  REQUIRE(::mkdir(dir.file("in").c_str(), 0755) == 0);
  const std::string store = dir.path() + "/store";
  const std::string db = store + "/pillbox.db";
  // Three results of 40 bytes, one run each (so each is newer than the last),
  // under a limit of 100 bytes: the first goes when the third comes.
  for (const char* name : {"first", "second", "third"}) {
    const std::string file = dir.write(std::string("in/") + name, std::string(40, name[0]));
    const auto run = run_pillbox({"run", "--store", store, "--keep-results", "100", "--handler", "echo", "--quiet", file});
    INFO(run.describe());
    REQUIRE(run.exit_code == 0);
  }
  auto all = results_by_key(store);
  REQUIRE(all.size() == 3);
  CHECK(all[dir.file("in/first")]["result"] == "evicted");
  CHECK(!all[dir.file("in/first")].contains("output"));
  CHECK(all[dir.file("in/second")]["output"] == std::string(40, 's'));
  CHECK(all[dir.file("in/third")]["output"] == std::string(40, 't'));
  // The running total is what is kept, not a sum taken now and then.
  CHECK(e2e::sql_int(db, "SELECT bytes FROM results_total") == 80);
  CHECK(e2e::sql_int(db, "SELECT coalesce(sum(size), 0) FROM results WHERE status = 'kept'") == 80);

  const auto evicted = run_pillbox({"results", "--store", store, dir.file("in/first")});
  CHECK(evicted.exit_code == 1);
  CHECK(evicted.err.find("evicted") != std::string::npos);

  // Larger than the limit on its own: recorded as too large, nothing evicted for it.
  const std::string big = dir.write("in/big", std::string(150, 'b'));
  const auto run = run_pillbox({"run", "--store", store, "--keep-results", "100", "--handler", "echo", "--quiet", big});
  REQUIRE(run.exit_code == 0);
  all = results_by_key(store);
  CHECK(all[dir.file("in/big")]["result"] == "too-large");
  CHECK(all[dir.file("in/big")]["size"] == 150);
  CHECK(all[dir.file("in/second")]["result"] == "kept");
  CHECK(e2e::sql_int(db, "SELECT bytes FROM results_total") == 80);

  // --rerun replaces a task's result: evicted before, kept again now.
  const auto rerun = run_pillbox({"run", "--store", store, "--keep-results", "100", "--rerun", "--handler", "echo",
                                  "--quiet", dir.file("in/first")});
  REQUIRE(rerun.exit_code == 0);
  all = results_by_key(store);
  CHECK(all[dir.file("in/first")]["output"] == std::string(40, 'f'));
  CHECK(all[dir.file("in/second")]["result"] == "evicted");
  CHECK(e2e::sql_int(db, "SELECT bytes FROM results_total") == 80);
}

TEST_CASE("a second run --out over done tasks writes their kept results; those not kept are counted") {
  e2e::TempDir dir;
  REQUIRE(::mkdir(dir.file("in").c_str(), 0755) == 0);
  const std::string store = dir.path() + "/store";
  dir.write("in/a.txt", "alpha");
  dir.write("in/b.txt", "beta");
  const auto first = run_pillbox({"run", "--store", store, "--handler", "echo", "--quiet", dir.file("in")});
  INFO(first.describe());
  REQUIRE(first.exit_code == 0);

  const std::string out = dir.path() + "/out";
  const auto second = run_pillbox({"run", "--store", store, "--handler", "echo", "--out", out, dir.file("in")});
  INFO(second.describe());
  CHECK(second.exit_code == 0);
  CHECK(second.err.find("skipped: 2 already ok") != std::string::npos);
  const std::set<std::string> names = files_in(out);
  REQUIRE(names.size() == 2);
  for (const auto& name : names) {
    const std::string bytes = e2e::read_file(out + "/" + name);
    CHECK((bytes == "alpha" || bytes == "beta"));
  }

  // Done by a run that kept nothing: said once, with what to do.
  const std::string store0 = dir.path() + "/store0";
  REQUIRE(run_pillbox({"run", "--store", store0, "--keep-results", "0", "--handler", "echo", "--quiet", dir.file("in")})
              .exit_code == 0);
  const std::string out0 = dir.path() + "/out0";
  const auto none = run_pillbox({"run", "--store", store0, "--handler", "echo", "--out", out0, dir.file("in")});
  INFO(none.describe());
  CHECK(files_in(out0).empty());
  CHECK(none.err.find("results: 2 tasks already ok had no kept result") != std::string::npos);
  CHECK(none.err.find("--rerun") != std::string::npos);
}

TEST_CASE("a JSON line without a key gets one from its payload: moving lines changes nothing") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string one = line_of({{"payload", "one"}});
  const std::string two = line_of({{"payload", "two"}});
  const auto first = run_pillbox({"run", "--store", store, "--handler", "echo", "--json", "-"}, one + two);
  INFO(first.describe());
  REQUIRE(first.exit_code == 0);
  const std::string key_one = "sha256:" + pillbox::sha256_hex("one").substr(0, 16);
  const std::string key_two = "sha256:" + pillbox::sha256_hex("two").substr(0, 16);
  CHECK(first.record(key_one)["output"] == "one");
  CHECK(first.record(key_two)["output"] == "two");

  // The same lines the other way round: the same tasks, already done.
  const auto moved = run_pillbox({"run", "--store", store, "--handler", "echo", "--json", "-"}, two + one);
  INFO(moved.describe());
  CHECK(moved.exit_code == 0);
  REQUIRE(moved.records.size() == 2);
  for (const auto& j : moved.records) CHECK(j["verdict"] == "skipped");
  CHECK(e2e::sql_int(store + "/pillbox.db", "SELECT count(*) FROM tasks") == 2);
}

TEST_CASE("a key that is not a string is an error naming the line; the other lines run; exit 2") {
  const std::string input = line_of({{"key", "fine"}, {"payload", "x"}}) + line_of({{"key", 42}, {"payload", "y"}}) +
                            line_of({{"key", true}, {"payload", "z"}}) +
                            line_of({{"key", {{"id", 1}}}, {"payload", "w"}});
  const auto r = run_pillbox({"run", "--no-store", "--handler", "echo", "--json", "-"}, input);
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  REQUIRE(r.records.size() == 1);
  CHECK(r.record("fine")["output"] == "x");
  CHECK(r.err.find("stdin:2: \"key\" must be a string, not number") != std::string::npos);
  CHECK(r.err.find("stdin:3: \"key\" must be a string, not boolean") != std::string::npos);
  CHECK(r.err.find("stdin:4: \"key\" must be a string, not object") != std::string::npos);
}

TEST_CASE("the same key with two payloads: a warning naming both lines; both run; both results kept apart") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string out = dir.path() + "/out";
  const std::string input = line_of({{"key", "k"}, {"payload", "first"}}) + line_of({{"key", "other"}, {"payload", "o"}}) +
                            line_of({{"key", "k"}, {"payload", "second"}}) + line_of({{"key", "k"}, {"payload", "first"}});
  const auto r = run_pillbox({"run", "--store", store, "--handler", "echo", "--json", "--out", out, "-"}, input);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("stdin:3: warning: key 'k' was given line 1 with another payload") != std::string::npos);
  // The same key and payload again: one task, run once, and said so.
  CHECK(r.err.find("stdin:4: key 'k' with the same payload as line 1: one task, run once") != std::string::npos);
  std::size_t ran_k = 0;
  for (const auto& j : r.records) ran_k += j["key"] == "k" && j.contains("kind");
  CHECK(ran_k == 2);
  const std::string second_name = "k~" + pillbox::sha256_hex("second").substr(0, 16) + ".out";
  CHECK(files_in(out) == std::set<std::string>{"k.out", "other.out", second_name});
  CHECK(e2e::read_file(out + "/k.out") == "first");
  CHECK(e2e::read_file(out + "/" + second_name) == "second");

  // Both kept in the store, and written back under the same names.
  const auto both = run_pillbox({"results", "--store", store, "--json", "k"});
  INFO(both.describe());
  CHECK(both.exit_code == 0);
  REQUIRE(both.records.size() == 2);
  std::set<std::string> outputs;
  for (const auto& j : both.records) outputs.insert(j["output"].get<std::string>());
  CHECK(outputs == std::set<std::string>{"first", "second"});
  // One key with two results is not one result: no raw bytes, a listing.
  const auto listed = run_pillbox({"results", "--store", store, "k"});
  CHECK(listed.exit_code == 0);
  CHECK(listed.out.find("first") == std::string::npos);
  const std::string again = dir.path() + "/again";
  REQUIRE(run_pillbox({"results", "--store", store, "-o", again}).exit_code == 0);
  CHECK(files_in(again) == files_in(out));
  // And a later run --out over the same input agrees on the names.
  const std::string later = dir.path() + "/later";
  const auto rerun = run_pillbox({"run", "--store", store, "--handler", "echo", "--out", later, "-"}, input);
  INFO(rerun.describe());
  CHECK(files_in(later) == files_in(out));
  CHECK(e2e::read_file(later + "/" + second_name) == "second");
}

TEST_CASE("hostile keys and results: `pillbox results` escapes what it lists and names files like run --out") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string key = "a/../\x1b]0;owned\x07/\x1b[2J";
  const std::string payload = std::string("\x1b[31mred\x00", 9);
  const auto run = run_pillbox({"run", "--store", store, "--handler", "echo", "--quiet", "-"},
                               line_of({{"key", key}, {"payload_b64", pillbox::base64_encode(payload)}}));
  INFO(run.describe());
  REQUIRE(run.exit_code == 0);
  const auto listed = run_pillbox({"results", "--store", store});
  INFO(listed.describe());
  CHECK(listed.exit_code == 0);
  CHECK(listed.out.find('\x1b') == std::string::npos);
  CHECK(listed.out.find('\x07') == std::string::npos);
  const std::string out = dir.path() + "/out";
  REQUIRE(run_pillbox({"results", "--store", store, "-o", out}).exit_code == 0);
  CHECK(files_in(out) == std::set<std::string>{"a%2F..%2F%1B%5D0%3Bowned%07%2F%1B%5B2J.out"});
  CHECK(e2e::read_file(out + "/a%2F..%2F%1B%5D0%3Bowned%07%2F%1B%5B2J.out") == payload);
  // Raw bytes to a pipe are the exact bytes.
  const auto raw = run_pillbox({"results", "--store", store, key});
  CHECK(raw.out == payload);
}

TEST_CASE("keys after --: a key that starts with '-' is read back; an unknown one is exit 2, not a listing") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const auto run = run_pillbox({"run", "--store", store, "--handler", "echo", "--quiet", "-"},
                               line_of({{"key", "-dash"}, {"payload", "dashed"}}));
  INFO(run.describe());
  REQUIRE(run.exit_code == 0);
  const auto got = run_pillbox({"results", "--store", store, "--", "-dash"});
  INFO(got.describe());
  CHECK(got.exit_code == 0);
  CHECK(got.out == "dashed");
  const auto unknown = run_pillbox({"results", "--store", store, "--", "nosuchkey"});
  INFO(unknown.describe());
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.out.empty());
  CHECK(unknown.err.find("nosuchkey") != std::string::npos);
}

TEST_CASE("a task rerun that fails has no result any more: the old one is not given back as if it were ok") {
  e2e::TempDir dir;
  const std::string store = dir.path() + "/store";
  const std::string flag = dir.write("flag", "fine\n");
  const std::string input = dir.write("k", "hello\n");
  // Crashes once the flag file says so; the flag is named on the command
  // line, so the task sees it (read-only) under the exec policy.
  const std::vector<std::string> command = {"--", "/bin/sh", "-c", "grep -q crash \"$1\" && kill -SEGV $$; cat \"$2\"",
                                            "sh", flag, "{}"};
  std::vector<std::string> first = {"run", "--store", store, "--quiet", "--max-attempts", "1", input};
  first.insert(first.end(), command.begin(), command.end());
  const auto ok = run_pillbox(first);
  INFO(ok.describe());
  REQUIRE(ok.exit_code == 0);
  const auto kept = run_pillbox({"results", "--store", store, input});
  INFO(kept.describe());
  REQUIRE(kept.exit_code == 0);
  CHECK(kept.out == "hello\n");
  dir.write("flag", "crash\n");
  std::vector<std::string> again = {"run", "--store", store, "--quiet", "--rerun", "--max-attempts", "1", input};
  again.insert(again.end(), command.begin(), command.end());
  const auto crashed = run_pillbox(again);
  INFO(crashed.describe());
  REQUIRE(crashed.exit_code == 1);
  const auto gone = run_pillbox({"results", "--store", store, input});
  INFO(gone.describe());
  CHECK(gone.exit_code == 1);
  CHECK(gone.out.empty());
  CHECK(gone.err.find("not ok") != std::string::npos);
}
