#include "supervisor/flow/input_source.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "shared/control.h"  // write_all
#include "shared/sha256.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

using namespace std::string_literals;
namespace fs = std::filesystem;
using Type = TaskSource::Item::Type;

bool contains(const std::string& haystack, std::string_view needle) {
  return haystack.find(needle) != std::string::npos;
}

// Drains a source: polls wait_fd() whenever it says kWait (bounded, never sleeps).
std::vector<TaskSource::Item> drain(TaskSource& source) {
  std::vector<TaskSource::Item> items;
  for (int guard = 0; guard < 100'000; ++guard) {
    TaskSource::Item item = source.next();
    if (item.type == Type::kWait) {
      REQUIRE(source.wait_fd() >= 0);
      pollfd p{source.wait_fd(), POLLIN, 0};
      const int n = ::poll(&p, 1, 10'000);
      REQUIRE_MESSAGE(n == 1, "no wake-up from the source within 10 s");
      continue;
    }
    const bool end = item.type == Type::kEnd;
    items.push_back(std::move(item));
    if (end) return items;
  }
  FAIL("the source never ended");
  return items;
}

TEST_CASE("parse_task_line: key as string, number or missing") {
  auto t = parse_task_line(R"({"key": "doc-1", "payload": "hello"})", 3);
  REQUIRE_MESSAGE(t.has_value(), t.error());
  CHECK(t->key == "doc-1");
  CHECK(t->payload == "hello");

  // Without a key (or with null), the key comes from the payload, so it
  // stays the same when lines move: sha256:<16 hex> of its SHA-256.
  // sha256("x") = 2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881
  auto missing = parse_task_line(R"({"payload": "x"})", 17);
  REQUIRE(missing.has_value());
  CHECK(missing->key == "sha256:2d711642b726b044");
  CHECK(missing->payload_sha256 == "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881");
  auto moved = parse_task_line(R"({"payload": "x"})", 3);
  REQUIRE(moved.has_value());
  CHECK(moved->key == missing->key);
  auto null_key = parse_task_line(R"({"key": null, "payload": "x"})", 18);
  REQUIRE(null_key.has_value());
  CHECK(null_key->key == "sha256:2d711642b726b044");

  // Not converted: 1, 1.0 and 1e0 would be three keys for one number.
  for (const char* line : {R"({"key": 42, "payload": "x"})", R"({"key": -7, "payload": "x"})",
                           R"({"key": 1.5, "payload": "x"})", R"({"key": true, "payload": "x"})",
                           R"({"key": [1], "payload": "x"})", R"({"key": {}, "payload": "x"})"}) {
    CAPTURE(line);
    auto bad = parse_task_line(line, 5);
    REQUIRE_FALSE(bad.has_value());
    CHECK(bad.error().rfind(R"(stdin:5: "key" must be a string, not )", 0) == 0);
  }
}

TEST_CASE("parse_task_line: text payloads, with escapes and unicode") {
  auto t = parse_task_line(R"({"payload": "line1\nline2\u0000caf\u00e9 \ud83d\ude00"})", 1);
  REQUIRE_MESSAGE(t.has_value(), t.error());
  CHECK(t->payload == "line1\nline2\0caf\xc3\xa9 \xf0\x9f\x98\x80"s);
  auto empty = parse_task_line(R"({"payload": ""})", 1);
  REQUIRE(empty.has_value());
  CHECK(empty->payload.empty());
  // Unknown fields are ignored.
  auto extra = parse_task_line(R"({"payload": "p", "meta": {"a": 1}})", 1);
  REQUIRE(extra.has_value());
  CHECK(extra->payload == "p");
}

TEST_CASE("parse_task_line: payload_b64 gives binary payloads") {
  auto t = parse_task_line(R"({"key": "bin", "payload_b64": "AP8AgA=="})", 2);
  REQUIRE_MESSAGE(t.has_value(), t.error());
  CHECK(t->payload == "\x00\xff\x00\x80"s);
  auto empty = parse_task_line(R"({"payload_b64": ""})", 2);
  REQUIRE(empty.has_value());
  CHECK(empty->payload.empty());
}

TEST_CASE("parse_task_line: errors name the line number") {
  struct Case {
    const char* line;
    std::string expected;  // substring of the error
  };
  const Case cases[] = {
      {R"({"key": "a", "payload": "x", "payload_b64": "eA=="})", "exactly one of \"payload\""},
      {R"({"key": "a"})", "exactly one of \"payload\""},
      {R"({})", "exactly one of \"payload\""},
      {R"(["payload", "x"])", "expected a JSON object"},
      {R"("just a string")", "expected a JSON object"},
      {R"(42)", "expected a JSON object"},
      {R"(null)", "expected a JSON object"},
      {R"({"payload": "x")", "invalid JSON"},
      {R"({payload: "x"})", "invalid JSON"},
      {"", "invalid JSON"},
      {R"({"payload": "x"} trailing)", "invalid JSON"},
      {"{\"payload\": \"\xff\"}", "invalid JSON"},
      {R"({"payload": 12})", "\"payload\" must be a string"},
      {R"({"payload_b64": 12})", "\"payload_b64\" must be a base64 string"},
      {R"({"payload_b64": "not base64!"})", "\"payload_b64\" is not valid base64"},
      {R"({"payload_b64": "Zg="})", "\"payload_b64\" is not valid base64"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line);
    auto r = parse_task_line(c.line, 1234);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().rfind("stdin:1234: ", 0) == 0);
    CHECK(contains(r.error(), c.expected));
    CHECK(r.error().find('\n') == std::string::npos);
  }
  // A NUL byte used to end the parse early: the line after it was ignored.
  using namespace std::string_literals;
  for (const std::string& line : {R"({"key": "a", "payload": "x"})"s + '\0' + "garbage", "\0"s,
                                  R"({"payload": "x)"s + '\0' + R"("})"}) {
    auto r = parse_task_line(line, 7);
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().rfind("stdin:7: invalid JSON at byte ", 0) == 0);
    CHECK(contains(r.error(), "a NUL byte"));
  }
}

TEST_CASE("open_inputs: a directory tree in sorted order, then a file given directly") {
  test::ScratchDir dir{"tasks"};
  const std::string b = dir.write("tree/b.txt", "B");
  const std::string a_z = dir.write("tree/a/z.bin", "\0Z\xff"s);
  const std::string a_c = dir.write("tree/a/c.txt", "C");
  const std::string deep = dir.write("tree/sub/deeper/x", "X");
  const std::string empty = dir.write("tree/empty", "");
  fs::create_directories(dir.path + "/tree/only-dirs/inner");
  const std::string direct = dir.write("direct.txt", "D");

  auto src = open_inputs({dir.path + "/tree", direct});
  REQUIRE_MESSAGE(src.has_value(), src.error());
  CHECK((*src)->wait_fd() == -1);
  const auto items = drain(**src);
  REQUIRE(items.size() == 7);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {a_c, "C"}, {a_z, "\0Z\xff"s}, {b, "B"}, {empty, ""}, {deep, "X"}, {direct, "D"}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(i);
    REQUIRE(items[i].type == Type::kTask);
    CHECK(items[i].task.key == expected[i].first);
    CHECK(items[i].task.payload == expected[i].second);
  }
  CHECK(items[6].type == Type::kEnd);
  // The end stays the end.
  CHECK((*src)->next().type == Type::kEnd);
}

TEST_CASE("open_inputs: input errors") {
  test::ScratchDir dir{"tasks"};
  SUBCASE("'-' twice") {
    auto src = open_inputs({"-", "-"});
    REQUIRE_FALSE(src.has_value());
    CHECK(src.error() == "'-' (stdin) may be given only once");
  }
  SUBCASE("nonexistent path") {
    const std::string missing = dir.path + "/missing.json";
    auto src = open_inputs({missing});
    REQUIRE_FALSE(src.has_value());
    CHECK(src.error() == "cannot read input '" + missing + "': No such file or directory");
  }
  SUBCASE("nonexistent path after a good one") {
    const std::string good = dir.write("good", "g");
    const std::string missing = dir.path + "/nope";
    auto src = open_inputs({good, missing});
    REQUIRE_FALSE(src.has_value());
    CHECK(src.error() == "cannot read input '" + missing + "': No such file or directory");
  }
  SUBCASE("a directory without files") {
    fs::create_directories(dir.path + "/hollow/inner");
    const std::string hollow = dir.path + "/hollow";
    auto src = open_inputs({hollow});
    REQUIRE_FALSE(src.has_value());
    CHECK(src.error() == "no input files found in " + hollow);
  }
  SUBCASE("a file that disappears before it is read") {
    const std::string gone = dir.write("gone", "g");
    auto src = open_inputs({gone});
    REQUIRE(src.has_value());
    fs::remove(gone);
    const auto items = drain(**src);
    REQUIRE(items.size() == 2);
    CHECK(items[0].type == Type::kError);
    CHECK(items[0].error == "cannot read input '" + gone + "': No such file or directory");
    CHECK(items[1].type == Type::kEnd);
  }
}

TEST_CASE("open_inputs: a FIFO or a device named on the command line is refused before anything is read") {
  test::ScratchDir dir{"tasks"};
  const std::string good = dir.write("good", "g");
  const std::string fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const auto& [named, what] : std::vector<std::pair<std::string, std::string>>{
           {fifo, "a FIFO"}, {"/dev/zero", "a character device"}}) {
    const std::string& input = named;  // clang 14 cannot capture a structured binding
    CAPTURE(input);
    auto src = open_inputs({good, named});
    REQUIRE_FALSE(src.has_value());
    CHECK(src.error() == "input '" + named + "' is " + what +
                             ", not a regular file (inputs are regular files, directories, or - for JSON lines on stdin)");
  }
}

TEST_CASE("open_inputs: entries of a directory that are not regular files are input errors where they sort") {
  test::ScratchDir dir{"tasks"};
  const std::string a = dir.write("tree/a", "A");
  const std::string c = dir.write("tree/c", "C");
  const std::string secret = dir.write("secret", "SECRET-OUTSIDE");
  REQUIRE(::mkfifo((dir.path + "/tree/b-fifo").c_str(), 0600) == 0);
  REQUIRE(::symlink(secret.c_str(), (dir.path + "/tree/d-link").c_str()) == 0);
  const std::string tree = dir.path + "/tree";

  auto src = open_inputs({tree});
  REQUIRE_MESSAGE(src.has_value(), src.error());
  const auto items = drain(**src);
  REQUIRE(items.size() == 5);
  CHECK(items[0].task.key == a);
  CHECK(items[1].type == Type::kError);
  CHECK(items[1].error == "skipped input '" + tree + "/b-fifo': a FIFO, not a regular file");
  CHECK(items[2].task.payload == "C");
  CHECK(items[3].type == Type::kError);
  CHECK(items[3].error ==
        "skipped input '" + tree + "/d-link': a symlink, not followed (--follow-symlinks reads what it points to)");
  CHECK(items[4].type == Type::kEnd);

  auto followed = open_inputs({tree}, 0, SymlinksInTree::kFollow);
  REQUIRE(followed.has_value());
  const auto all = drain(**followed);
  REQUIRE(all.size() == 5);
  CHECK(all[1].type == Type::kError);  // still a FIFO
  CHECK(all[3].type == Type::kTask);
  CHECK(all[3].task.key == tree + "/d-link");
  CHECK(all[3].task.payload == "SECRET-OUTSIDE");
}

TEST_CASE("open_inputs: a file swapped for a FIFO after the listing is an input error, not a hang") {
  test::ScratchDir dir{"tasks"};
  const std::string file = dir.write("tree/file", "F");
  auto src = open_inputs({dir.path + "/tree"});
  REQUIRE(src.has_value());
  fs::remove(file);
  REQUIRE(::mkfifo(file.c_str(), 0600) == 0);
  const auto items = drain(**src);
  REQUIRE(items.size() == 2);
  CHECK(items[0].type == Type::kError);
  CHECK(items[0].error == "cannot read input '" + file + "': a FIFO, not a regular file");
}

TEST_CASE("open_inputs: JSON lines from a pipe") {
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  const int read_fd = fds[0];
  int write_fd = fds[1];

  const std::string lines =
      "{\"key\": \"a\", \"payload\": \"first\"}\n"   // line 1
      "\n"                                           // line 2: blank, skipped
      "{\"payload_b64\": \"AAEC\"}\r\n"              // line 3: CRLF is fine for JSON
      "this is not json\n"                           // line 4
      "   \t\n"                                      // line 5: blank, skipped
      "{\"key\": \"7\", \"payload\": \"last\"}";     // line 6: no final newline
  REQUIRE(write_all(write_fd, lines).is_ok());
  ::close(write_fd);

  {
    auto src = open_inputs({"-"}, read_fd);
    REQUIRE_MESSAGE(src.has_value(), src.error());
    const auto items = drain(**src);
    REQUIRE(items.size() == 5);
    REQUIRE(items[0].type == Type::kTask);
    CHECK(items[0].task.key == "a");
    CHECK(items[0].task.payload == "first");
    REQUIRE(items[1].type == Type::kTask);
    CHECK(items[1].task.key == "sha256:" + pillbox::sha256_hex("\x00\x01\x02"s).substr(0, 16));
    CHECK(items[1].task.payload == "\x00\x01\x02"s);
    REQUIRE(items[2].type == Type::kError);
    CHECK(items[2].error.rfind("stdin:4: invalid JSON", 0) == 0);
    REQUIRE(items[3].type == Type::kTask);
    CHECK(items[3].task.key == "7");
    CHECK(items[3].task.payload == "last");
    CHECK(items[4].type == Type::kEnd);
    CHECK((*src)->next().type == Type::kEnd);
  }
  ::close(read_fd);
}

TEST_CASE("open_inputs: stdin between files keeps the given order") {
  test::ScratchDir dir{"tasks"};
  const std::string before = dir.write("before", "1");
  const std::string after = dir.write("after", "3");
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  REQUIRE(write_all(fds[1], "{\"key\": \"mid\", \"payload\": \"2\"}\n").is_ok());
  ::close(fds[1]);
  {
    auto src = open_inputs({before, "-", after}, fds[0]);
    REQUIRE(src.has_value());
    const auto items = drain(**src);
    REQUIRE(items.size() == 4);
    CHECK(items[0].task.key == before);
    CHECK(items[1].task.key == "mid");
    CHECK(items[1].task.payload == "2");
    CHECK(items[2].task.key == after);
    CHECK(items[2].task.payload == "3");
    CHECK(items[3].type == Type::kEnd);
  }
  ::close(fds[0]);
}

TEST_CASE("open_inputs: many lines through the bounded queue") {
  // More lines than the reader's queue holds (256), so the reader thread must
  // block on a full queue and resume as the lines are taken.
  int fds[2];
  REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
  std::string lines;
  for (int i = 0; i < 1000; ++i) lines += "{\"key\": \"" + std::to_string(i) + "\", \"payload\": \"p\"}\n";
  REQUIRE(lines.size() < 65536);  // fits the pipe: written before anything reads
  REQUIRE(write_all(fds[1], lines).is_ok());
  ::close(fds[1]);
  {
    auto src = open_inputs({"-"}, fds[0]);
    REQUIRE(src.has_value());
    const auto items = drain(**src);
    REQUIRE(items.size() == 1001);
    for (int i = 0; i < 1000; ++i) {
      REQUIRE(items[static_cast<std::size_t>(i)].type == Type::kTask);
      REQUIRE(items[static_cast<std::size_t>(i)].task.key == std::to_string(i));
    }
    CHECK(items[1000].type == Type::kEnd);
  }
  ::close(fds[0]);
}

}  // namespace
}  // namespace pillbox
