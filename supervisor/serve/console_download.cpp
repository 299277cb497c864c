#include "supervisor/serve/console_download.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

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
  p.id = std::to_string(r.id);
  p.file_name = "record-" + p.id + suffix;
  p.payload = std::move(*payload);
  return p;
}

}  // namespace

PendingDownload find_payload_download(ConsoleStore& s, const store::QuarantineRecord& record) {
  return payload_of(s, record, ".payload");
}

PendingDownload find_bundle_download(ConsoleStore& s, const store::QuarantineRecord& record) {
  PendingDownload p = payload_of(s, record, ".tar.gz");
  if (p.error.status != 200) return p;
  // The record.json of `quarantine export ID --bundle` (quarantine_records.cpp).
  auto full = stored_record_json(s.quarantine, record, s.dir);
  if (!full) return refused({500, {{"error", full.error()}}});
  p.bundle = true;
  p.record = record;
  p.full = std::move(*full);
  return p;
}

DownloadReply finish_download(PendingDownload& p) {
  DownloadReply reply;
  reply.file_name = p.file_name;
  if (p.error.status != 200) {
    reply.error = p.error;
    return reply;
  }
  if (!p.bundle && p.payload && p.payload->file.valid()) {
    auto size = store::PayloadStore::check_file(*p.payload);
    if (!size) return {{500, {{"error", size.error()}}}, {}, {}, {}, 0};
    reply.size = *size;
    reply.file = std::make_shared<const UniqueFd>(std::move(p.payload->file));
    return reply;
  }
  if (p.bundle && p.record->entry.payload_size > kMaxBundlePayloadBytes) {
    return {{413,
             {{"error", "the payload is " + std::to_string(p.record->entry.payload_size) +
                            " bytes, over the console's bundle limit of 64 MiB; use pillbox quarantine export " + p.id +
                            " --bundle -o DIR"}}},
            {}, {}, {}, 0};
  }
  auto bytes = p.bytes ? Expected<std::string>(std::move(*p.bytes)) : store::PayloadStore::read_checked(*p.payload);
  if (!bytes) return {{500, {{"error", bytes.error()}}}, {}, {}, {}, 0};
  if (!p.bundle) {
    reply.bytes = std::move(*bytes);
    return reply;
  }
  auto archive = bundle_tar_gz("record-" + p.id, record_bundle_files(p.id, *p.record, p.full, std::move(*bytes)),
                               p.record->updated_at / 1000);
  if (!archive) return {{500, {{"error", archive.error()}}}, {}, {}, {}, 0};
  reply.bytes = std::move(*archive);
  return reply;
}

bool send_file_range(const UniqueFd& file, std::uint64_t offset, std::uint64_t length,
                     const std::function<bool(const char*, std::size_t)>& write) {
  char block[64 * 1024];
  const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(length, sizeof block));
  ssize_t n;
  do {
    n = ::pread(file.get(), block, want, static_cast<off_t>(offset));
  } while (n < 0 && errno == EINTR);
  return n > 0 && write(block, static_cast<std::size_t>(n));
}

}  // namespace pillbox::serve
