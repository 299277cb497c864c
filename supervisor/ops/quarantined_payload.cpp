#include "supervisor/ops/quarantined_payload.h"

#include "supervisor/exec/child_setup.h"

namespace pillbox {

Expected<ChildConfig> recorded_config_of(const SourcedRecord& record, const std::optional<Policy>& given,
                                         const RecordAllowance& allowed) {
  auto config = recorded_child_config(record.record.entry, given, allowed);
  if (!config) return Error{"record " + record.id_text() + ": " + config.error(), config.error_code()};
  return config;
}

}  // namespace pillbox
