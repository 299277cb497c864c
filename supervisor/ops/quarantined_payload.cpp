#include "supervisor/ops/quarantined_payload.h"

#include <utility>

#include "supervisor/exec/child_setup.h"

namespace pillbox {

Expected<QuarantinedPayload> load_quarantined_payload(store::QuarantineStore& quarantine, std::int64_t id) {
  auto found = quarantine.get(id);
  if (!found) return Error{found.error()};
  if (!*found) return Error{"no quarantine record " + std::to_string(id) + " in this store"};
  QuarantinedPayload loaded{std::move(**found), {}};
  auto payload = quarantine.payloads().get(loaded.record.entry.payload_sha256);
  if (!payload) return Error{payload.error()};
  loaded.payload = std::move(*payload);
  return loaded;
}

Expected<ChildConfig> recorded_config_of(const store::QuarantineRecord& record, const std::optional<Policy>& given,
                                         const RecordAllowance& allowed) {
  auto config = recorded_child_config(record.entry, given, allowed);
  if (!config) return Error{"record " + std::to_string(record.id) + ": " + config.error(), config.error_code()};
  return config;
}

}  // namespace pillbox
