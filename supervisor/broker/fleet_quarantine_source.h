#pragma once
// The fleet's quarantine (a broker's dead letters, fleet_dead_letters.h:
// Redis's NAME:dlq) as a QuarantineSource
// (supervisor/ops/quarantine_source.h), written once for every broker:
// records by the broker's ids, signed by the workers (fleet_key.h), with the
// same JSON and text whichever broker holds them. What only the store has is
// not here: handler arguments to patch (a fleet's patch is of the payload:
// fleet_revisions.h) and discard --raise-site; what a broker cannot do is its
// capability (FleetDeadLetters::can).
#include <string>

#include "supervisor/broker/fleet_dead_letters.h"
#include "supervisor/ops/quarantine_source.h"

namespace pillbox::broker {

class FleetQuarantineSource final : public QuarantineSource {
 public:
  // `dead_letters` outlives this.
  explicit FleetQuarantineSource(FleetDeadLetters& dead_letters) : dead_letters_(dead_letters) {}

  // The dead letter a record was read from (get(), each()).
  static const FleetRecord& dead_letter(const SourcedRecord& r);

  QuarantineCapabilities can() const override { return dead_letters_.can(); }
  std::string where() const override { return dead_letters_.where(); }
  int id_width() const override { return dead_letters_.id_width(); }
  Expected<std::string> parse_id(const std::string& text) const override { return dead_letters_.parse_id(text); }
  nlohmann::json id_json(const std::string& id) const override { return dead_letters_.id_json(id); }
  std::string left_out() const override { return dead_letters_.left_out(); }
  Status each(const store::ListFilter& filter, const std::function<bool(const SourcedRecord&)>& fn) override;
  Expected<std::int64_t> count(const store::ListFilter& filter) override {
    return count_matching(dead_letters_, filter);
  }
  // One pass: a count reads the whole dead-letter stream again.
  Expected<std::int64_t> each_counted(const store::ListFilter& filter,
                                      const std::function<void(const SourcedRecord&)>& fn) override;
  Expected<std::vector<store::FingerprintStats>> stats(const store::ListFilter& filter,
                                                       std::vector<nlohmann::json>& example_ids) override;
  Expected<SourcedRecord> get(const std::string& id) override;
  Expected<nlohmann::json> full_json(const SourcedRecord& r) override;
  Expected<PayloadBytes> payload(const SourcedRecord& r, std::int64_t revision = 0) override;
  Expected<std::string> payload_head(const SourcedRecord& r, std::size_t max_bytes) override;
  Expected<PayloadBytes> minimized_payload(const SourcedRecord& r) override;
  std::string hint_options() const override { return dead_letters_.hint_options(); }
  Status check_runnable(const SourcedRecord& r, bool trust_unsigned) const override;
  Status check_discardable(const SourcedRecord& r, const std::string& act) override;
  Expected<Discarded> discard(const std::string& id, const std::string& actor, const std::string& reason) override;
  // An allowance is signed with the fleet's key, when there is one (fleet_allowance.h).
  Expected<Reviewed> review(const std::string& id, store::Review review, const std::string& actor,
                            const std::string& note) override;
  Expected<store::Revision> patch(const std::string& id, PatchRequest request) override;
  Status record_reproduction(const SourcedRecord& r, const std::string& verdict, std::int64_t runs, std::int64_t matches,
                             const std::string& actor, const std::string& detail) override;
  std::unique_ptr<MinimizeKeeper> minimize_keeper(const SourcedRecord& r, const std::string& actor) override;
  Expected<std::vector<PlannedReplay>> replay_plan(const ReplayRun& run, std::vector<std::string>& skipped) override;
  Expected<ReplayResult> replay(const ReplayRun& run) override { return dead_letters_.redrive(run); }

 private:
  SourcedRecord sourced(FleetRecord r) const;

  FleetDeadLetters& dead_letters_;
};

}  // namespace pillbox::broker
