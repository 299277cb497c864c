#pragma once
// The console's downloads: a record's payload (GET /api/records/ID/payload)
// and its bundle (/bundle: `quarantine export ID --bundle` as
// record-ID.tar.gz, record_archive.h). Each is found under the console's
// lock (ConsoleSource::find_download) and read after it (finish_download),
// so a large download never holds the console's other requests behind the
// lock. A payload in a file is sent from the file, never held whole; a
// bundle is built in memory.
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "shared/unique_fd.h"
#include "supervisor/serve/console_api.h"
#include "supervisor/store/payload_store.h"

namespace pillbox::serve {

struct PendingDownload {
  ApiReply error;  // status 200: found
  std::string id;         // the record's id as the CLI prints it (a number, or a fleet's entry id)
  std::string file_name;  // "record-ID.payload", "record-ID.tar.gz": names that cannot be paths
  // The payload: a store's row and open file, to be read and checked after
  // the lock; or bytes already read and checked (a fleet's dead letter).
  std::optional<store::PayloadStore::Found> payload;
  std::optional<std::string> bytes;
  // A bundle's: the record and its `show --json` object (bundle: true).
  bool bundle = false;
  std::optional<store::QuarantineRecord> record;
  nlohmann::json full;
};

// The largest payload a bundle is built for here: a bundle is built in
// memory (about 3 times its payload at its peak), one at a time
// (console_server.cpp). Larger: `pillbox quarantine export ID --bundle`.
inline constexpr std::int64_t kMaxBundlePayloadBytes = std::int64_t{64} << 20;

// What to send: the bytes (an inline payload, the bundle's .tar.gz), or a
// payload's file, to be sent from it as it is read (send_file_range).
struct DownloadReply {
  ApiReply error;  // status 200: no error
  std::string file_name;
  std::string bytes;
  std::shared_ptr<const UniqueFd> file;  // set: send `size` bytes of it
  std::uint64_t size = 0;
};

// Without the lock: the payload checked against its hash (a file read
// through once, never held whole), the bundle packed; or an error reply
// (500 damaged or unreadable, 413 a bundle over kMaxBundlePayloadBytes).
DownloadReply finish_download(PendingDownload& pending);

// Up to `length` bytes of `file` from `offset` (at most 64 KiB a call), as
// cpp-httplib's content provider asks for them; false when it cannot be
// read (the answer is then cut short and its connection closed).
bool send_file_range(const UniqueFd& file, std::uint64_t offset, std::uint64_t length,
                     const std::function<bool(const char*, std::size_t)>& write);

}  // namespace pillbox::serve
