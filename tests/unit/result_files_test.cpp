// Result files of --out (supervisor/io/result_files.h): the key -> name mapping
// is one to one and stays a plain file name; files are created in the
// directory opened once, never through what is planted there.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "shared/sha256.h"
#include "supervisor/io/result_files.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

using namespace std::string_literals;

std::string read_plain(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("result_file_name: ordinary keys read as they are; other bytes are %XX") {
  CHECK(result_file_name("doc-1") == "doc-1.out");
  CHECK(result_file_name("Report_2026.v2") == "Report_2026.v2.out");
  CHECK(result_file_name("a/b") == "a%2Fb.out");
  CHECK(result_file_name("a_b") == "a_b.out");
  CHECK(result_file_name("100%") == "100%25.out");
  CHECK(result_file_name("a%2Fb") == "a%252Fb.out");
  CHECK(result_file_name("x y~z") == "x%20y%7Ez.out");
  CHECK(result_file_name("caf\xc3\xa9") == "caf%C3%A9.out");
  CHECK(result_file_name("nul\0byte"s) == "nul%00byte.out");
  CHECK(result_file_name("\x1b[2J") == "%1B%5B2J.out");
}

TEST_CASE("result_file_name: never '.', '..', empty or a path") {
  CHECK(result_file_name("") == ".out");
  CHECK(result_file_name(".") == "..out");
  CHECK(result_file_name("..") == "...out");
  CHECK(result_file_name("../../etc/passwd") == "..%2F..%2Fetc%2Fpasswd.out");
  CHECK(result_file_name("/") == "%2F.out");
}

TEST_CASE("result_file_name: long keys are cut, never inside an escape, and told apart by their SHA-256") {
  const std::string long_a(300, 'x');
  const std::string long_b = long_a + "y";
  const std::string a = result_file_name(long_a);
  CHECK(a == std::string(kMaxEscapedKey, 'x') + "~" + sha256_hex(long_a) + ".out");
  CHECK(result_file_name(long_b) != a);
  // An escape that would straddle the cut is left out whole.
  for (std::size_t pad = 0; pad < 3; ++pad) {
    CAPTURE(pad);
    const std::string key = std::string(kMaxEscapedKey - 2 + pad, 'k') + std::string(100, '/');
    const std::string name = result_file_name(key);
    const std::string kept = name.substr(0, name.find('~'));
    CHECK(kept.size() <= kMaxEscapedKey);
    CHECK(kept.size() >= kMaxEscapedKey - 2);
    const std::size_t escapes = kept.find('%');
    if (escapes != std::string::npos) CHECK((kept.size() - escapes) % 3 == 0);  // whole %XX only
  }
  // Within NAME_MAX, even escaped 3x, with a "~N" for a repeated key.
  CHECK(result_file_name(std::string(4000, '/')).size() + 11 <= 255);
}

TEST_CASE("result_file_name: one to one over keys that the old mapping confused") {
  const std::vector<std::string> keys = {"a/b", "a_b", "a b", "a%2Fb", "a%2fb", "a.b", "", ".", "..", "task",
                                         "a_b.2", "x~1", std::string(200, 'q'), std::string(200, 'q') + "r",
                                         std::string(161, 'q'), std::string(160, 'q') + "~"};
  std::set<std::string> names;
  for (const auto& k : keys) names.insert(result_file_name(k));
  CHECK(names.size() == keys.size());
  for (const auto& n : names) {
    CAPTURE(n);
    CHECK(n.find('/') == std::string::npos);
    CHECK(n != ".");
    CHECK(n != "..");
  }
}

TEST_CASE("ResultFiles: results by key, the same key twice in a run kept apart, a rerun replaces") {
  test::ScratchDir scratch("results");
  const std::string dir = scratch.path + "/out/nested";  // created, parents too
  {
    auto files = ResultFiles::open(dir);
    REQUIRE_MESSAGE(files.has_value(), files.error());
    CHECK(*files->write("a/b", "first") == dir + "/a%2Fb.out");
    CHECK(*files->write("a/b", "second payload, same key") == dir + "/a%2Fb~2.out");
    CHECK(*files->write("a_b", "other key") == dir + "/a_b.out");
    CHECK(read_plain(dir + "/a%2Fb.out") == "first");
    CHECK(read_plain(dir + "/a%2Fb~2.out") == "second payload, same key");
    struct stat st {};
    REQUIRE(::stat((dir + "/a_b.out").c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == kDefaultResultMode);
  }
  // A DIR given with trailing slashes: the printed paths have one (issue 26, point 6).
  auto rerun = ResultFiles::open(dir + "//", 0640);
  REQUIRE(rerun.has_value());
  CHECK(*rerun->write("a/b", "rerun") == dir + "/a%2Fb.out");
  CHECK(read_plain(dir + "/a%2Fb.out") == "rerun");
  struct stat st {};
  REQUIRE(::stat((dir + "/a%2Fb.out").c_str(), &st) == 0);
  CHECK((st.st_mode & 07777) == 0640);
  // Nothing but results is left behind (no temp files).
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++entries;
  CHECK(entries == 3);
}

TEST_CASE("ResultFiles: the directory is opened once; renaming a symlink over it later changes nothing") {
  test::ScratchDir scratch("results");
  const std::string dir = scratch.path + "/out";
  auto files = ResultFiles::open(dir);
  REQUIRE(files.has_value());
  // Someone swaps the directory for a link to another place after it was opened.
  REQUIRE(::mkdir((scratch.path + "/elsewhere").c_str(), 0755) == 0);
  REQUIRE(::rename(dir.c_str(), (scratch.path + "/moved").c_str()) == 0);
  REQUIRE(::symlink((scratch.path + "/elsewhere").c_str(), dir.c_str()) == 0);
  REQUIRE(files->write("k", "v").has_value());
  CHECK(read_plain(scratch.path + "/moved/k.out") == "v");
  CHECK(::access((scratch.path + "/elsewhere/k.out").c_str(), F_OK) != 0);
}

TEST_CASE("ResultFiles::open: a path that is not a directory is one line naming it") {
  test::ScratchDir scratch("results");
  const std::string file = scratch.path + "/file";
  std::ofstream(file) << "x";
  auto files = ResultFiles::open(file);
  REQUIRE_FALSE(files.has_value());
  CHECK(files.error().rfind("cannot write to --out directory '" + file + "': ", 0) == 0);
}

}  // namespace pillbox
