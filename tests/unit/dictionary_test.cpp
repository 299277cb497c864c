#include "supervisor/fuzz/dictionary.h"

#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "tests/unit/scratch_dir.h"

namespace pillbox::fuzz {
namespace {

using namespace std::string_literals;
using Tokens = std::vector<std::string>;

Tokens parsed(std::string_view text) {
  auto result = parse_dictionary(text, "t.dict");
  if (!result) FAIL("unexpected error: " << result.error());
  return *result;
}

std::string error_of(std::string_view text) {
  const auto result = parse_dictionary(text, "t.dict");
  if (result) FAIL("expected an error, got " << result->size() << " tokens");
  return result.error();
}

TEST_CASE("dictionary: the libFuzzer example") {
  // As in libFuzzer's documentation (-dict=).
  const auto tokens = parsed(
      "# Lines starting with '#' and empty lines are ignored.\n"
      "\n"
      "# Adds \"blah\" (w/o quotes) to the dictionary.\n"
      "kw1=\"blah\"\n"
      "# Use \\\\ for backslash and \\\" for quotes.\n"
      "kw2=\"\\\"ac\\\\dc\\\"\"\n"
      "# Use \\xAB for hex values\n"
      "kw3=\"\\xF7\\xF8\"\n"
      "# the name of the keyword followed by '=' may be omitted:\n"
      "\"foo\\x0Abar\"\n");
  CHECK(tokens == Tokens{"blah", "\"ac\\dc\"", "\xF7\xF8", "foo\nbar"});
}

TEST_CASE("dictionary: the AFL forms, levels ignored, blanks around '='") {
  const auto tokens = parsed(
      "header_png=\"\\x89PNG\\x0d\\x0a\"\n"
      "keyword_if@1=\"if\"\n"
      "keyword_while@12=\"while\"\n"
      "  spaced = \"x y\"  \n"
      "\t\"tabbed\"\t\n"
      "with-dash.and.dot=\"ok\"\n");
  CHECK(tokens == Tokens{"\x89PNG\r\n", "if", "while", "x y", "tabbed", "ok"});
}

TEST_CASE("dictionary: escapes") {
  CHECK(parsed(R"("\x00")") == Tokens{"\0"s});
  CHECK(parsed(R"("\xFF\xff\xAb")") == Tokens{"\xff\xff\xab"s});
  CHECK(parsed(R"("a\\b")") == Tokens{"a\\b"});
  CHECK(parsed(R"("\"")") == Tokens{"\""});
  CHECK(parsed(R"("\\")") == Tokens{"\\"});
  CHECK(parsed(R"("\\x41")") == Tokens{"\\x41"});  // an escaped backslash, then text
  CHECK(parsed(R"("#not a comment")") == Tokens{"#not a comment"});
  CHECK(parsed("\"caf\xc3\xa9\"") == Tokens{"caf\xc3\xa9"});  // UTF-8 text as is
}

TEST_CASE("dictionary: comments, blank lines, CRLF, no final newline, duplicates") {
  const auto tokens = parsed(
      "\xEF\xBB\xBF# written on Windows\r\n"
      "\r\n"
      "   # indented comment\r\n"
      "a=\"one\"\r\n"
      "   \t \r\n"
      "\"two\"\r\n"
      "b=\"one\"\r\n"
      "\"three\"");
  CHECK(tokens == Tokens{"one", "two", "three"});
}

TEST_CASE("dictionary: errors name the origin and the line") {
  const std::string good = "# header\n\"ok\"\n\n";  // lines 1-3; the bad line is line 4
  const struct {
    std::string line;
    std::string what;
  } cases[] = {
      {"just text", "expected name=\"value\""},
      {"name", "expected name=\"value\""},
      {"name:\"v\"", "expected name=\"value\""},
      {"=\"v\"", "expected name=\"value\""},
      {"name=value", "expected name=\"value\""},
      {"name@=\"v\"", "a level after '@' must be a number"},
      {"name@x=\"v\"", "a level after '@' must be a number"},
      {"\"unterminated", "missing closing '\"'"},
      {"\"ends in a backslash\\", "missing closing '\"'"},
      {"\"escaped quote at the end\\\"", "missing closing '\"'"},
      {"\"bad \\n escape\"", "invalid escape \\n"},
      {"\"bad \\' escape\"", "invalid escape \\'"},
      {"\"\\\x01\"", "invalid escape (a backslash before the byte \\x01)"},
      {"\"\\x4\"", "\\x must be followed by two hex digits"},
      {"\"\\xg0\"", "\\x must be followed by two hex digits"},
      {"\"\\x\"", "\\x must be followed by two hex digits"},
      {"\"a\"b\"", "unexpected text after the closing '\"'"},
      {"\"a\" # trailing comment", "unexpected text after the closing '\"'"},
      {"\"tab\there\"", "raw control byte in the value (write it as \\x09)"},
      {"\"nul\0here\""s, "raw control byte in the value (write it as \\x00)"},
      {"\"\"", "empty value"},
      {"name=\"\"", "empty value"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.line);
    const std::string error = error_of(good + c.line + "\n\"after\"\n");
    CHECK(error.starts_with("t.dict:4: "));
    CHECK(error.find(c.what) != std::string::npos);
    CHECK(error.find('\n') == std::string::npos);
  }
}

TEST_CASE("dictionary: an empty dictionary is an error") {
  CHECK(error_of("") == "t.dict: no entries");
  CHECK(error_of("# only a comment\n\n   \n") == "t.dict: no entries");
}

TEST_CASE("dictionary: load_dictionary reads a file and names it in errors") {
  test::ScratchDir scratch{"dict-test"};
  const std::string& dir = scratch.path;
  const std::string path = scratch.write("png.dict", "# PNG\r\nmagic=\"\\x89PNG\"\r\nchunk=\"IHDR\"\r\n");
  const auto tokens = load_dictionary(path);
  REQUIRE(tokens.has_value());
  CHECK(*tokens == Tokens{"\x89PNG", "IHDR"});

  scratch.write("png.dict", "\"ok\"\nbroken\n");
  const auto broken = load_dictionary(path);
  REQUIRE(!broken.has_value());
  CHECK(broken.error().starts_with(path + ":2: "));

  const auto missing = load_dictionary(dir + "/missing.dict");
  REQUIRE(!missing.has_value());
  CHECK(missing.error() == "cannot read dictionary " + dir + "/missing.dict: No such file or directory");

  const auto directory = load_dictionary(dir);
  REQUIRE(!directory.has_value());
  CHECK(directory.error() == "cannot read dictionary " + dir + ": a directory, not a regular file");

  const std::string fifo = dir + "/fifo.dict";  // no writer: a blocking open would hang here
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const auto from_fifo = load_dictionary(fifo);
  REQUIRE(!from_fifo.has_value());
  CHECK(from_fifo.error() == "cannot read dictionary " + fifo + ": a FIFO, not a regular file");
}

}  // namespace
}  // namespace pillbox::fuzz
