#include "supervisor/broker/fleet_payload_log.h"

#include <algorithm>
#include <utility>

#include "shared/sha256.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::broker {

Expected<std::optional<std::string>> read_kept_payload(PayloadLog& log, std::int64_t position, const std::string& id,
                                                       const std::string& sha256, std::uint64_t most,
                                                       const std::string& most_is, std::string& why_not) {
  if (position < 0) {
    why_not = "its state names no offset of " + log.name() + " for it";
    return std::optional<std::string>();
  }
  const std::string where = "offset " + std::to_string(position) + " of " + log.name();
  auto entry = log.entry_at(position, most, why_not);
  if (!entry) return Error{entry.error(), entry.error_code()};
  if (!*entry) return std::optional<std::string>();
  if (!(*entry)->of || *(*entry)->of != id) {
    why_not = where + " is not a payload of record " + id;
    return std::optional<std::string>();
  }
  if (!(*entry)->bytes) {
    why_not = where + " is " + std::to_string((*entry)->size) + " bytes, more than " + most_is + " (" +
              std::to_string(most) + ")";
    return std::optional<std::string>();
  }
  if (sha256_hex(*(*entry)->bytes) != sha256) {
    // The sha256 is the state's claim: shown as a table cell.
    why_not = where + " does not match the sha256 its state names (" + table_cell(sha256, 80) + ")";
    return std::optional<std::string>();
  }
  return std::optional<std::string>(std::move(*(*entry)->bytes));
}

Expected<std::optional<std::string>> read_minimization(PayloadLog& payloads, std::int64_t position,
                                                       const FleetRecord& record, const std::string& sha256,
                                                       std::string& why_not) {
  const std::int64_t claimed = std::max<std::int64_t>(0, record.record.entry.payload_size);
  const std::uint64_t most = record.payload_omitted ? static_cast<std::uint64_t>(claimed) : record.payload.size();
  return read_kept_payload(payloads, position, record.id, sha256, most, "the record's own payload", why_not);
}

Expected<PayloadBytes> minimized_payload_in(PayloadLog& payloads, const FleetRecord& r,
                                            const std::string& hint_options) {
  const std::string& sha = r.record.minimized_sha256;
  if (sha.empty()) {
    return Error::usage("record " + r.id + " has no minimized payload (pillbox minimize " + r.id + hint_options + ")");
  }
  std::string why_not;
  auto bytes = read_minimization(payloads, r.state.minimized_at, r, sha, why_not);
  if (!bytes) return Error{bytes.error(), bytes.error_code()};
  if (!*bytes) return Error{"the minimized payload of record " + r.id + " cannot be had: " + why_not};
  return PayloadBytes{std::move(**bytes), sha};
}

Expected<std::string> revision_payload_in(PayloadLog& revisions, const FleetRecord& record,
                                          const FleetRevision& revision) {
  std::string why_not;
  const auto size = static_cast<std::uint64_t>(std::max<std::int64_t>(0, revision.payload_size));
  auto bytes = read_kept_payload(revisions, revision.at, record.id, revision.payload_sha256, size,
                                 "the size its state names", why_not);
  if (!bytes) return Error{bytes.error(), bytes.error_code()};
  if (!*bytes) return Error::usage(why_not);
  if (static_cast<std::int64_t>((*bytes)->size()) != revision.payload_size) {
    return Error::usage("offset " + std::to_string(revision.at) + " of " + revisions.name() + " is " +
                        std::to_string((*bytes)->size()) + " bytes, not the " + std::to_string(revision.payload_size) +
                        " its state names");
  }
  return std::move(**bytes);
}

}  // namespace pillbox::broker
