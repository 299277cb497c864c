#pragma once
// The console's downloads: a record's payload (GET /api/records/ID/payload)
// and its bundle (GET /api/records/ID/bundle, the files of `quarantine
// export ID --bundle` as record-ID.tar.gz: supervisor/ops/record_bundle.h,
// record_archive.h). Each is found under the store's lock (find_*: the
// record, its JSON, its payload's row and open file) and read after it
// (finish_download: up to 1 GiB read and checked against its hash, the
// archive compressed), so that a large download never holds every other
// request of the console behind the lock.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "supervisor/serve/console_api.h"
#include "supervisor/store/payload_store.h"

namespace pillbox::serve {

struct PendingDownload {
  ApiReply error;  // status 200: found
  std::string file_name;  // "record-ID.payload", "record-ID.tar.gz": names that cannot be paths
  std::optional<store::PayloadStore::Found> payload;
  // A bundle's: the record and its `show --json` object (bundle: true).
  bool bundle = false;
  std::optional<store::QuarantineRecord> record;
  nlohmann::json full;
};

// Under the store's lock.
PendingDownload find_payload_download(ConsoleStore& store, const std::string& id_text);
PendingDownload find_bundle_download(ConsoleStore& store, const std::string& id_text);

// Without the store: the bytes to send (the payload checked against its
// hash; the bundle's .tar.gz), or an error reply (500: damaged or unreadable).
PayloadReply finish_download(PendingDownload& pending);

}  // namespace pillbox::serve
