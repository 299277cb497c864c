#pragma once
// The run's private 0700 directory of the task wires' ipc:// endpoints.
// Children connect while still root, so no sandboxed process can reach
// another task's endpoint.
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
