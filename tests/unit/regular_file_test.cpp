// Whole regular files through a file descriptor (supervisor/io/regular_file.h):
// reads refuse what is not a regular file without blocking, and count the
// cap on the bytes read; writes never go through a planted link.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "supervisor/io/private_file.h"
#include "supervisor/io/regular_file.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_plain(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

TEST_CASE("read_regular_file_at: a regular file whole; anything else refused at once, named by its type") {
  test::ScratchDir dir("regular-file");
  write_plain(dir.path + "/file", "abc");
  CHECK(*read_regular_file_at(AT_FDCWD, dir.path + "/file", 0, 100) == "abc");

  REQUIRE(::mkfifo((dir.path + "/fifo").c_str(), 0600) == 0);  // no writer: a blocking open would hang here
  auto fifo = read_regular_file_at(AT_FDCWD, dir.path + "/fifo", 0, 100);
  REQUIRE_FALSE(fifo.has_value());
  CHECK(fifo.error() == "a FIFO, not a regular file");

  auto zero = read_regular_file_at(AT_FDCWD, "/dev/zero", 0, 100);
  REQUIRE_FALSE(zero.has_value());
  CHECK(zero.error() == "a character device, not a regular file");

  auto directory = read_regular_file_at(AT_FDCWD, dir.path, 0, 100);
  REQUIRE_FALSE(directory.has_value());
  CHECK(directory.error() == "a directory, not a regular file");

  auto missing = read_regular_file_at(AT_FDCWD, dir.path + "/missing", 0, 100);
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error() == "No such file or directory");
}

TEST_CASE("read_regular_file_at: O_NOFOLLOW refuses a symlink; without it the target is read") {
  test::ScratchDir dir("regular-file");
  write_plain(dir.path + "/target", "T");
  REQUIRE(::symlink((dir.path + "/target").c_str(), (dir.path + "/link").c_str()) == 0);
  auto refused = read_regular_file_at(AT_FDCWD, dir.path + "/link", O_NOFOLLOW, 100);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error() == "Too many levels of symbolic links");  // ELOOP: what O_NOFOLLOW says
  CHECK(*read_regular_file_at(AT_FDCWD, dir.path + "/link", 0, 100) == "T");
}

TEST_CASE("read_regular_file_at: the cap counts bytes read, not the size the file claims") {
  test::ScratchDir dir("regular-file");
  write_plain(dir.path + "/ten", "0123456789");
  CHECK(*read_regular_file_at(AT_FDCWD, dir.path + "/ten", 0, 10) == "0123456789");
  auto over = read_regular_file_at(AT_FDCWD, dir.path + "/ten", 0, 9);
  REQUIRE_FALSE(over.has_value());
  CHECK(over.error() == "larger than the 9 bytes limit");
  // /proc files say they are empty (st_size 0) and are not: read to the end.
  auto status = read_regular_file_at(AT_FDCWD, "/proc/self/status", 0, 1 << 20);
  REQUIRE_MESSAGE(status.has_value(), status.error());
  CHECK(status->find("Name:") == 0);
  auto capped = read_regular_file_at(AT_FDCWD, "/proc/self/status", 0, 16);
  REQUIRE_FALSE(capped.has_value());
  CHECK(capped.error() == "larger than the 16 bytes limit");
}

TEST_CASE("size_text: caps as a user reads them") {
  CHECK(size_text(1ull << 30) == "1 GiB");
  CHECK(size_text(64ull << 20) == "64 MiB");
  CHECK(size_text(4096) == "4 KiB");
  CHECK(size_text(1000) == "1000 bytes");
  CHECK(size_text(1) == "1 byte");
}

TEST_CASE("write_file_whole_at: replaces a planted symlink, never writes its target; the mode is exact") {
  test::ScratchDir dir("regular-file");
  write_plain(dir.path + "/victim", "VICTIM");
  REQUIRE(::symlink((dir.path + "/victim").c_str(), (dir.path + "/result").c_str()) == 0);
  const mode_t old_umask = ::umask(077);  // would turn 0644 into 0600 if the mode came from open(2) alone
  const Status s = write_file_whole_at(AT_FDCWD, dir.path + "/result", dir.path + "/.tmp", "NEW", 0644);
  ::umask(old_umask);
  REQUIRE_MESSAGE(s.is_ok(), s.message());
  CHECK(read_plain(dir.path + "/victim") == "VICTIM");
  struct stat st {};
  REQUIRE(::lstat((dir.path + "/result").c_str(), &st) == 0);
  CHECK(S_ISREG(st.st_mode));
  CHECK((st.st_mode & 07777) == 0644);
  CHECK(read_plain(dir.path + "/result") == "NEW");
  CHECK(::access((dir.path + "/.tmp").c_str(), F_OK) != 0);
}

TEST_CASE("write_file_whole_at: never writes through what is already at the temp name") {
  test::ScratchDir dir("regular-file");
  write_plain(dir.path + "/victim", "VICTIM");
  SUBCASE("a symlink") { REQUIRE(::symlink((dir.path + "/victim").c_str(), (dir.path + "/.tmp").c_str()) == 0); }
  SUBCASE("a hard link") { REQUIRE(::link((dir.path + "/victim").c_str(), (dir.path + "/.tmp").c_str()) == 0); }
  const Status s = write_file_whole_at(AT_FDCWD, dir.path + "/result", dir.path + "/.tmp", "NEW", 0600);
  CHECK_FALSE(s.is_ok());
  CHECK(s.message() == "File exists");
  CHECK(read_plain(dir.path + "/victim") == "VICTIM");
  CHECK(::access((dir.path + "/result").c_str(), F_OK) != 0);
}

TEST_CASE("write_file_whole_at: a directory at the final name is an error, and the temp file goes") {
  test::ScratchDir dir("regular-file");
  REQUIRE(::mkdir((dir.path + "/result").c_str(), 0755) == 0);
  const Status s = write_file_whole_at(AT_FDCWD, dir.path + "/result", dir.path + "/.tmp", "NEW", 0600);
  CHECK_FALSE(s.is_ok());
  CHECK(s.message() == "Is a directory");
  CHECK(::access((dir.path + "/.tmp").c_str(), F_OK) != 0);
}

TEST_CASE("write_file_whole: a temp file left by a killed writer does not stop the next one") {
  test::ScratchDir dir("regular-file");
  write_plain(dir.path + "/new-1", "half written");
  const Status s = write_file_whole(dir.path + "/run-1", dir.path + "/new-1", "whole");
  REQUIRE_MESSAGE(s.is_ok(), s.message());
  CHECK(*read_private_file(dir.path + "/run-1", 100) == "whole");
  CHECK(::access((dir.path + "/new-1").c_str(), F_OK) != 0);
}

}  // namespace pillbox
