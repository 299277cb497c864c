#pragma once
// The fleet's quarantine (fleet_quarantine.h: the workers' dead letters of
// NAME:dlq) as a QuarantineSource (supervisor/ops/quarantine_source.h):
// records by entry id, signed by the workers (fleet_key.h), discarded under
// their redrive lock. What only the store has is not here: revisions
// (quarantine patch) and discard --raise-site.
#include <string>

#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/ops/quarantine_source.h"

namespace pillbox::broker {

class FleetQuarantineSource final : public QuarantineSource {
 public:
  // `fleet` outlives this.
  explicit FleetQuarantineSource(FleetQuarantine& fleet) : fleet_(fleet) {}

  // The dead letter a record was read from (get(), each()).
  static const FleetRecord& dead_letter(const SourcedRecord& r);

  // Known before Redis is read (a verb refused before it is).
  static constexpr QuarantineCapabilities kCapabilities{.signatures = true};
  QuarantineCapabilities can() const override { return kCapabilities; }
  std::string where() const override;
  int id_width() const override { return 15; }  // "1712345678901-0"
  Expected<std::string> parse_id(const std::string& text) const override { return parse_fleet_id(text); }
  Status each(const store::ListFilter& filter, const std::function<bool(const SourcedRecord&)>& fn) override;
  Expected<std::int64_t> count(const store::ListFilter& filter) override { return fleet_.count(filter); }
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
  std::string hint_options() const override;
  Status check_runnable(const SourcedRecord& r, bool trust_unsigned) const override;
  Status check_discardable(const SourcedRecord& r) override;
  Expected<Discarded> discard(const std::string& id, const std::string& actor, const std::string& reason) override;
  Expected<store::Revision> patch(const std::string& id, PatchRequest request) override;
  Status record_reproduction(const SourcedRecord& r, const std::string& verdict, std::int64_t runs, std::int64_t matches,
                             const std::string& actor, const std::string& detail) override;
  std::unique_ptr<MinimizeKeeper> minimize_keeper(const SourcedRecord& r, const std::string& actor) override;
  Expected<std::vector<PlannedReplay>> replay_plan(const ReplayRun& run, std::vector<std::string>& skipped) override;
  Expected<ReplayResult> replay(const ReplayRun& run) override;

 private:
  FleetQuarantine& fleet_;
};

}  // namespace pillbox::broker
