// pillbox submit against a real redis-server (started by the test on a free
// loopback port): every task of files, directories and JSON lines becomes
// one stream entry with its exact bytes; bad URLs, a server that is not
// there and unreadable inputs are said clearly, with the documented exit codes.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>

#include "supervisor/broker/redis_connection.h"
#include "tests/e2e/redis_server.h"
#include "tests/e2e/support.h"

namespace {

using e2e::run_pillbox;

// The stream's entries' fields, oldest first.
std::vector<std::map<std::string, std::string>> entries_of(const e2e::RedisServer& server, const std::string& stream) {
  std::vector<std::map<std::string, std::string>> out;
  for (auto& e : e2e::stream_entries(server, stream)) out.push_back(std::move(e.fields));
  return out;
}

TEST_CASE("submit: files, a directory and JSON lines become one entry each, with their exact bytes") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  e2e::TempDir in;
  const std::string binary("\x00\xff\x01 not utf-8 \x80", 15);
  const std::string one = in.write("one.bin", binary);
  ::mkdir((in.path() + "/dir").c_str(), 0755);
  in.write("dir/a", "first in the directory");
  in.write("dir/b", "second");
  const std::string lines = e2e::task_line("from-stdin", "line payload") + e2e::task_line("zero", std::string(1, '\0'));
  const auto r = run_pillbox({"submit", "--redis", server.url(), "--stream", "jobs", one, in.path() + "/dir", "-"},
                             lines);
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(r.err.find("5 tasks added to jobs on redis://127.0.0.1:" + std::to_string(server.port()) + "/0") !=
        std::string::npos);
  const auto entries = entries_of(server, "jobs");
  REQUIRE(entries.size() == 5);
  CHECK(entries[0].at("key") == one);
  CHECK(entries[0].at("payload") == binary);
  CHECK(entries[1].at("key") == in.path() + "/dir/a");
  CHECK(entries[1].at("payload") == "first in the directory");
  CHECK(entries[2].at("payload") == "second");
  CHECK(entries[3].at("key") == "from-stdin");
  CHECK(entries[3].at("payload") == "line payload");
  CHECK(entries[4].at("payload") == std::string(1, '\0'));
  for (const auto& e : entries) CHECK(e.size() == 2);  // key and payload, nothing else
}

TEST_CASE("submit: an input that is not a task is reported and counted; the others still go in (exit 1)") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  e2e::TempDir in;
  in.write("good", "good");
  REQUIRE(::symlink("/etc/hostname", (in.path() + "/link").c_str()) == 0);  // refused without --follow-symlinks
  const auto r = run_pillbox({"submit", "--redis", server.url(), "--stream", "s", in.path()}, "");
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK(r.err.find("1 inputs could not be read") != std::string::npos);
  CHECK(r.err.find("link") != std::string::npos);
  const auto entries = entries_of(server, "s");
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].at("payload") == "good");
}

TEST_CASE("submit: bad URLs are usage errors; a server that is not there is a setup error that says where") {
  e2e::TempDir in;
  const std::string input = in.write("x", "x");
  for (const char* url : {"http://127.0.0.1:6379", "redis://", "redis://host:99999", "redis://host:6379/x"}) {
    CAPTURE(std::string(url));
    const auto r = run_pillbox({"submit", "--redis", url, "--stream", "s", input});
    CHECK(r.exit_code == 2);
    CHECK(r.err.find("--redis '" + std::string(url) + "'") != std::string::npos);
  }
  CHECK(run_pillbox({"submit", "--stream", "s", input}).exit_code == 2);
  CHECK(run_pillbox({"submit", "--redis", "redis://127.0.0.1", input}).exit_code == 2);
  const int port = e2e::free_loopback_port();  // nothing listens there
  const auto r = run_pillbox({"submit", "--redis", "redis://127.0.0.1:" + std::to_string(port), "--stream", "s", input});
  INFO(r.describe());
  CHECK(r.exit_code == 3);
  CHECK(r.err.find("cannot reach Redis at redis://127.0.0.1:" + std::to_string(port) + "/0") != std::string::npos);
}

}  // namespace

namespace {

TEST_CASE("submit: a payload over --max-payload is an input error naming it; the others still go in") {
  e2e::RedisServer server;
  REQUIRE_REDIS(server);
  e2e::TempDir in;
  in.write("small", "fits");
  in.write("large", std::string(2048, 'x'));
  const auto r = run_pillbox({"submit", "--redis", server.url(), "--stream", "jobs", "--max-payload", "1K", in.path()});
  INFO(r.describe());
  CHECK(r.exit_code == 1);
  CHECK(r.err.find(in.path() + "/large: payload of 2048 bytes is over --max-payload (1024 bytes): not added") !=
        std::string::npos);
  const auto entries = e2e::stream_entries(server, "jobs");
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].fields.at("payload") == "fits");
  const auto bad = run_pillbox({"submit", "--redis", server.url(), "--stream", "jobs", "--max-payload", "lots", in.path()});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("--max-payload") != std::string::npos);
}

}  // namespace
