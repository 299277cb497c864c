#include "supervisor/ops/store_quarantine_source.h"

#include <cerrno>
#include <cstdlib>

#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/ops/record_discard.h"
#include "supervisor/store/revision_store.h"

namespace pillbox {
namespace {

SourcedRecord sourced(store::QuarantineRecord r) {
  SourcedRecord s;
  s.id = r.id;
  s.record = std::move(r);
  return s;
}

std::string id_text(const SourcedRecord& r) { return std::to_string(r.record.id); }

}  // namespace

Expected<std::int64_t> parse_record_id(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const long long id = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || id <= 0 || errno != 0) {
    return Error{"'" + text + "' is not a record id (a positive number, as `pillbox quarantine list` shows)",
                 ErrorCode::kUsage};
  }
  return static_cast<std::int64_t>(id);
}

Expected<std::string> StoreQuarantineSource::parse_id(const std::string& text) const {
  auto id = parse_record_id(text);
  if (!id) return Error{id.error(), ErrorCode::kUsage};
  return std::to_string(*id);
}

Status StoreQuarantineSource::each(const store::ListFilter& filter,
                                   const std::function<bool(const SourcedRecord&)>& fn) {
  return quarantine_.each(filter, [&](const store::QuarantineRecord& r) { return fn(sourced(r)); });
}

Expected<std::vector<store::FingerprintStats>> StoreQuarantineSource::stats(const store::ListFilter& filter,
                                                                            std::vector<nlohmann::json>& example_ids) {
  auto groups = quarantine_.stats(filter);
  if (!groups) return Error{groups.error(), groups.error_code()};
  for (const auto& g : *groups) example_ids.emplace_back(g.example_id);
  return groups;
}

Expected<SourcedRecord> StoreQuarantineSource::get(const std::string& id) {
  auto n = parse_record_id(id);
  if (!n) return Error{n.error(), ErrorCode::kUsage};
  auto r = quarantine_.get(*n);
  if (!r) return Error{r.error(), r.error_code()};
  if (!*r) {
    return Error{"no quarantine record " + std::to_string(*n) + " in this store (see: pillbox quarantine list)",
                 ErrorCode::kUsage};
  }
  return sourced(std::move(**r));
}

Expected<nlohmann::json> StoreQuarantineSource::full_json(const SourcedRecord& r) {
  return stored_record_json(quarantine_, r.record, dir_);
}

Expected<PayloadBytes> StoreQuarantineSource::payload(const SourcedRecord& r, std::int64_t revision) {
  std::string sha = r.record.entry.payload_sha256;
  if (revision > 0) {
    auto revisions = store::RevisionStore(db_).list(r.record.id);
    if (!revisions) return Error{revisions.error(), revisions.error_code()};
    sha.clear();
    for (const auto& v : *revisions) {
      if (v.n == revision) sha = v.payload_sha256;
    }
    if (sha.empty()) {
      return Error{"record " + id_text(r) + " has no revision " + std::to_string(revision) + " (quarantine show " +
                       id_text(r) + " lists them; quarantine patch makes them)",
                   ErrorCode::kUsage};
    }
  }
  auto bytes = quarantine_.payloads().get(sha);  // checked against its hash
  if (!bytes) return Error{bytes.error(), bytes.error_code()};
  return PayloadBytes{std::move(*bytes), sha};
}

Expected<std::string> StoreQuarantineSource::payload_head(const SourcedRecord& r, std::size_t max_bytes) {
  // The first bytes only: a payload may be up to 1 GiB, and anyone who
  // reaches the console may ask for it again and again.
  return quarantine_.payloads().head(r.record.entry.payload_sha256, max_bytes);
}

Expected<PayloadBytes> StoreQuarantineSource::minimized_payload(const SourcedRecord& r) {
  const std::string& sha = r.record.minimized_sha256;
  if (sha.empty()) {
    return Error{"record " + id_text(r) + " has no minimized payload (pillbox minimize " + id_text(r) + ")",
                 ErrorCode::kUsage};
  }
  auto bytes = quarantine_.payloads().get(sha);
  if (!bytes) return Error{bytes.error(), bytes.error_code()};
  return PayloadBytes{std::move(*bytes), sha};
}

std::string StoreQuarantineSource::reproduce_command(const SourcedRecord& r) const {
  return "pillbox reproduce " + id_text(r);
}

Status StoreQuarantineSource::check_discardable(const SourcedRecord& r) {
  return pillbox::check_discardable(r.record, id_text(r));
}

Expected<Discarded> StoreQuarantineSource::discard(const SourcedRecord& r, const std::string& actor,
                                                   const std::string& reason) {
  auto done = discard_record(quarantine_, r.record, actor, reason);
  if (!done) return Error{done.error(), done.error_code()};
  return Discarded{*done == DiscardOutcome::kAlreadyDiscarded, std::string(to_string(r.record.status))};
}

}  // namespace pillbox
