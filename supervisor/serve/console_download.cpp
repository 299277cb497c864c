#include "supervisor/serve/console_download.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "supervisor/ops/record_bundle.h"
#include "supervisor/serve/record_archive.h"

namespace pillbox::serve {

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
