#include "supervisor/store/store_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace pillbox::store {
namespace {

std::string non_empty_env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

std::string errno_text(const std::string& what, int err) { return what + ": " + std::strerror(err); }

}  // namespace

Expected<std::string> resolve_store_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (std::string v = non_empty_env("PILLBOX_STORE"); !v.empty()) return v;
  if (std::string v = non_empty_env("XDG_STATE_HOME"); !v.empty()) return v + "/pillbox";
  if (std::string v = non_empty_env("HOME"); !v.empty()) return v + "/.local/state/pillbox";
  return Error{"no store directory: give --store DIR or set PILLBOX_STORE (HOME is not set either)"};
}

Status prepare_store_dir(const std::string& dir) {
  if (dir.empty()) return Status::error("store directory: empty path");
  // Parents are created like `mkdir -p` would (they are not the store's to
  // restrict); the store directory itself is made 0700.
  const std::filesystem::path path(dir);
  if (path.has_parent_path()) {
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) return Status::error("store directory " + dir + ": cannot create its parent: " + ec.message());
  }
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::error(errno_text("store directory " + dir + ": cannot create it", errno));
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::error(errno_text("store directory " + dir, errno));
  if (S_ISLNK(st.st_mode)) {
    return Status::error("store directory " + dir + " is a symbolic link; give the real path with --store");
  }
  if (!S_ISDIR(st.st_mode)) return Status::error("store directory " + dir + " exists and is not a directory");
  if (st.st_uid != ::geteuid()) {
    return Status::error("store directory " + dir + " belongs to uid " + std::to_string(st.st_uid) +
                         ", not to this user (uid " + std::to_string(::geteuid()) + "); use your own --store");
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::error("store directory " + dir + " is readable or writable by others (mode " + mode +
                         "); it holds poison payloads: run chmod 700 " + dir);
  }
  if (::access(dir.c_str(), R_OK | W_OK | X_OK) != 0) {
    return Status::error(errno_text("store directory " + dir + " is not usable", errno));
  }
  return Status::ok();
}

}  // namespace pillbox::store
