#include "supervisor/broker/fleet_minimize.h"

#include "shared/sha256.h"

namespace pillbox::broker {

Expected<std::optional<MinimizeKeeper::Saved>> FleetMinimizeKeeper::load() {
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

Status FleetMinimizeKeeper::clear() {
  auto changed = q_.change_state(id_, false, [](FleetState& s, const FleetRecord&) {
    s.minimize.reset();
    return Status::ok();
  });
  if (!changed) return Status::error(changed.error(), changed.error_code());
  auto deleted = q_.redis().command({"DEL", q_.keys().minimizing(id_)});
  return deleted ? Status::ok() : Status::error(deleted.error());
}

Status FleetMinimizeKeeper::save(std::string_view best, const store::MinimizeState& state) {
  if (auto set = q_.redis().command({"SET", q_.keys().minimizing(id_), best}); !set) return Status::error(set.error());
  auto changed = q_.change_state(id_, false, [&](FleetState& s, const FleetRecord&) {
    s.minimize = state;
    return Status::ok();
  });
  return changed ? Status::ok() : Status::error(changed.error(), changed.error_code());
}

Status FleetMinimizeKeeper::record(const std::string& sha256, const std::string& detail) {
  // minimize_payload saved this payload just before: the best so far is it.
  auto copied = q_.redis().command({"COPY", q_.keys().minimizing(id_), q_.keys().minimized(id_), "REPLACE"});
  if (!copied) return Status::error(copied.error());
  auto changed = q_.change_state(id_, false, [&](FleetState& s, const FleetRecord&) {
    s.minimized_sha256 = sha256;
    s.updated_at = store::now_ms();
    s.audit.push_back({s.updated_at, actor_, "minimized", detail});
    return Status::ok();
  });
  return changed ? Status::ok() : Status::error(changed.error(), changed.error_code());
}

}  // namespace pillbox::broker
