#include "supervisor/serve/console_download.h"

#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/ops/record_bundle.h"
#include "supervisor/serve/record_archive.h"

namespace pillbox::serve {
namespace {

PendingDownload refused(ApiReply error) {
  PendingDownload p;
  p.error = std::move(error);
  return p;
}

// The payload of record `r`: its row, and its file open.
PendingDownload payload_of(ConsoleStore& s, const store::QuarantineRecord& r, const char* suffix) {
  auto payload = s.quarantine.payloads().find(r.entry.payload_sha256);
  if (!payload) return refused({500, {{"error", payload.error()}}});
  PendingDownload p;
  p.file_name = "record-" + std::to_string(r.id) + suffix;
  p.payload = std::move(*payload);
  return p;
}

}  // namespace

PendingDownload find_payload_download(ConsoleStore& s, const std::string& id_text) {
  auto found = find_record(s, id_text);
  if (!found.record) return refused(std::move(found.error));
  return payload_of(s, *found.record, ".payload");
}

PendingDownload find_bundle_download(ConsoleStore& s, const std::string& id_text) {
  auto found = find_record(s, id_text);
  if (!found.record) return refused(std::move(found.error));
  PendingDownload p = payload_of(s, *found.record, ".tar.gz");
  if (p.error.status != 200) return p;
  // The record.json of `quarantine export ID --bundle` (quarantine_show.cpp).
  auto full = stored_record_json(s.quarantine, *found.record, s.dir);
  if (!full) return refused({500, {{"error", full.error()}}});
  p.bundle = true;
  p.record = std::move(found.record);
  p.full = std::move(*full);
  return p;
}

PayloadReply finish_download(PendingDownload& p) {
  if (p.error.status != 200) return {p.error, {}, {}};
  auto bytes = store::PayloadStore::read_checked(*p.payload);
  if (!bytes) return {{500, {{"error", bytes.error()}}}, {}, {}};
  if (!p.bundle) return {{}, std::move(*bytes), p.file_name};
  const std::string id = std::to_string(p.record->id);
  auto archive = bundle_tar_gz("record-" + id, record_bundle_files(id, *p.record, p.full, std::move(*bytes)),
                               p.record->updated_at / 1000);
  if (!archive) return {{500, {{"error", archive.error()}}}, {}, {}};
  return {{}, std::move(*archive), p.file_name};
}

}  // namespace pillbox::serve
