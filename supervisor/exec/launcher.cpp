#include "supervisor/exec/launcher.h"

namespace pillbox {

std::unique_ptr<Launcher> make_launcher(const LauncherSettings& settings) {
  if (settings.mode == LaunchMode::kSpawn) return make_spawn_launcher(settings);
  return make_zygote_launcher(settings);
}

}  // namespace pillbox
