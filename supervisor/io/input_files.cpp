#include "supervisor/io/input_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>

#include "shared/unique_fd.h"
#include "supervisor/io/kept_out_of_inputs.h"
#include "supervisor/io/regular_file.h"

namespace pillbox {
namespace {

namespace fs = std::filesystem;

const char* const kSymlinkNotFollowed = "a symlink, not followed (--follow-symlinks reads what it points to)";

std::string never_read(const std::string& what) { return what + ", never read as input"; }

// Lists a named directory. Each directory is opened relative to its
// parent's fd (O_NOFOLLOW unless following symlinks), so what is listed is
// what was checked. One reached a second time (by device and inode: a
// symlink back up, a bind mount) is skipped, so a loop ends.
class TreeWalk {
 public:
  TreeWalk(const std::string& named, SymlinksInTree symlinks) : named_(named), symlinks_(symlinks) {}

  // The named directory, open at `dir_fd` (taken over).
  Status walk_named(int dir_fd) {
    struct stat st {};
    if (::fstat(dir_fd, &st) != 0) {
      const int err = errno;
      ::close(dir_fd);
      return cannot_read(named_, err);
    }
    dirs_read_.emplace(std::make_pair(st.st_dev, st.st_ino), named_);
    return walk(dir_fd, named_);
  }

  std::vector<InputEntry> take_entries() { return std::move(entries_); }

 private:
  // Takes ownership of `dir_fd`, the directory `shown`.
  Status walk(int dir_fd, const fs::path& shown) {
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(dir_fd), &::closedir);
    if (!dir) {
      const int err = errno;
      ::close(dir_fd);
      return cannot_read(shown, err);
    }
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(dir.get())) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
      errno = 0;
    }
    if (errno != 0) return cannot_read(shown, errno);
    // In name order, so that which of two ways to one directory is read
    // (and which is listed as "already read") does not depend on readdir.
    std::sort(names.begin(), names.end());
    for (const auto& name : names) {
      if (auto s = visit(::dirfd(dir.get()), shown, name); !s) return s;
    }
    return Status::ok();
  }

  Status visit(int dir_fd, const fs::path& shown, const std::string& name) {
    const fs::path path = shown / name;
    const bool follow = symlinks_ == SymlinksInTree::kFollow;
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, follow ? 0 : AT_SYMLINK_NOFOLLOW) != 0) {
      const int err = errno;
      struct stat link {};
      const bool is_link = ::fstatat(dir_fd, name.c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(link.st_mode);
      if (err == ENOENT && !is_link) return Status::ok();  // removed while listed: nothing there to read
      if (err == ENOENT) skip(path, "a symlink to nothing");
      else if (err == ELOOP) skip(path, "a symlink in a loop of symlinks");
      else skip(path, std::string("cannot be read: ") + std::strerror(err));
      return Status::ok();
    }
    if (auto what = kept_out_of_inputs(st)) {
      skip(path, never_read(*what));
      return Status::ok();
    }
    if (S_ISDIR(st.st_mode)) {
      const auto [first, fresh] = dirs_read_.emplace(std::make_pair(st.st_dev, st.st_ino), path.string());
      if (!fresh) {
        skip(path, "a directory already read as '" + first->second + "'");
        return Status::ok();
      }
      const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
      if (fd < 0) return cannot_read(path, errno);
      return walk(fd, path);
    }
    if (S_ISREG(st.st_mode)) {
      entries_.push_back({path.string(), named_.size(), symlinks_, ""});
    } else if (S_ISLNK(st.st_mode)) {
      skip(path, kSymlinkNotFollowed);
    } else {
      skip(path, file_type_text(st.st_mode) + ", not a regular file");
    }
    return Status::ok();
  }

  void skip(const fs::path& path, std::string why) {
    entries_.push_back({path.string(), named_.size(), symlinks_, std::move(why)});
  }

  static Status cannot_read(const fs::path& dir, int err) {
    return Status::error("cannot read input directory '" + dir.string() + "': " + std::strerror(err));
  }

  const std::string& named_;
  SymlinksInTree symlinks_;
  std::vector<InputEntry> entries_;
  std::map<std::pair<dev_t, ino_t>, std::string> dirs_read_;  // identity -> the path it was read as
};

}  // namespace

Expected<std::vector<InputEntry>> list_input(const std::string& named, SymlinksInTree symlinks) {
  // stat, not open: a device named here (a tape, a watchdog) must not even
  // be opened, and a FIFO not waited on.
  struct stat st {};
  if (::stat(named.c_str(), &st) != 0) return Error{"cannot read input '" + named + "': " + std::strerror(errno)};
  if (auto what = kept_out_of_inputs(st)) {
    return Error{"input '" + named + "' is " + never_read(*what) + " (copy what you need out of it first)"};
  }
  if (S_ISDIR(st.st_mode)) {
    const int fd = ::open(named.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Error{"cannot read input directory '" + named + "': " + std::strerror(errno)};
    TreeWalk walk(named, symlinks);
    if (auto s = walk.walk_named(fd); !s) return Error{s.message()};
    auto entries = walk.take_entries();
    std::sort(entries.begin(), entries.end(), [](const InputEntry& a, const InputEntry& b) { return a.path < b.path; });
    return entries;
  }
  InputEntry entry{named, named.size(), symlinks, ""};
  if (!S_ISREG(st.st_mode)) {
    entry.skipped = file_type_text(st.st_mode) + ", not a regular file";
  } else if (UniqueFd fd(::open(named.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)); !fd.valid()) {
    return Error{"cannot read input '" + named + "': " + std::strerror(errno)};  // refused before anything runs
  }
  return std::vector<InputEntry>{std::move(entry)};
}

Expected<std::string> read_input(const InputEntry& entry, std::uint64_t cap) {
  const std::string cannot = "cannot read input '" + entry.path + "': ";
  if (!entry.skipped.empty()) return Error{cannot + entry.skipped};
  if (entry.symlinks == SymlinksInTree::kFollow || entry.named_length >= entry.path.size()) {
    struct stat st {};
    if (::stat(entry.path.c_str(), &st) == 0) {
      if (auto what = kept_out_of_inputs(st)) return Error{cannot + never_read(*what)};
    }
    auto bytes = read_regular_file_at(AT_FDCWD, entry.path, 0, cap);
    if (!bytes) return Error{cannot + bytes.error()};
    return bytes;
  }
  // Below the named directory: one component at a time, none of them a
  // symlink, whatever was swapped in since the directory was listed.
  UniqueFd dir(::open(entry.path.substr(0, entry.named_length).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return Error{cannot + std::strerror(errno)};
  std::vector<std::string> components;
  for (const auto& part : fs::path(entry.path.substr(entry.named_length)).relative_path()) {
    if (!part.empty()) components.push_back(part.string());
  }
  if (components.empty()) return Error{cannot + "not a file below the input directory"};
  for (std::size_t i = 0; i + 1 < components.size(); ++i) {
    UniqueFd next(::openat(dir.get(), components[i].c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!next.valid()) {
      const int err = errno;
      // O_DIRECTORY | O_NOFOLLOW on a symlink says ENOTDIR (or ELOOP): say which.
      struct stat st {};
      const bool link = ::fstatat(dir.get(), components[i].c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode);
      return Error{cannot + (link ? "a directory above it is now a symlink, not followed" : std::string(std::strerror(err)))};
    }
    dir = std::move(next);
  }
  if (struct stat st {}; ::fstatat(dir.get(), components.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (auto what = kept_out_of_inputs(st)) return Error{cannot + never_read(*what)};
  }
  UniqueFd file = open_for_reading_at(dir.get(), components.back(), O_NOFOLLOW);
  if (!file.valid()) return Error{cannot + (errno == ELOOP ? kSymlinkNotFollowed : std::string(std::strerror(errno)))};
  auto bytes = read_regular_fd(file.get(), cap);
  if (!bytes) return Error{cannot + bytes.error()};
  return bytes;
}

}  // namespace pillbox
