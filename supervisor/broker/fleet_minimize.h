#pragma once
// `pillbox minimize ID --redis URL --stream NAME`: a record of the fleet's
// quarantine (fleet_quarantine.h) minimized here, with its progress and
// result kept on Redis as the store keeps them (supervisor/ops/minimize.h):
// the search's progress in the record's state ("minimize"), the best payload
// so far in NAME:dlq:minimizing:<id>, and, once one smaller than the original
// is found, the record's minimized payload in NAME:dlq:minimized:<id> with
// its sha256 in the state ("minimized_sha256") and an audit entry.
#include <string>

#include "shared/status.h"
#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/ops/minimize.h"

namespace pillbox::broker {

class FleetMinimizeKeeper final : public MinimizeKeeper {
 public:
  FleetMinimizeKeeper(FleetQuarantine& quarantine, std::string id, std::string actor)
      : q_(quarantine), id_(std::move(id)), actor_(std::move(actor)) {}

  // A saved best payload whose bytes do not match the state's sha256 (a
  // session that died between writing the two) is no progress: it starts over.
  Expected<std::optional<Saved>> load() override;
  Status clear() override;
  // The bytes first, then the state that names them.
  Status save(std::string_view best, const store::MinimizeState& state) override;
  Status record(const std::string& sha256, const std::string& detail) override;

 private:
  FleetQuarantine& q_;
  std::string id_;
  std::string actor_;
};

}  // namespace pillbox::broker
