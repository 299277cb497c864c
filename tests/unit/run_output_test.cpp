#include "supervisor/cli/run_output.h"

#include <signal.h>

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "shared/base64.h"
#include "supervisor/classify/classifier.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox {
namespace {

using namespace std::string_literals;
using nlohmann::json;

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

json parse(const std::string& text) {
  json j;
  REQUIRE_NOTHROW(j = json::parse(text));
  REQUIRE(j.is_object());
  return j;
}

Outcome ok_outcome(std::string output) {
  Outcome o;
  o.kind = Kind::kOk;
  o.exit_code = 0;
  o.output = std::move(output);
  o.wall_ms = 12;
  o.cpu_ms = 3;
  o.max_rss_kb = 1024;
  return o;
}

Outcome crash_outcome(std::string fingerprint, std::vector<std::string> state) {
  Outcome o;
  o.kind = Kind::kCrash;
  o.signal = SIGSEGV;
  o.fingerprint = std::move(fingerprint);
  o.crash_state = std::move(state);
  o.message = "killed by SIGSEGV";
  o.frames = {SymbolizedFrame{"/opt/app/libparse.so", 0x1139, "parse_header(char const*, unsigned long)"},
              SymbolizedFrame{"/opt/app/worker", 0x2040, ""}};
  o.wall_ms = 40;
  o.cpu_ms = 35;
  o.max_rss_kb = 4096;
  return o;
}

Outcome failed(Kind kind, std::string fingerprint, std::string message) {
  Outcome o;
  o.kind = kind;
  o.fingerprint = std::move(fingerprint);
  o.message = std::move(message);
  return o;
}

TEST_CASE("outcome_json: ok with UTF-8 output") {
  const Task task{"doc-1", "payload"};
  const json j = parse(outcome_json(task, ok_outcome("résumé\nline 2"), nullptr));
  CHECK(j["key"] == "doc-1");
  CHECK(j["status"] == "ok");
  CHECK(j["kind"] == "ok");
  CHECK(j["output"] == "résumé\nline 2");
  CHECK_FALSE(j.contains("output_b64"));
  CHECK_FALSE(j.contains("output_file"));
  CHECK(j["fingerprint"].is_null());
  CHECK(j["signal"].is_null());
  CHECK(j["syscall"].is_null());
  CHECK(j["exit_code"] == 0);
  CHECK(j["crash_state"] == json::array());
  CHECK(j["message"] == "");
  CHECK(j["cpu_ms"] == 3);
  CHECK(j["wall_ms"] == 12);
  CHECK(j["max_rss_kb"] == 1024);
  CHECK_FALSE(j.contains("frames"));
}

TEST_CASE("outcome_json: ok with binary output goes to output_b64") {
  const std::string bytes = "\x00\xff\xfe binary \x80"s;
  const json j = parse(outcome_json(Task{"bin", ""}, ok_outcome(bytes), nullptr));
  CHECK_FALSE(j.contains("output"));
  REQUIRE(j.contains("output_b64"));
  const auto decoded = base64_decode(j["output_b64"].get<std::string>());
  REQUIRE(decoded.has_value());
  CHECK(*decoded == bytes);

  // Text with a NUL byte is valid UTF-8 and stays text.
  const json nul = parse(outcome_json(Task{"nul", ""}, ok_outcome("a\0b"s), nullptr));
  CHECK(nul["output"].get<std::string>() == "a\0b"s);
}

TEST_CASE("outcome_json: ok with an output file names only the file") {
  const std::string file = "/tmp/out/doc-1.out";
  const json j = parse(outcome_json(Task{"doc-1", ""}, ok_outcome("big output"), &file));
  CHECK(j["output_file"] == file);
  CHECK_FALSE(j.contains("output"));
  CHECK_FALSE(j.contains("output_b64"));
}

TEST_CASE("outcome_json: a failed record") {
  const Outcome o = crash_outcome("pb1-0123456789abcdef", {"parse_header", "worker+0x2040"});
  const json j = parse(outcome_json(Task{"poison", ""}, o, nullptr));
  CHECK(j["status"] == "failed");
  CHECK(j["kind"] == "crash");
  CHECK(j["fingerprint"] == "pb1-0123456789abcdef");
  CHECK(j["crash_state"] == json::array({"parse_header", "worker+0x2040"}));
  CHECK(j["signal"] == "SIGSEGV");
  CHECK(j["exit_code"].is_null());
  CHECK(j["message"] == "killed by SIGSEGV");
  CHECK(j["frames"] == json::array({"parse_header (libparse.so+0x1139)", "?? (worker+0x2040)"}));
  // A failure never carries output, even when the outcome has some.
  Outcome with_output = o;
  with_output.output = "partial";
  const json k = parse(outcome_json(Task{"poison", ""}, with_output, nullptr));
  CHECK_FALSE(k.contains("output"));
  CHECK_FALSE(k.contains("output_b64"));

  Outcome sys = failed(Kind::kSeccompViolation, "pb1-1111111111111111", "denied syscall socket");
  sys.signal = SIGSYS;
  sys.syscall = "socket";
  const json s = parse(outcome_json(Task{"net", ""}, sys, nullptr));
  CHECK(s["kind"] == "seccomp-violation");
  CHECK(s["syscall"] == "socket");
  CHECK(s["signal"] == "SIGSYS");

  Outcome herr = failed(Kind::kHandlerError, "pb1-2222222222222222", "exit code 3: bad input");
  herr.exit_code = 3;
  const json h = parse(outcome_json(Task{"h", ""}, herr, nullptr));
  CHECK(h["exit_code"] == 3);
  CHECK(h["signal"].is_null());
}

TEST_CASE("outcome_json: hostile bytes in key and message still make valid JSON") {
  Outcome o = failed(Kind::kHandlerError, "pb1-3333333333333333", "bad byte \xff\xfe at \xc0\x80 offset 3");
  const std::string text = outcome_json(Task{"key-\x80\xff", ""}, o, nullptr);
  const json j = parse(text);
  const std::string key = j["key"].get<std::string>();
  const std::string message = j["message"].get<std::string>();
  CHECK(is_valid_utf8(key));
  CHECK(is_valid_utf8(message));
  CHECK(key.rfind("key-", 0) == 0);
  CHECK(key == "key-\xEF\xBF\xBD\xEF\xBF\xBD");  // each invalid byte becomes U+FFFD
  CHECK(contains(message, "bad byte "));
  CHECK(contains(message, " offset 3"));
  // Valid UTF-8 keys are kept as they are.
  const json k = parse(outcome_json(Task{"clé", ""}, o, nullptr));
  CHECK(k["key"] == "clé");
}

TEST_CASE("outcome_json: hostile bytes in crash frames still make valid JSON") {
  // Module paths come from the child's crash report, which only rejects
  // control characters: a frame without a symbol shows the module's basename.
  Outcome o = crash_outcome("pb1-4444444444444444", {"evil\xff\xfe.so+0x10"});
  o.frames = {SymbolizedFrame{"/tmp/evil\xff\xfe.so", 0x10, ""}};
  std::string text;
  REQUIRE_NOTHROW(text = outcome_json(Task{"k", ""}, o, nullptr));
  const json j = parse(text);
  REQUIRE(j["crash_state"].size() == 1);
  CHECK(is_valid_utf8(j["crash_state"][0].get<std::string>()));
  REQUIRE(j["frames"].size() == 1);
  CHECK(is_valid_utf8(j["frames"][0].get<std::string>()));
}

TEST_CASE("outcome_json: a hostile crash report, classified, still makes valid JSON") {
  // The path a hostile child writes into its crash report (the parser only
  // refuses control characters) ends up, unsymbolized, in the crash state.
  Execution ex;
  ex.handler_identity = "regex";
  ex.payload_delivered = true;
  ExitReport exit;
  exit.pid = 777;
  exit.wait_status = SIGSEGV;
  exit.crash = "pillbox-crash 1\npid 777\nsignal 11\nframe /nonexistent/evil\xff\xfe.so 0x10\nend\n";
  ex.exit = exit;
  Symbolizer symbolizer;
  const Outcome o = classify(ex, symbolizer);
  REQUIRE(o.kind == Kind::kCrash);
  REQUIRE(o.crash_state == std::vector<std::string>{"evil\xff\xfe.so+0x10"});
  std::string text;
  REQUIRE_NOTHROW(text = outcome_json(Task{"k", ""}, o, nullptr));
  const json j = parse(text);
  CHECK(j["kind"] == "crash");
  CHECK(is_valid_utf8(j["crash_state"][0].get<std::string>()));
}

TEST_CASE("outcome_line: one line per outcome") {
  const std::string ok_line = outcome_line(Task{"doc-1", ""}, ok_outcome("x"));
  CHECK(ok_line == "ok                doc-1  (12 ms)");
  const std::string crash_line =
      outcome_line(Task{"poison", ""}, crash_outcome("pb1-0123456789abcdef", {"parse_header", "main"}));
  CHECK(crash_line == "crash             poison  pb1-0123456789abcdef  parse_header < main  killed by SIGSEGV");
  CHECK(crash_line.find('\n') == std::string::npos);
}

TEST_CASE("outcome_line: escape sequences in a key are inert, UTF-8-encoded C1 controls (CSI) included") {
  // U+009B (0xC2 0x9B) is CSI to a terminal that decodes C1; é (0xC3 0xA9)
  // and U+00A0 (0xC2 0xA0) are text.
  const std::string line = outcome_line(Task{"a\x1b[2J\xc2\x9b" "31m\r\n\xc3\xa9\xc2\xa0z", ""}, ok_outcome("x"));
  CHECK(line == "ok                a?[2J?31m??\xc3\xa9\xc2\xa0z  (12 ms)");
}

TEST_CASE("RunSummary: counts per kind and groups by fingerprint") {
  RunSummary summary;
  summary.add(Task{"ok-1", ""}, ok_outcome("a"));
  summary.add(Task{"ok-2", ""}, ok_outcome("b"));
  summary.add(Task{"seg-1", ""}, crash_outcome("pb1-aaaaaaaaaaaaaaaa", {"parse_header", "main"}));
  summary.add(Task{"seg-2", ""}, crash_outcome("pb1-aaaaaaaaaaaaaaaa", {"parse_header", "main"}));
  summary.add(Task{"seg-3", ""}, crash_outcome("pb1-aaaaaaaaaaaaaaaa", {"parse_header", "main"}));
  summary.add(Task{"bad-1", ""}, failed(Kind::kHandlerError, "pb1-bbbbbbbbbbbbbbbb", "invalid header"));
  summary.add(Task{"bad-2", ""}, failed(Kind::kHandlerError, "pb1-bbbbbbbbbbbbbbbb", "invalid header 2"));
  summary.add(Task{"slow", ""}, failed(Kind::kWallTimeout, "pb1-cccccccccccccccc", "still running"));
  CHECK(summary.failed() == 6);

  RunReport report;
  report.input_errors = 1;
  report.warnings = {"no cgroup: using RLIMIT_AS"};
  const std::string text = summary.render(4.0, report);
  CAPTURE(text);
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  REQUIRE(lines.size() == 7);
  CHECK(lines[0] == "pillbox: 8 tasks in 4.0 s (2.0/s): 2 ok, 6 failed, 1 input error(s)");
  CHECK(lines[1] == "  by kind:  ok 2  crash 3  wall-timeout 1  handler-error 2");
  CHECK(lines[2] == "  by fingerprint:");
  // Largest group first; each group once, with its count and first example.
  CHECK(lines[3] == "    pb1-aaaaaaaaaaaaaaaa  crash  x3  parse_header < main  (e.g. seg-1)");
  CHECK(lines[4] == "    pb1-bbbbbbbbbbbbbbbb  handler-error  x2  invalid header  (e.g. bad-1)");
  CHECK(lines[5] == "    pb1-cccccccccccccccc  wall-timeout  x1  still running  (e.g. slow)");
  CHECK(lines[6] == "  warning: no cgroup: using RLIMIT_AS");
}

TEST_CASE("RunSummary: an all-ok run and an empty run") {
  RunSummary summary;
  summary.add(Task{"only", ""}, ok_outcome("done"));
  CHECK(summary.failed() == 0);
  const std::string text = summary.render(0.5, RunReport{});
  CHECK(text == "pillbox: 1 task in 0.5 s (2.0/s): 1 ok, 0 failed\n  by kind:  ok 1\n");

  RunSummary none;
  CHECK(none.render(0.0, RunReport{}) == "pillbox: 0 tasks in 0.0 s: 0 ok, 0 failed\n");
}

}  // namespace
TEST_CASE("RunSummary: ok tasks with empty output are counted; all of them empty is a hint (issue 26, point 3)") {
  RunSummary some;
  some.add(Task{"a", ""}, ok_outcome("text"));
  some.add(Task{"b", ""}, ok_outcome(""));
  some.add(Task{"c", ""}, crash_outcome("pb1-aaaaaaaaaaaaaaaa", {"parse_header", "main"}));
  const std::string text = some.render(1.0, RunReport{});
  CHECK(text.rfind("pillbox: 3 tasks in 1.0 s (3.0/s): 2 ok (1 of them with empty output), 1 failed\n", 0) == 0);
  CHECK(text.find("hint:") == std::string::npos);

  RunSummary all;
  for (int i = 0; i < 300; ++i) all.add(Task{"k" + std::to_string(i), ""}, ok_outcome(""));
  const std::string empty = all.render(1.0, RunReport{});
  CHECK(empty.rfind("pillbox: 300 tasks in 1.0 s (300.0/s): 300 ok (300 of them with empty output), 0 failed\n", 0) == 0);
  CHECK(empty.find("  hint: no ok task printed anything on stdout") != std::string::npos);
  // An outcome taken back no longer counts.
  all.remove(ok_outcome(""));
  CHECK(all.render(1.0, RunReport{}).find("299 ok (299 of them with empty output)") != std::string::npos);
}

TEST_CASE("cut_at_word: messages are cut after a whole word, never inside a UTF-8 character") {
  CHECK(cut_at_word("short", 60) == "short");
  CHECK(cut_at_word("ValueError: month out of range: 1991-13-01 in the born column of row 7", 40) ==
        "ValueError: month out of range...");
  CHECK(cut_at_word(std::string(100, 'x'), 10) == "xxxxxxx...");
  // "é" is two bytes: a cut that would fall between them moves before it.
  CHECK(cut_at_word("aaaaaa\xc3\xa9" "bbbbbbbbbb", 10) == "aaaaaa...");
}

}  // namespace pillbox
