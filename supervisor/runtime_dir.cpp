#include "supervisor/runtime_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

namespace pillbox {
namespace {

bool usable_base(const std::string& dir) {
  // Endpoints must fit in sun_path (108 bytes) with room for "/pillbox.XXXXXX/t<20 digits>".
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
    std::string templ = base + "/pillbox.XXXXXX";
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
