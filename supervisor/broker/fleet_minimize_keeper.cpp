#include "supervisor/broker/fleet_minimize_keeper.h"

#include <optional>
#include <string_view>
#include <utility>

#include "shared/sha256.h"
#include "supervisor/broker/fleet_quarantine.h"

namespace pillbox::broker {
namespace {

class FleetMinimizeKeeper final : public MinimizeKeeper {
 public:
  FleetMinimizeKeeper(FleetQuarantine& quarantine, std::string id, std::string actor)
      : q_(quarantine), id_(std::move(id)), actor_(std::move(actor)) {}

  // A saved best payload whose bytes do not match the state's sha256 (a
  // session that died between writing the two) is no progress: it starts over.
  Expected<std::optional<Saved>> load() override {
    auto record = q_.get(id_);
    if (!record) return Error{record.error(), record.error_code()};
    const auto& progress = record->state.minimize;
    if (!progress) return std::optional<Saved>{};
    auto best = q_.redis().command({"GET", q_.keys().minimizing(id_)});
    if (!best) return Error{best.error()};
    std::string bytes = reply_text(best->get());
    if (sha256_hex(bytes) != progress->best_sha256) return std::optional<Saved>{};
    return std::optional<Saved>(Saved{*progress, std::move(bytes)});
  }

  Status clear() override {
    auto changed = q_.change_state(id_, false, [](FleetState& s, const FleetRecord&) {
      s.minimize.reset();
      return Status::ok();
    });
    if (!changed) return changed.status();
    auto deleted = q_.redis().command({"DEL", q_.keys().minimizing(id_)});
    return deleted ? Status::ok() : Status::error(deleted.error());
  }

  // The bytes first, then the state that names them.
  Status save(std::string_view best, const store::MinimizeState& state) override {
    if (auto set = q_.redis().command({"SET", q_.keys().minimizing(id_), best}); !set) return Status::error(set.error());
    return q_.change_state(id_, false, [&](FleetState& s, const FleetRecord&) {
      s.minimize = state;
      return Status::ok();
    }).status();
  }

  Status record(const std::string& sha256, const std::string& detail) override {
    // minimize_payload saved this payload just before: the best so far is it.
    auto copied = q_.redis().command({"COPY", q_.keys().minimizing(id_), q_.keys().minimized(id_), "REPLACE"});
    if (!copied) return Status::error(copied.error());
    return record_minimized(q_, id_, sha256, -1, actor_, detail);
  }

 private:
  FleetQuarantine& q_;
  std::string id_;
  std::string actor_;
};

}  // namespace

std::unique_ptr<MinimizeKeeper> fleet_minimize_keeper(FleetQuarantine& quarantine, std::string id, std::string actor) {
  return std::make_unique<FleetMinimizeKeeper>(quarantine, std::move(id), std::move(actor));
}

}  // namespace pillbox::broker
