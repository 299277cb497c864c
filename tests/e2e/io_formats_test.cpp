// Inputs and outputs: JSON lines on stdin (text and base64 payloads, a
// malformed line), results as `output` / `output_b64` / files under --out,
// the example plugin, and the pdf-text handler.
#include <dirent.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <set>

#include "shared/base64.h"
#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

std::string all_bytes() {
  std::string s;
  for (int i = 0; i < 256; ++i) s += static_cast<char>(i);
  return s + std::string("\xff\xfe\x00\xc3", 4);  // and an invalid UTF-8 tail
}

std::string jsonl(const std::string& key, const std::string& field, const std::string& value) {
  return nlohmann::json{{"key", key}, {field, value}}.dump() + "\n";
}

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

}  // namespace

TEST_CASE("JSON lines on stdin: text comes back as output, binary as output_b64 with the exact bytes") {
  const std::string text = "plain text, UTF-8: h\xc3\xa9llo \xe2\x9c\x93\n\ttabs and \"quotes\"";
  const std::string binary = all_bytes();
  const std::string input = jsonl("text-1", "payload", text) + jsonl("bin-1", "payload_b64", pillbox::base64_encode(binary)) +
                            jsonl("empty", "payload", "");
  const auto r = run_pillbox({"run", "--json", "--handler", "echo", "-"}, input);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 3);

  const auto& t = r.record("text-1");
  CHECK(t["kind"] == "ok");
  CHECK(!t.contains("output_b64"));
  REQUIRE(t.contains("output"));
  CHECK(t["output"].get<std::string>() == text);

  const auto& b = r.record("bin-1");
  CHECK(b["kind"] == "ok");
  CHECK(!b.contains("output"));
  REQUIRE(b.contains("output_b64"));
  const auto decoded = pillbox::base64_decode(b["output_b64"].get<std::string>());
  REQUIRE(decoded.has_value());
  CHECK(*decoded == binary);

  const auto& e = r.record("empty");
  CHECK(e["kind"] == "ok");
  CHECK(e["output"] == "");
}

TEST_CASE("a malformed JSON line is reported as stdin:<line>; the other lines still run; exit code 2") {
  const std::string input = jsonl("first", "payload", "one") + "{\"key\": \"broken\", \"payload\": \n" +
                            jsonl("third", "payload", "three") + "[1, 2, 3]\n" + jsonl("fifth", "payload_b64", "AP/+");
  const auto r = run_pillbox({"run", "--json", "--handler", "echo", "-"}, input);
  INFO(r.describe());
  CHECK(r.term_signal == 0);
  CHECK(r.exit_code == 2);
  REQUIRE(r.records.size() == 3);
  CHECK(r.record("first")["output"] == "one");
  CHECK(r.record("third")["output"] == "three");
  CHECK(*pillbox::base64_decode(r.record("fifth")["output_b64"].get<std::string>()) == std::string("\x00\xff\xfe", 3));
  int line2 = 0, line4 = 0;
  for (const auto& line : r.err_lines()) {
    line2 += line.find("stdin:2:") != std::string::npos;
    line4 += line.find("stdin:4:") != std::string::npos;
  }
  CHECK(line2 == 1);
  CHECK(line4 == 1);
  CHECK(r.err.find("stdin:1:") == std::string::npos);
  CHECK(r.err.find("stdin:3:") == std::string::npos);
}

TEST_CASE("--out DIR: one file per successful task with the exact bytes, named in output_file") {
  e2e::TempDir dir;
  const std::string out = dir.file("results");
  const std::string binary = all_bytes();
  const std::string input = jsonl("alpha", "payload", "first result\n") + jsonl("beta/../gamma", "payload", "second") +
                            jsonl("bin", "payload_b64", pillbox::base64_encode(binary)) +
                            jsonl("too-big", "payload", std::string(5000, 'z'));
  const auto r = run_pillbox({"run", "--json", "--handler", "echo", "--max-output", "4096", "--out", out, "-"}, input);
  INFO(r.describe());
  CHECK(r.exit_code == 1);  // too-big is output-limit
  REQUIRE(r.records.size() == 4);
  CHECK(r.record("too-big")["kind"] == "output-limit");
  CHECK(!r.record("too-big").contains("output_file"));

  std::set<std::string> files;
  for (const auto& item : {std::pair<std::string, std::string>{"alpha", "first result\n"},
                                   {"beta/../gamma", "second"},
                                   {"bin", binary}}) {
    const auto& key = item.first;  // clang 14 cannot capture a structured binding
    const auto& bytes = item.second;
    CAPTURE(key);
    const auto& rec = r.record(key);
    CHECK(rec["kind"] == "ok");
    CHECK(!rec.contains("output"));
    CHECK(!rec.contains("output_b64"));
    REQUIRE(rec.contains("output_file"));
    const std::string path = rec["output_file"];
    CHECK(path.rfind(out + "/", 0) == 0);  // inside DIR, whatever the key says
    CHECK(path.find("/../") == std::string::npos);
    CHECK(e2e::read_file(path) == bytes);
    files.insert(path.substr(path.rfind('/') + 1));
  }
  CHECK(files.size() == 3);
  CHECK(files_in(out) == files);  // nothing for the failed task, nothing else
}

TEST_CASE("the example wordcount plugin counts lines, words and bytes") {
  const std::string plugin = e2e::built_for_tasks("libpillbox-plugin-wordcount.so");
  REQUIRE_MESSAGE(::access(plugin.c_str(), R_OK) == 0, plugin << " was not built");
  const std::string input = jsonl("two-lines", "payload", "hello world\nsecond line here\n") +
                            jsonl("no-newline", "payload", "  one\ttwo  three") + jsonl("empty", "payload", "") +
                            jsonl("ten", "payload", "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n");
  const auto r = run_pillbox({"run", "--json", "--handler", "plugin:" + plugin, "-"}, input);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  REQUIRE(r.records.size() == 4);
  CHECK(r.record("two-lines")["output"] == "2 5 29\n");
  CHECK(r.record("no-newline")["output"] == "0 3 16\n");
  CHECK(r.record("empty")["output"] == "0 0 0\n");
  CHECK(r.record("ten")["output"] == "10 10 20\n");

  const auto words = run_pillbox({"run", "--json", "--handler", "plugin:" + plugin, "--arg", "unit=words", "-"},
                                 jsonl("w", "payload", "one two three four"));
  INFO(words.describe());
  REQUIRE(words.records.size() == 1);
  CHECK(words.records[0]["output"] == "4\n");
}

TEST_CASE("pdf-text extracts the text of a real PDF and rejects garbage as handler-error") {
  const std::string pdf = "/usr/share/doc/shared-mime-info/shared-mime-info-spec.pdf";
  if (::access(pdf.c_str(), R_OK) != 0) {
    MESSAGE("skipped: " << pdf << " is not on this host (apt package shared-mime-info)");
    return;
  }
  e2e::TempDir dir;
  const std::string garbage = dir.write("garbage.pdf", "%PDF-1.4\nthis is not really a PDF \x01\x02\x03 at all\n");
  const auto r = run_pillbox({"run", "--json", "--handler", "pdf-text", pdf, garbage});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  REQUIRE(r.records.size() == 2);
  const auto& ok = r.record(pdf);
  CHECK(ok["kind"] == "ok");
  REQUIRE(ok.contains("output"));
  CHECK(ok["output"].get<std::string>().find("Shared MIME-info") != std::string::npos);
  const auto& bad = r.record(garbage);
  CHECK(bad["kind"] == "handler-error");
  CHECK(!bad["message"].get<std::string>().empty());
}
