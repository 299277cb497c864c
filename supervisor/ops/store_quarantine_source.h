#pragma once
// The store's quarantine as a QuarantineSource (quarantine_source.h): its
// records by number, their payloads from the payload store, operators'
// patches as revisions, discard --raise-site. Records are not signed here:
// what the store holds, this host's own runs wrote.
#include <cstdint>
#include <string>

#include "supervisor/ops/quarantine_source.h"
#include "supervisor/store/database.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox {

// A store's record id as operators type it: a positive number; the error
// says so.
Expected<std::int64_t> parse_record_id(const std::string& text);

// Record `id` of the store; a kUsage error naming it when there is none.
Expected<store::QuarantineRecord> find_store_record(store::QuarantineStore& quarantine, std::int64_t id);

class StoreQuarantineSource final : public QuarantineSource {
 public:
  // The store stays open for as long as this is used.
  StoreQuarantineSource(store::QuarantineStore& quarantine, store::Database& db, std::string dir)
      : quarantine_(quarantine), db_(db), dir_(std::move(dir)) {}

  // Known before the store is opened (a verb refused before it is read).
  static constexpr QuarantineCapabilities kCapabilities{
      .discard_by_raise_site = true, .replays_here = true, .patches = true,
      .patches_args = true};
  QuarantineCapabilities can() const override { return kCapabilities; }
  std::string where() const override { return dir_; }
  int id_width() const override { return 8; }
  Expected<std::string> parse_id(const std::string& text) const override;
  nlohmann::json id_json(const std::string& id) const override { return std::stoll(id); }
  Status each(const store::ListFilter& filter, const std::function<bool(const SourcedRecord&)>& fn) override;
  Expected<std::int64_t> count(const store::ListFilter& filter) override { return quarantine_.count(filter); }
  Expected<std::vector<store::FingerprintStats>> stats(const store::ListFilter& filter,
                                                       std::vector<nlohmann::json>& example_ids) override;
  Expected<SourcedRecord> get(const std::string& id) override;
  Expected<nlohmann::json> full_json(const SourcedRecord& r) override;
  Expected<PayloadBytes> payload(const SourcedRecord& r, std::int64_t revision = 0) override;
  Expected<std::string> payload_head(const SourcedRecord& r, std::size_t max_bytes) override;
  Expected<PayloadBytes> minimized_payload(const SourcedRecord& r) override;
  std::string hint_options() const override { return ""; }
  Status check_runnable(const SourcedRecord&, bool) const override { return Status::ok(); }
  Status check_discardable(const SourcedRecord& r, const std::string& act) override;
  Expected<Discarded> discard(const std::string& id, const std::string& actor, const std::string& reason) override;
  Expected<Reviewed> review(const std::string& id, store::Review review, const std::string& actor,
                            const std::string& note) override;
  Expected<store::Revision> patch(const std::string& id, PatchRequest request) override;
  Status record_reproduction(const SourcedRecord& r, const std::string& verdict, std::int64_t runs, std::int64_t matches,
                             const std::string& actor, const std::string& detail) override;
  std::unique_ptr<MinimizeKeeper> minimize_keeper(const SourcedRecord& r, const std::string& actor) override;
  Expected<std::vector<PlannedReplay>> replay_plan(const ReplayRun& run, std::vector<std::string>& skipped) override;
  Expected<ReplayResult> replay(const ReplayRun& run) override;

 private:
  store::QuarantineStore& quarantine_;
  store::Database& db_;
  const std::string dir_;
};

}  // namespace pillbox
