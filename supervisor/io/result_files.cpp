#include "supervisor/io/result_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "shared/sha256.h"
#include "supervisor/io/regular_file.h"

namespace pillbox {
namespace {

bool kept_as_is(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
}

// A name no result has (they end in ".out"), unguessable, so that nobody can
// plant something there first: O_EXCL would refuse it, and that result would
// be lost.
std::string temp_name() {
  std::random_device random;
  char name[48];
  std::snprintf(name, sizeof name, ".pillbox-%08x%08x.tmp", random(), random());
  return name;
}

}  // namespace

std::string result_file_name(std::string_view key) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string name;
  name.reserve(key.size() + 4);
  for (const char c : key) {
    const auto byte = static_cast<unsigned char>(c);
    if (kept_as_is(byte)) {
      name += c;
    } else {
      name += '%';
      name += kHex[byte >> 4];
      name += kHex[byte & 0xf];
    }
  }
  if (name.size() > kMaxEscapedKey) {
    std::size_t cut = kMaxEscapedKey;
    // Not in the middle of an escape: a '%' among the last two bytes kept
    // starts one that the cut would split.
    if (name[cut - 1] == '%') cut -= 1;
    else if (name[cut - 2] == '%') cut -= 2;
    name.resize(cut);
    name += '~' + sha256_hex(key);
  }
  return name + ".out";
}

Expected<ResultFiles> ResultFiles::open(const std::string& dir, mode_t mode) {
  const std::string what = "cannot write to --out directory '" + dir + "': ";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error{what + ec.message()};
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return Error{what + std::strerror(errno)};
  if (::faccessat(fd.get(), ".", W_OK | X_OK, AT_EACCESS) != 0) return Error{what + std::strerror(errno)};
  return ResultFiles(std::move(fd), dir, mode);
}

Expected<std::string> ResultFiles::write(std::string_view key, std::string_view bytes, std::string_view variant) {
  std::string name = result_file_name(key);
  if (!variant.empty()) name.insert(name.size() - 4, "~" + std::string(variant));
  const unsigned earlier = written_[name]++;
  if (earlier > 0) name.insert(name.size() - 4, "~" + std::to_string(earlier + 1));
  // The path as printed: DIR as given, without its trailing slashes (`-o out/` names out/a.out).
  std::string shown_dir = dir_;
  while (shown_dir.size() > 1 && shown_dir.back() == '/') shown_dir.pop_back();
  const std::string path = (shown_dir == "/" ? "" : shown_dir) + "/" + name;
  if (auto s = write_file_whole_at(dir_fd_.get(), name, temp_name(), bytes, mode_); !s) {
    return Error{"cannot write result " + path + ": " + s.message()};
  }
  return path;
}

}  // namespace pillbox
