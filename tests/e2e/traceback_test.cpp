// A Python program that fails with an uncaught exception: payloads that hit
// one raise site with different values share one fingerprint, another raise
// site gets another, and `quarantine show` shows the tail of stderr (made
// safe for a terminal, bounded whatever the program writes).
#include <doctest/doctest.h>
#include <unistd.h>

#include <set>

#include "tests/e2e/support.h"

using e2e::run_pillbox;
using e2e::sql_int;
using e2e::sql_rows;

namespace {

bool contains(const std::string& haystack, std::string_view needle) { return haystack.find(needle) != std::string::npos; }

// The two raise sites have the same message template: only the frames tell
// them apart. What the payload holds is echoed raw to stderr first (control
// bytes included), and a payload starting "Hflood" writes 1 MiB before it.
constexpr const char* kParser = R"py(import sys
def parse_header(x):
    raise ValueError(f"bad {x!r}")
def parse_body(x):
    raise ValueError(f"bad {x!r}")
def main(path):
    raw = open(path, "rb").read()
    sys.stderr.buffer.write(b"parsing " + raw + b"\n")
    sys.stderr.flush()
    if raw.startswith(b"Hflood"):
        sys.stderr.write(("x" * 1023 + "\n") * 1024)
    text = raw.decode("utf-8", "replace")
    if text == "fine":
        return
    if text.startswith("H"):
        parse_header(text)
    parse_body(text)
main(sys.argv[1])
)py";

}  // namespace

TEST_CASE("python3 parser.py {}: one raise site is one fingerprint, two are two; show prints the stderr tail") {
  const std::string python = "/usr/bin/python3";
  if (::access(python.c_str(), X_OK) != 0) {
    MESSAGE("skipped: no /usr/bin/python3 (tools/setup.sh installs python3)");
    return;
  }
  e2e::TempDir dir;
  const std::string script = dir.write("parser.py", kParser);
  const std::string store = dir.path() + "/store";
  const std::vector<std::pair<std::string, std::string>> header_payloads = {
      {"h1", "Hello"}, {"h2", "H'it\"s"}, {"h3", "Hflood 42"}, {"h4", "H\x1b]0;pwned\x07\x1b[2J 0x7f"}};
  const std::vector<std::pair<std::string, std::string>> body_payloads = {{"b1", "body one"}, {"b2", "B 12345"}};
  std::vector<std::string> args{"run", "--store", store, "--json", "--backoff-base", "5ms"};
  for (const auto& [name, bytes] : header_payloads) args.push_back(dir.write(name, bytes));
  for (const auto& [name, bytes] : body_payloads) args.push_back(dir.write(name, bytes));
  const std::string ok_key = dir.write("ok", "fine");
  args.push_back(ok_key);
  args.insert(args.end(), {"--", python, script, "{}"});
  const auto run = run_pillbox(args);
  INFO(run.describe());
  CHECK(run.exit_code == 1);
  REQUIRE(run.records.size() == 7);
  CHECK(run.record(ok_key)["kind"] == "ok");

  const std::string db = store + "/pillbox.db";
  REQUIRE(sql_int(db, "SELECT count(*) FROM quarantine") == 6);
  const auto stats = run_pillbox({"quarantine", "stats", "--store", store, "--json"});
  INFO(stats.describe());
  REQUIRE(stats.exit_code == 0);
  REQUIRE(stats.records.size() == 2);
  CHECK(stats.records[0]["records"] == 4);
  CHECK(stats.records[1]["records"] == 2);
  for (const auto& g : stats.records) CHECK(g["kind"] == "handler-error");

  // Each record: the exception's real text in its message, the raise site first in its crash state.
  for (const auto& row : sql_rows(db, "SELECT key, message, crash_state FROM quarantine")) {
    CAPTURE(row[0]);
    const bool header = contains(row[0], "/h");
    CHECK(contains(row[1], "exit code 1: ValueError: bad '"));
    CHECK(contains(row[2], header ? "\"parse_header (parser.py)\"" : "\"parse_body (parser.py)\""));
    CHECK(contains(row[2], "\"ValueError\""));
  }
  CHECK(sql_int(db, "SELECT count(*) FROM quarantine WHERE message LIKE '%bad ''Hello''%'") == 1);

  // The ok task's attempt keeps no stderr; every failed attempt keeps at most 8 KiB.
  CHECK(sql_int(db, "SELECT count(*) FROM attempts a JOIN tasks t ON t.id = a.task_id WHERE t.key = '" + ok_key +
                        "' AND a.stderr_tail IS NULL") >= 1);
  CHECK(sql_int(db, "SELECT count(*) FROM attempts WHERE kind = 'handler-error' AND length(stderr_tail) > 0") >= 6);
  CHECK(sql_int(db, "SELECT max(length(stderr_tail)) FROM attempts") <= 8192);
  CHECK(sql_int(db, "SELECT max(length(stderr_tail)) FROM quarantine") <= 8192);

  // show: the tail, with the traceback, and nothing raw of the payload's control bytes.
  for (const std::string name : {"h3", "h4"}) {
    CAPTURE(name);
    const std::string id = std::to_string(
        sql_int(db, "SELECT id FROM quarantine WHERE key = '" + dir.file(name) + "'"));
    const auto shown = run_pillbox({"quarantine", "show", "--store", store, id});
    INFO(shown.describe());
    REQUIRE(shown.exit_code == 0);
    CHECK(contains(shown.out, "stderr (last "));
    CHECK(contains(shown.out, "  | Traceback (most recent call last):"));
    CHECK(contains(shown.out, "  |     raise ValueError(f\"bad {x!r}\")"));
    CHECK(contains(shown.out, "  | ValueError: bad '"));
    CHECK(contains(shown.out, "parse_header (parser.py)"));
    CHECK_FALSE(contains(shown.out, "\x1b"));
    CHECK_FALSE(contains(shown.out, "\x07"));
    const auto json = run_pillbox({"quarantine", "show", "--store", store, id, "--json"});
    REQUIRE(json.exit_code == 0);
    const auto record = nlohmann::json::parse(json.out);
    const std::string tail = record["stderr_tail"].get<std::string>();
    CHECK(contains(tail, "Traceback (most recent call last):"));
    CHECK(tail.size() <= 8192 + 8192 / 2);  // raw bytes; invalid UTF-8 would come out as U+FFFD
    REQUIRE(!record["attempt_history"].empty());
    CHECK(contains(record["attempt_history"].back()["stderr_tail"].get<std::string>(), "ValueError: bad '"));
  }
  const std::string flood = std::to_string(sql_int(db, "SELECT id FROM quarantine WHERE key = '" + dir.file("h3") + "'"));
  const auto flooded = run_pillbox({"quarantine", "show", "--store", store, flood});
  CHECK(contains(flooded.out, "stderr (last 8192 bytes of the final attempt):"));
  CHECK_FALSE(contains(flooded.out, "parsing Hflood"));  // 1 MiB ago: out of the tail
}

TEST_CASE("a program that floods stderr: the supervisor keeps 8 KiB and stays small, in both launch modes") {
  const std::string python = "/usr/bin/python3";
  if (::access(python.c_str(), X_OK) != 0) {
    MESSAGE("skipped: no /usr/bin/python3 (tools/setup.sh installs python3)");
    return;
  }
  e2e::TempDir dir;
  // 48 MiB of stderr (under the exec policy's 64 MiB file size limit), then
  // an uncaught exception; a second payload floods past the limit.
  const std::string script = dir.write("flood.py", R"py(import sys
mib = int(open(sys.argv[1]).read())
line = ("y" * 1023 + "\n").encode()
for _ in range(mib * 1024):
    sys.stderr.buffer.write(line)
sys.stderr.flush()
def flooded(n):
    raise RuntimeError(f"flooded {n} MiB")
flooded(mib)
)py");
  const std::string within = dir.write("within", "48");
  const std::string over = dir.write("over", "80");
  const std::string none = dir.write("none", "0");
  for (const char* mode : {"zygote", "spawn"}) {
    CAPTURE(std::string(mode));
    const std::string store = dir.path() + "/store-" + mode;
    // The same run over a payload that writes nothing much: what the
    // supervisor needs anyway (far more under ASan, whose shadow memory counts).
    long baseline_kb = 0;
    const auto quiet = run_pillbox({"run", "--store", store + "-baseline", "--json", "--mode", mode, "--max-attempts", "1",
                                    none, "--", python, script, "{}"},
                                   "", {}, [&](pid_t pid, std::size_t, std::string_view) {
                                     baseline_kb = std::max(baseline_kb, e2e::vm_rss_kb(pid));
                                   });
    REQUIRE(quiet.records.size() == 1);
    long peak_kb = 0;
    const auto run = run_pillbox({"run", "--store", store, "--json", "--mode", mode, "--max-attempts", "1", within, over, "--",
                                  python, script, "{}"},
                                 "", {}, [&](pid_t pid, std::size_t, std::string_view) {
                                   peak_kb = std::max(peak_kb, e2e::vm_rss_kb(pid));
                                 });
    INFO(run.describe());
    REQUIRE(run.records.size() == 2);
    const auto& handled = run.record(within);
    CHECK(handled["kind"] == "handler-error");
    CHECK(handled["message"] == "exit code 1: RuntimeError: flooded 48 MiB");
    CHECK(handled["crash_state"] == nlohmann::json::array({"RuntimeError", "flooded (flood.py)", "<module> (flood.py)"}));
    // Python ignores SIGXFSZ: its write fails with EFBIG and it exits 120.
    CHECK(run.record(over)["kind"] == "handler-error");
    // Its RSS while the records came out: far below the 48 MiB it was sent.
    MESSAGE("supervisor RSS " << peak_kb << " KiB, " << baseline_kb << " KiB without the flood");
    CHECK(peak_kb > 0);
    CHECK(baseline_kb > 0);
    CHECK(peak_kb < baseline_kb + 24 * 1024);
    const std::string db = store + "/pillbox.db";
    CHECK(sql_int(db, "SELECT max(length(stderr_tail)) FROM attempts") == 8192);
    CHECK(sql_int(db, "SELECT count(*) FROM attempts WHERE instr(stderr_tail, x'79797979') > 0") == 2);
  }
}
