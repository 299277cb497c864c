#include "supervisor/cli/fleet_key_option.h"

#include <cstdlib>

namespace pillbox::cli {

Expected<FleetTarget> read_fleet_target(const Args& args, const std::string& no_stream, const Status& then) {
  const auto usage = [](const std::string& message) { return Error{message, ErrorCode::kUsage}; };
  const auto url = args.value("redis");
  if (!url) return usage("--redis URL is required (e.g. --redis redis://127.0.0.1:6379)");
  if (args.value("store")) return usage("give --store DIR or --redis URL --stream NAME, not both");
  const auto stream = args.value("stream");
  if (!stream || stream->empty()) return usage(no_stream);
  if (!then) return usage(then.message());
  auto address = broker::parse_redis_url(*url);
  if (!address) return Error{address.error(), address.error_code()};
  return FleetTarget{std::move(*address), *stream};
}

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
