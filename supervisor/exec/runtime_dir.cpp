#include "supervisor/exec/runtime_dir.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace pillbox {
namespace {

// Runtime dirs of earlier runs whose supervisor was killed before it could
// remove them: "pillbox-<pid>.XXXXXX" whose pid is gone.
void remove_stale(const std::string& base) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("pillbox-", 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + 8, &end, 10);
    if (end == name.c_str() + 8 || *end != '.' || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || st.st_uid != ::geteuid() || !S_ISDIR(st.st_mode)) continue;
    std::filesystem::remove_all(entry.path(), ec);
  }
}

bool usable_base(const std::string& dir) {
  // Endpoints must fit in sun_path (108 bytes) with room for "/pillbox-<pid>.XXXXXX/w<20 digits>".
  return !dir.empty() && dir.size() < 60 && ::access(dir.c_str(), W_OK | X_OK) == 0;
}

}  // namespace

Expected<RuntimeDir> RuntimeDir::create() {
  std::vector<std::string> bases;
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR")) bases.emplace_back(xdg);
  if (::geteuid() == 0) bases.emplace_back("/run");
  bases.emplace_back("/tmp");
  for (const auto& base : bases) {
    if (!usable_base(base)) continue;
    remove_stale(base);
    std::string templ = base + "/pillbox-" + std::to_string(::getpid()) + ".XXXXXX";
    if (::mkdtemp(templ.data()) != nullptr) {
      ::chmod(templ.c_str(), 0700);
      return RuntimeDir(templ);
    }
  }
  return Error{std::string("cannot create a private runtime directory under $XDG_RUNTIME_DIR, /run or /tmp: ") +
               std::strerror(errno)};
}

RuntimeDir::~RuntimeDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace pillbox
