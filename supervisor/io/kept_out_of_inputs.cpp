#include "supervisor/io/kept_out_of_inputs.h"

#include <fcntl.h>

#include <mutex>
#include <utility>

namespace pillbox {
namespace {

struct KeptOut {
  std::string dir;
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<std::string> names;
  std::string what;
};

std::mutex g_mutex;
std::vector<KeptOut>& kept() {
  static std::vector<KeptOut> list;
  return list;
}

bool same_file(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

}  // namespace

void keep_out_of_inputs(const std::string& dir, const std::vector<std::string>& names, const std::string& what) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return;  // nothing there to read either
  std::lock_guard lock(g_mutex);
  for (const KeptOut& k : kept()) {
    if (k.dev == st.st_dev && k.ino == st.st_ino) return;
  }
  kept().push_back({dir, st.st_dev, st.st_ino, names, what});
}

std::optional<std::string> kept_out_of_inputs(const struct stat& st) {
  std::lock_guard lock(g_mutex);
  for (const KeptOut& k : kept()) {
    // A directory removed since (a test's, a store moved away) frees its
    // inode number for another: only the one still there is kept out.
    struct stat now {};
    if (::stat(k.dir.c_str(), &now) != 0 || now.st_dev != k.dev || now.st_ino != k.ino) continue;
    if (S_ISDIR(st.st_mode) && k.dev == st.st_dev && k.ino == st.st_ino) return k.what;
    if (!S_ISREG(st.st_mode)) continue;
    for (const std::string& name : k.names) {
      struct stat file {};
      if (::stat((k.dir + "/" + name).c_str(), &file) == 0 && same_file(file, st)) return k.what + " (its " + name + ")";
    }
  }
  return std::nullopt;
}

UniqueFd open_regular_unless_kept_out(const std::string& path, struct stat& st) {
  st = {};
  UniqueFd handle(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!handle.valid() || ::fstat(handle.get(), &st) != 0 || !S_ISREG(st.st_mode) || kept_out_of_inputs(st)) {
    return UniqueFd();
  }
  UniqueFd fd(::open(("/proc/self/fd/" + std::to_string(handle.get())).c_str(),
                     O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  struct stat again {};
  if (!fd.valid() || ::fstat(fd.get(), &again) != 0 || again.st_dev != st.st_dev || again.st_ino != st.st_ino) {
    return UniqueFd();  // never: the same file, reopened
  }
  return fd;
}

}  // namespace pillbox
