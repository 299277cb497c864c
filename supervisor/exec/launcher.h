#pragma once
// Launchers start one child per task and report, asynchronously, its pid and
// its end: the zygote's (a fork per task) or spawn's (fork+exec per task,
// slower: the fallback and the reference). See docs/architecture.md,
// 5. Launcher.
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "shared/child_config.h"
#include "shared/control.h"
#include "shared/status.h"

namespace pillbox {

struct LaunchEvent {
  enum class Type { kForked, kForkFailed, kExited, kLauncherLost };
  Type type = Type::kForked;
  std::uint64_t seq = 0;
  pid_t pid = 0;
  ExitReport exit;       // kExited
  std::string message;   // kForkFailed, kLauncherLost
};

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts whatever long-lived process the launcher needs and checks the config.
  virtual Status start() = 0;
  // Begins launching a child for the ticket; the outcome arrives as events.
  virtual Status launch(const TaskTicket& ticket) = 0;
  // SIGKILLs a launched child's process group. `pid` as reported in kForked
  // (a zygote's children live in its PID namespace: only it can name them).
  virtual void kill(pid_t pid) = 0;
  // File descriptors to watch for readability.
  virtual std::vector<int> watch_fds() const = 0;
  // Called when any watched fd is readable (or periodically); returns what happened.
  virtual std::vector<LaunchEvent> collect() = 0;
  // True when collect() must be called soon even without a readable fd.
  virtual bool needs_tick() const { return false; }
  // Namespaces and warnings of the isolation actually achieved.
  virtual const std::vector<std::string>& isolation() const = 0;
  virtual const std::vector<std::string>& warnings() const = 0;
  virtual std::string describe() const = 0;
};

enum class LaunchMode { kZygote, kSpawn };

struct LauncherSettings {
  LaunchMode mode = LaunchMode::kZygote;
  std::string sandbox_binary;  // path of pillbox-sandbox
  ChildConfig config;
};

// The launcher of settings.mode.
std::unique_ptr<Launcher> make_launcher(const LauncherSettings& settings);
std::unique_ptr<Launcher> make_spawn_launcher(const LauncherSettings& settings);
std::unique_ptr<Launcher> make_zygote_launcher(const LauncherSettings& settings);

}  // namespace pillbox
