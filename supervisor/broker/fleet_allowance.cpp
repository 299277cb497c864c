#include "supervisor/broker/fleet_allowance.h"

namespace pillbox::broker {
namespace {

// The fields an allowance's sig covers, `sig` among them when given.
SignedFields allowance_fields(const FleetRecord& record, const FleetAllowance& a) {
  SignedFields fields = {{"record", record.id},
                         {"payload_sha256", record.record.entry.payload_sha256},
                         {"actor", a.actor},
                         {"at", std::to_string(a.at)}};
  if (!a.sig.empty()) fields.emplace_back("sig", a.sig);
  return fields;
}

}  // namespace

FleetAllowance make_allowance(const FleetKey* key, const std::string& dlq, const FleetRecord& record,
                              const std::string& actor, std::int64_t at) {
  FleetAllowance a{at, actor, ""};
  if (key != nullptr) a.sig = key->sign_allowance(dlq, allowance_fields(record, a));
  return a;
}

Signature allowance_signature(const FleetKey* key, const std::string& dlq, const FleetRecord& record) {
  if (key == nullptr) return Signature::kUnchecked;
  if (record.state.status != store::RecordStatus::kAllowed) return Signature::kMissing;
  return key->verify_allowance(dlq, allowance_fields(record, record.state.allowance));
}

Status check_allowance(const FleetRecord& r, Signature allowance, bool trust_unsigned) {
  if (trust_unsigned || allowance == Signature::kValid) return Status::ok();
  const std::string again = "; allow it again with the fleet's key (pillbox quarantine allow " + r.id +
                            " --fleet-key FILE), or --trust-unsigned takes it anyway";
  switch (allowance) {
    case Signature::kUnchecked:
      return Status::error("record " + r.id + "'s allowance was not checked: give the fleet's key (--fleet-key FILE, "
                           "or PILLBOX_FLEET_KEY=FILE), the one operators allow records with" + again);
    case Signature::kMissing:
      return Status::error("record " + r.id + "'s allowance is unsigned: allowed without the fleet's key, or "
                           "written into its state by anyone who can write there; never replayed on its word" + again);
    case Signature::kBad:
      return Status::error("record " + r.id + "'s allowance does not match the fleet key: it is not this record's "
                           "(another record's, or another payload's), was changed, or signed with another key" + again);
    case Signature::kValid:
      break;
  }
  return Status::ok();
}

}  // namespace pillbox::broker
