#pragma once
// The private runtime directory of one run (mode 0700, owned by the
// supervisor's user) that holds the ipc:// endpoints of the task wires.
// Children connect while still root, before they drop privileges, so no
// sandboxed process can reach another task's endpoint.
#include <string>

#include "shared/status.h"

namespace pillbox {

class RuntimeDir {
 public:
  // Under $XDG_RUNTIME_DIR, else /run (root) or /tmp.
  static Expected<RuntimeDir> create();
  RuntimeDir(RuntimeDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  RuntimeDir& operator=(RuntimeDir&&) = delete;
  RuntimeDir(const RuntimeDir&) = delete;
  ~RuntimeDir();
  const std::string& path() const { return path_; }

 private:
  explicit RuntimeDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace pillbox
