#include "supervisor/exec/handler_version.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <optional>

#include "shared/regular_file_read.h"
#include "shared/sha256.h"

namespace pillbox {
namespace {

// What `path` holds, as text for the version's hash; nullopt when it is not
// a regular file (or cannot be read: then it is not versioned either).
std::optional<std::string> content_digest(const std::string& path, bool scripts_only) {
  UniqueFd fd = open_for_reading_at(AT_FDCWD, path, 0);
  if (!fd.valid()) return std::nullopt;
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  if (static_cast<std::uint64_t>(st.st_size) > kMaxVersionedBytes) {
    if (scripts_only) return std::nullopt;
    return "size " + std::to_string(st.st_size) + " mtime " + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec);
  }
  RegularFileRead read = read_whole_regular_fd(fd.get(), kMaxVersionedBytes);
  if (read.failure != RegularFileRead::Failure::kNone) return std::nullopt;
  if (scripts_only && !read.bytes.starts_with("#!")) return std::nullopt;
  return sha256_hex(read.bytes);
}

}  // namespace

std::string host_path_identity(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path full = fs::weakly_canonical(fs::path(path), ec);
  if (ec) full = fs::path(path).lexically_normal();
  for (fs::path dir = full.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    for (const char* marker : {".git", ".hg", ".svn", ".jj"}) {
      std::error_code e;
      if (fs::exists(dir / marker, e)) return full.lexically_relative(dir).string();
    }
    if (dir == dir.root_path()) break;
  }
  return full.string();
}

HandlerVersion handler_version(const ChildConfig& config) {
  HandlerVersion v;
  if (!config.exec_mode()) return v;
  Sha256 hash;
  for (std::size_t i = 0; i < config.exec_argv.size(); ++i) {
    const std::string& a = config.exec_argv[i];
    // make_child_config made the arguments that name a host file absolute;
    // the program (argv[0]) is versioned only when it is a script itself,
    // not an interpreter or tool of the system.
    if (!a.starts_with("/")) continue;
    const auto digest = content_digest(a, /*scripts_only=*/i == 0);
    if (!digest) continue;
    const std::string name = host_path_identity(a);
    hash.update(name);
    hash.update(std::string_view("\0", 1));
    hash.update(*digest);
    hash.update(std::string_view("\0", 1));
    v.scripts.push_back(std::filesystem::path(a).filename().string());
  }
  if (v.scripts.empty()) return v;
  v.id = digest_hex(hash.finish()).substr(0, 16);
  return v;
}

}  // namespace pillbox
