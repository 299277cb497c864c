#include "supervisor/cli/fleet_key_option.h"

#include <cstdlib>
#include <string>

namespace pillbox::cli {

const std::vector<OptionSpec> kFleetKeyOptions = {{"fleet-key"}, {"trust-unsigned", false}};

Expected<std::optional<broker::FleetKey>> read_fleet_key(const Args& args) {
  if (!args.value("redis")) {
    for (const char* name : {"fleet-key", "trust-unsigned"}) {
      if (args.flag(name)) return Error{std::string("--") + name + " goes with --redis URL (the fleet's dead letters)"};
    }
    return std::optional<broker::FleetKey>();
  }
  std::string path;
  if (auto flag = args.value("fleet-key")) {
    path = *flag;
  } else if (const char* env = std::getenv("PILLBOX_FLEET_KEY"); env != nullptr && *env != '\0') {
    path = env;
  } else {
    return std::optional<broker::FleetKey>();
  }
  auto key = broker::FleetKey::load(path);
  if (!key) return Error{key.error()};
  return std::optional<broker::FleetKey>(std::move(*key));
}

}  // namespace pillbox::cli
