#pragma once
// Content-addressed payloads of quarantine records, by SHA-256: inline up to
// kInlinePayloadBytes, else in <store>/payloads/XX/<sha256>, renamed into
// place before its row commits, so a committed row never names a missing or
// partial file. A file left by a killed process is harmless: same bytes,
// same name.
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
  // A payload found in the database, readable later without it
  // (read_checked): its inline bytes, else its open file. Files are never
  // rewritten and a purge only unlinks the name, so `pillbox serve` can find
  // a payload under the store's lock and read it after releasing it.
  struct Found {
    std::string sha256;
    std::string inline_bytes;
    UniqueFd file;  // valid: the payload is in this file
  };
  Expected<Found> find(const std::string& sha256);
  // The exact bytes of a found payload, checked against their hash.
  static Expected<std::string> read_checked(Found& found);
  // Checks a found payload's file against its hash, streaming it (pread:
  // the descriptor's offset is left alone); returns its size.
  // REQUIRES: found.file is valid.
  static Expected<std::uint64_t> check_file(const Found& found);
  // At most the first `max_bytes`, NOT checked against the hash: for a
  // preview, never for a payload that runs or leaves the store.
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
