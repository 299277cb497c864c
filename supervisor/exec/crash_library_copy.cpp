#include "supervisor/exec/crash_library_copy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "shared/sha256.h"
#include "shared/unique_fd.h"
#include "supervisor/exec/access_check.h"
#include "supervisor/exec/host_view.h"
#include "supervisor/io/regular_file.h"

namespace pillbox {
namespace {

constexpr std::uint64_t kMaxLibraryBytes = 64ull << 20;

bool loader_can_hold(const std::string& path) { return path.find_first_of(" :") == std::string::npos; }

// `dir` made (0755) or found: a directory, not a symlink, of ours, that no
// one else may write.
Status own_directory(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::error("cannot create " + dir + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::error("cannot look at " + dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) return Status::error(dir + " is " + file_type_text(st.st_mode) + ", not a directory");
  if (st.st_uid != ::geteuid()) {
    return Status::error(dir + " belongs to uid " + std::to_string(st.st_uid) + ", not to pillbox's uid " +
                         std::to_string(::geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return Status::error(dir + " is writable by group or others");
  // Others must enter it to load the copy (a 0700 XDG_RUNTIME_DIR's own
  // subdirectory is still only ours: its parent keeps others out, and
  // tasks run as us there).
  if ((st.st_mode & 0755) != 0755 && ::chmod(dir.c_str(), 0755) != 0) {
    return Status::error("cannot make " + dir + " mode 0755: " + std::strerror(errno));
  }
  return Status::ok();
}

// The copy at `path` holds `bytes`, is ours, and nobody else may write it.
bool good_copy(const std::string& path, const std::string& bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd.valid()) return false;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || st.st_nlink != 1 ||
      (st.st_mode & 07777) != 0444) {
    return false;
  }
  auto have = read_regular_fd(fd.get(), kMaxLibraryBytes);
  return have && *have == bytes;
}

Expected<std::string> make_copy(const std::string& library, const std::string& why) {
  const std::string dir = crash_library_copy_dir();
  const std::string what = "pillbox's crash library " + library + " " + why;
  if (dir.empty()) {
    return Error{what + ", and no copy can be kept where tasks could load it (looked for a directory without a space "
                        "or colon, not on a noexec mount, not under /tmp: " +
                 std::string(::geteuid() == 0 ? "/var/lib, /var/cache, /run" : "$XDG_CACHE_HOME, ~/.cache, $XDG_RUNTIME_DIR, /tmp") +
                 "); install pillbox under a prefix others may read that has neither, or set PILLBOX_CRASH_LIB to a "
                 "copy of it at such a path"};
  }
  auto bytes = read_regular_file_at(AT_FDCWD, library, 0, kMaxLibraryBytes);
  if (!bytes) return Error{what + ", and it cannot be read to copy it: " + bytes.error()};
  if (auto s = own_directory(dir); !s) {
    return Error{what + ", and no copy can be kept where tasks may load it: " + s.message()};
  }
  const std::string path = dir + "/libpillbox-crash-" + sha256_hex(*bytes).substr(0, 16) + ".so";
  if (good_copy(path, *bytes)) return path;
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  if (auto s = write_file_whole_at(AT_FDCWD, path, temp, *bytes, 0444); !s) {
    return Error{what + ", and its copy " + path + " cannot be written: " + s.message()};
  }
  // Another run may have replaced it meanwhile with the same bytes: either is ours.
  if (!good_copy(path, *bytes)) return Error{what + ", and its copy " + path + " is not what was written"};
  return path;
}

}  // namespace

std::string crash_library_copy_dir() {
  std::vector<std::string> candidates;
  if (::geteuid() == 0) {
    candidates = {"/var/lib/pillbox", "/var/cache/pillbox", "/run/pillbox"};
  } else {
    auto from_env = [&candidates](const char* name, const char* below) {
      const char* v = std::getenv(name);
      if (v != nullptr && v[0] == '/') candidates.push_back(std::string(v) + below);
    };
    from_env("XDG_CACHE_HOME", "/pillbox");
    from_env("HOME", "/.cache/pillbox");
    from_env("XDG_RUNTIME_DIR", "/pillbox");
  }
  // Last, for a user with no home (nobody's is /nonexistent): the zygote
  // binds /tmp/pillbox-UID into the tasks' private /tmp (keep_visible).
  // own_directory refuses one another uid made.
  const std::string last = "/tmp/pillbox-" + std::to_string(::geteuid());
  if (::geteuid() != 0) candidates.push_back(last);
  for (const std::string& dir : candidates) {
    // The loader must map it (no space or colon, not noexec, as /run often
    // is), and the task must see it (not under a private directory).
    const std::string parent = std::filesystem::path(dir).parent_path().string();
    struct statvfs fs {};
    if (!loader_can_hold(dir) || (dir != last && !private_dir_of(dir).empty()) ||
        ::statvfs(parent.c_str(), &fs) != 0 || (fs.f_flag & ST_NOEXEC) != 0) {
      continue;
    }
    if (dir != last) {
      // Not under a parent this user cannot write (another's HOME).
      if (::access(parent.c_str(), W_OK) != 0 && ::access(dir.c_str(), W_OK) != 0) continue;
    }
    return dir;
  }
  return "";
}

Expected<std::string> crash_library_for_tasks(const ChildConfig& config, std::uint32_t uid, std::uint32_t gid) {
  const std::string& library = config.crash_lib;
  if (library.empty()) return library;
  if (!loader_can_hold(library)) {
    return make_copy(library, "has a space or a colon in its path, where the loader splits LD_PRELOAD");
  }
  // Under a private directory (/tmp) the zygote binds it into the task's
  // view itself (keep_visible), whatever the directories above allow.
  const auto& kept = config.keep_visible;
  if (!config.drop_privileges || std::find(kept.begin(), kept.end(), library) != kept.end()) return library;
  const Status readable = check_access_as({{library, R_OK, "pillbox's crash library"}}, uid, gid);
  if (readable) return library;
  return make_copy(library, "cannot be read by the tasks' uid " + std::to_string(uid) + " (" +
                                explain_denial(library, R_OK, uid, gid) + ")");
}

}  // namespace pillbox
