// Input files (supervisor/io/input_files.h): what a named path and the tree
// below it hold, and reading a listed file when the tree has changed since
// it was listed (a file swapped for a FIFO or a symlink, a directory above it
// swapped for a symlink): an error naming it, never a hang or a read
// outside the tree.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "supervisor/io/input_files.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

namespace fs = std::filesystem;

struct Tree {
  test::ScratchDir scratch{"inputs"};
  std::string root = scratch.path + "/in";
  Tree() { fs::create_directories(root); }
  std::string write(const std::string& relative, const std::string& bytes) const {
    const fs::path file = fs::path(scratch.path) / relative;
    fs::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << bytes;
    return file.string();
  }
};

// "path: skipped why" or "path" for each entry, in order.
std::vector<std::string> describe(const std::vector<InputEntry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) out.push_back(e.skipped.empty() ? e.path : e.path + ": " + e.skipped);
  return out;
}

const std::string kNotFollowed = "a symlink, not followed (--follow-symlinks reads what it points to)";

}  // namespace

TEST_CASE("list_input: a named regular file, or a symlink to one, is one entry read as named") {
  Tree t;
  const std::string file = t.write("in/a.txt", "A");
  const std::string link = t.scratch.path + "/link";
  REQUIRE(::symlink(file.c_str(), link.c_str()) == 0);
  for (const std::string& named : {file, link}) {
    CAPTURE(named);
    auto listed = list_input(named, SymlinksInTree::kRefuse);
    REQUIRE_MESSAGE(listed.has_value(), listed.error());
    REQUIRE(listed->size() == 1);
    CHECK(listed->front().path == named);
    CHECK(listed->front().skipped.empty());
    CHECK(*read_input(listed->front(), 100) == "A");
  }
}

TEST_CASE("list_input: a named FIFO or device is one skipped entry, found without opening it") {
  Tree t;
  const std::string fifo = t.scratch.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  for (const auto& item : std::vector<std::pair<std::string, std::string>>{
           {fifo, "a FIFO, not a regular file"}, {"/dev/zero", "a character device, not a regular file"}}) {
    const auto& named = item.first;  // clang 14 cannot capture a structured binding
    const auto& what = item.second;
    CAPTURE(named);
    auto listed = list_input(named, SymlinksInTree::kRefuse);
    REQUIRE(listed.has_value());
    REQUIRE(listed->size() == 1);
    CHECK(listed->front().path == named);
    CHECK(listed->front().skipped == what);
    CHECK(read_input(listed->front(), 100).error() == "cannot read input '" + named + "': " + what);
  }
  auto missing = list_input(t.scratch.path + "/missing", SymlinksInTree::kRefuse);
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error() == "cannot read input '" + t.scratch.path + "/missing': No such file or directory");
}

TEST_CASE("list_input: a tree in path order; symlinks, FIFOs and sockets listed as skipped, not read") {
  Tree t;
  t.write("in/b.txt", "B");
  t.write("in/a/z.bin", "Z");
  t.write("in/a-b", "AB");  // '-' sorts before '/'
  const std::string secret = t.write("secret", "SECRET-OUTSIDE");
  REQUIRE(::symlink(secret.c_str(), (t.root + "/s").c_str()) == 0);
  REQUIRE(::symlink("a", (t.root + "/dirlink").c_str()) == 0);
  REQUIRE(::mkfifo((t.root + "/a/fifo").c_str(), 0600) == 0);
  auto listed = list_input(t.root, SymlinksInTree::kRefuse);
  REQUIRE_MESSAGE(listed.has_value(), listed.error());
  const std::string& r = t.root;
  CHECK(describe(*listed) == std::vector<std::string>{r + "/a-b", r + "/a/fifo: a FIFO, not a regular file",
                                                      r + "/a/z.bin", r + "/b.txt", r + "/dirlink: " + kNotFollowed,
                                                      r + "/s: " + kNotFollowed});
}

TEST_CASE("list_input --follow-symlinks: links to files are entries, a loop and a second way to a directory end") {
  Tree t;
  t.write("in/a/z.bin", "Z");
  const std::string secret = t.write("secret", "S");
  REQUIRE(::symlink(secret.c_str(), (t.root + "/s").c_str()) == 0);
  REQUIRE(::symlink("a", (t.root + "/b-link-to-a").c_str()) == 0);
  REQUIRE(::symlink("..", (t.root + "/a/up").c_str()) == 0);
  REQUIRE(::symlink("nowhere", (t.root + "/dangling").c_str()) == 0);
  REQUIRE(::symlink("self", (t.root + "/self").c_str()) == 0);
  auto listed = list_input(t.root, SymlinksInTree::kFollow);
  REQUIRE_MESSAGE(listed.has_value(), listed.error());
  const std::string& r = t.root;
  CHECK(describe(*listed) == std::vector<std::string>{
                                 r + "/a/up: a directory already read as '" + r + "'",
                                 r + "/a/z.bin",
                                 r + "/b-link-to-a: a directory already read as '" + r + "/a'",
                                 r + "/dangling: a symlink to nothing",
                                 r + "/s",
                                 r + "/self: a symlink in a loop of symlinks"});
  for (const auto& e : *listed) {
    if (e.path == r + "/s") CHECK(*read_input(e, 100) == "S");
  }
}

TEST_CASE("read_input: what changed since the listing is refused, never followed, never waited on") {
  Tree t;
  t.write("in/sub/file", "F");
  const std::string outside = t.write("outside/file", "SECRET-OUTSIDE");
  auto listed = list_input(t.root, SymlinksInTree::kRefuse);
  REQUIRE(listed.has_value());
  REQUIRE(listed->size() == 1);
  const InputEntry& entry = listed->front();
  CHECK(*read_input(entry, 100) == "F");
  const std::string cannot = "cannot read input '" + entry.path + "': ";

  SUBCASE("the file became a FIFO") {
    fs::remove(entry.path);
    REQUIRE(::mkfifo(entry.path.c_str(), 0600) == 0);  // no writer: a blocking open would hang here
    CHECK(read_input(entry, 100).error() == cannot + "a FIFO, not a regular file");
  }
  SUBCASE("the file became a symlink out of the tree") {
    fs::remove(entry.path);
    REQUIRE(::symlink(outside.c_str(), entry.path.c_str()) == 0);
    CHECK(read_input(entry, 100).error() == cannot + kNotFollowed);
  }
  SUBCASE("the directory above it became a symlink out of the tree") {
    fs::rename(t.root + "/sub", t.root + "/moved");
    REQUIRE(::symlink((t.scratch.path + "/outside").c_str(), (t.root + "/sub").c_str()) == 0);
    CHECK(read_input(entry, 100).error() == cannot + "a directory above it is now a symlink, not followed");
  }
  SUBCASE("the file grew past the cap") {
    t.write("in/sub/file", std::string(101, 'x'));
    CHECK(read_input(entry, 100).error() == cannot + "larger than the 100 bytes limit");
  }
}

}  // namespace pillbox
