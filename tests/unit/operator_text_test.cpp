// The small pieces behind the operator commands: terminal-safe text, --since
// parsing and the reproduce verdict (the progress line: progress_test.cpp).
#include <doctest/doctest.h>

#include "supervisor/ops/minimize.h"
#include "supervisor/ops/reproduce.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/io/time_args.h"

using namespace pillbox;

TEST_CASE("terminal text: control bytes never pass, text stays text, binary becomes a hex dump") {
  CHECK(table_cell("plain key", 0) == "plain key");
  CHECK(table_cell("a\x1b[2Jb\x07", 0) == "a?[2Jb?");
  CHECK(table_cell("x\xc2\x9b" "31m", 0) == "x?31m");      // C1 CSI in UTF-8
  CHECK(table_cell("caf\xc3\xa9", 0) == "caf\xc3\xa9");    // other UTF-8 is kept
  CHECK(table_cell("x\x9b" "31m\x7f", 0) == "x?31m?");      // a raw C1 CSI (no UTF-8), DEL
  CHECK(table_cell("\xff\xc3(\xe2\x82\xf0\x9f\x98\x80", 0) == "?" "?(" "?" "?\xf0\x9f\x98\x80");  // broken UTF-8; an emoji is text
  CHECK(table_cell("invoice\xe2\x80\xae" "fdp.exe", 0) == "invoice?fdp.exe");  // RLO would reorder the line
  CHECK(table_cell("\xe2\x81\xa6x\xe2\x81\xa9\xd8\x9c", 0) == "?x??");          // isolates, ALM
  CHECK(table_cell("\xe2\x80\x94", 0) == "\xe2\x80\x94");                        // an em dash is text
  CHECK(table_cell("0123456789", 5) == "0123~");
  CHECK(payload_preview("line one\nline two", 512, "  ") == "  | line one\n  | line two\n");
  const std::string dump = payload_preview(std::string("S\x1b[2J\0", 6), 512, "");
  CHECK(dump == "00000000  53 1b 5b 32 4a 00" + std::string(31, ' ') + "  |S.[2J.|\n");
  const std::string cut = payload_preview(std::string(1000, 'a'), 10, "");
  CHECK(cut.find("| aaaaaaaaaa\n") == 0);
  CHECK(cut.find("(990 more bytes") != std::string::npos);
  for (unsigned char c : payload_preview(std::string("\x00\x01\x1b\x7f\x9b\xff", 6), 512, "")) {
    CHECK((c >= 0x20 || c == '\n'));
  }
}

TEST_CASE("terminal text: a program's stderr as lines, tabs expanded, control bytes and long lines made safe") {
  CHECK(text_lines("Traceback:\n\tat A.b(A.java:1)\r\nlast", "  ", 80) ==
        "  | Traceback:\n  |     at A.b(A.java:1)\n  | last\n");
  CHECK(text_lines("", "  ", 80).empty());
  CHECK(text_lines("a\x1b]0;title\x07\x1b[2J\xc2\x9b" "31m\n", "", 80) == "| a?]0;title??[2J?31m\n");
  const std::string tabs = text_lines(std::string(100000, '\t'), "", 40);
  CHECK(tabs == "| " + std::string(39, ' ') + "~\n");
  for (unsigned char c : text_lines(std::string("\x00\x01\x1b\x7f\x08\x0b\x0c", 7), "", 80)) {
    CHECK((c >= 0x20 || c == '\n'));
  }
}

TEST_CASE("--since: an age before now, or a UTC date; anything else is refused") {
  const std::int64_t now = 1'800'000'000'000;
  CHECK(*parse_since("1h", "--since", now) == now - 3'600'000);
  CHECK(*parse_since("7d", "--since", now) == now - 7 * 86'400'000LL);
  CHECK(*parse_since("2026-11-30", "--since", now) == 1'795'996'800'000);
  CHECK(*parse_since("2026-11-30T12:00:00Z", "--since", now) == 1'795'996'800'000 + 12 * 3'600'000LL);
  for (const char* bad : {"", "yesterday", "2026-13-01", "2026-11-30 junk", "-1h"}) {
    auto r = parse_since(bad, "--since", now);
    CHECK_FALSE(r.has_value());
    if (!r) CHECK(r.error().find("--since expects an age") == 0);
  }
}

TEST_CASE("reproduce verdict: reliable from half the runs up, flaky below when some run failed, else not reproduced") {
  // runs, matches, and the other runs: {kind, count}
  const auto verdict = [](std::size_t runs, std::size_t matches, std::vector<std::pair<std::string, std::size_t>> others) {
    ReproduceResult r;
    r.runs = runs;
    r.matches = matches;
    for (const auto& [kind, count] : others) {
      OtherOutcome& o = r.others[kind];
      o.kind = kind;
      o.count = count;
    }
    return reproduce_verdict(r);
  };
  CHECK(verdict(10, 10, {}) == "reliable");
  CHECK(verdict(10, 5, {{"ok", 5}}) == "reliable");
  CHECK(verdict(9, 5, {{"ok", 4}}) == "reliable");
  CHECK(verdict(9, 4, {{"ok", 5}}) == "flaky");
  CHECK(verdict(9, 3, {{"ok", 6}}) == "flaky");
  CHECK(verdict(1, 1, {}) == "reliable");
  // No run ended with the fingerprint: flaky when another failure came, not
  // reproduced when every run was ok (issue 26, point 6: it said flaky).
  CHECK(verdict(5, 0, {{"ok", 4}, {"crash", 1}}) == "flaky");
  CHECK(verdict(5, 0, {{"ok", 5}}) == "not-reproduced");
  CHECK(verdict(1, 0, {{"ok", 1}}) == "not-reproduced");
}

TEST_CASE("minimize: the same failure is the same fingerprint, or for resource limits the same kind") {
  store::QuarantineEntry crash;
  crash.kind = "crash";
  crash.fingerprint = "pb1-aaaa";
  Outcome o;
  o.kind = Kind::kCrash;
  o.fingerprint = "pb1-aaaa";
  CHECK(same_failure(crash, o));
  o.fingerprint = "pb1-bbbb";
  CHECK_FALSE(same_failure(crash, o));
  o.kind = Kind::kOk;
  o.fingerprint = "";
  CHECK_FALSE(same_failure(crash, o));
  store::QuarantineEntry slow;
  slow.kind = "cpu-limit";
  slow.fingerprint = "pb1-cccc";
  o.kind = Kind::kCpuLimit;
  o.fingerprint = "pb1-dddd";  // the limit struck elsewhere: still the same failure
  CHECK(same_failure(slow, o));
  o.kind = Kind::kWallTimeout;
  CHECK_FALSE(same_failure(slow, o));
}
