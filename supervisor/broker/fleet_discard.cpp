#include "supervisor/broker/fleet_discard.h"

namespace pillbox::broker {

Status check_fleet_discardable(const FleetRecord& r) {
  if (!r.replaying) return Status::ok();
  return Status::error("record " + r.id + " is being replayed right now (by " + r.replaying_by +
                           "); discard it when the replay is over",
                       ErrorCode::kUsage);
}

Expected<FleetDiscarded> discard_fleet_record(FleetQuarantine& fleet, const std::string& id, const std::string& actor,
                                              const std::string& reason) {
  FleetDiscarded done;
  auto r = fleet.change_state(id, true, [&](FleetState& s, const FleetRecord&) {
    done.was = std::string(to_string(s.status));
    done.already = s.status == store::RecordStatus::kDiscarded;
    if (done.already) return Status::ok();  // written back as it is
    s.status = store::RecordStatus::kDiscarded;
    s.updated_at = store::now_ms();
    s.audit.push_back({s.updated_at, actor, "discarded", reason + " (was " + done.was + ")"});
    return Status::ok();
  });
  if (!r) return Error{r.error(), r.error_code()};
  return done;
}

}  // namespace pillbox::broker
