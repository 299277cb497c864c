#pragma once
// Content-addressed payloads of quarantine records, deduplicated by SHA-256.
// Up to kInlinePayloadBytes they live in the database; larger ones in
// <store>/payloads/XX/<sha256> (0600), written and renamed into place before
// the row that names them commits, so a committed row never points at a
// missing or partial file. A file left by a process killed before its commit
// is harmless: the same bytes have the same name.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"
#include "shared/unique_fd.h"
#include "supervisor/store/database.h"
#include "supervisor/store/statement.h"

namespace pillbox::store {

inline constexpr std::size_t kInlinePayloadBytes = 64 * 1024;

class PayloadStore {
 public:
  static Expected<PayloadStore> open(Database& db, const std::string& store_dir);

  // Stores `bytes` (once per hash) inside the caller's transaction; returns the hex SHA-256.
  Expected<std::string> put(std::string_view bytes, std::int64_t now_ms);
  // Stores bytes whose hash the caller already computed.
  Status put(std::string_view bytes, const std::string& sha256, std::int64_t now_ms);
  // The exact bytes, checked against their hash.
  Expected<std::string> get(const std::string& sha256);
  // A payload found in the database, to be read without it (read_checked):
  // its bytes when they are inline (at most kInlinePayloadBytes), else its
  // file, open. Payload files are content-addressed and never rewritten, and
  // a purge unlinks the name, not the open file: so `pillbox serve` finds a
  // payload under its store's lock and reads up to 1 GiB after releasing it.
  struct Found {
    std::string sha256;
    std::string inline_bytes;
    UniqueFd file;  // valid: the payload is in this file
  };
  Expected<Found> find(const std::string& sha256);
  // The exact bytes of a found payload, checked against their hash.
  static Expected<std::string> read_checked(Found& found);
  // A found payload in a file checked against its hash without holding it:
  // read through once, 64 KiB at a time. Its size, for a reader that sends
  // it from the file next (pread: the descriptor's offset is not used).
  // REQUIRES: found.file is valid.
  static Expected<std::uint64_t> check_file(const Found& found);
  // At most the first `max_bytes`, read without the rest (a payload may be
  // up to 1 GiB) and so NOT checked against the hash: for a preview, never
  // for a payload that runs or leaves the store.
  Expected<std::string> head(const std::string& sha256, std::size_t max_bytes);
  // Deletes the rows of payloads no quarantine record refers to, inside the
  // caller's transaction, and returns the files to unlink once it commits
  // (unlinking first could leave a committed row without its file).
  Expected<std::vector<std::string>> remove_unreferenced(std::size_t& rows);

  std::string file_path(const std::string& sha256) const;

 private:
  PayloadStore(Database& db, std::string dir) : db_(&db), dir_(std::move(dir)) {}
  Status write_file(std::string_view bytes, const std::string& sha256);

  Database* db_;
  std::string dir_;
  Statement exists_;
  Statement insert_;
};

}  // namespace pillbox::store
