#include "supervisor/store/payload_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "shared/regular_file_read.h"
#include "shared/sha256.h"
#include "shared/task_input.h"
#include "supervisor/io/private_file.h"
#include "supervisor/io/regular_file.h"

namespace pillbox::store {
namespace {

Status make_private_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) {
    return Status::error("store: cannot create " + path + ": " + std::strerror(errno));
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::error("store: " + path + " is not a directory");
  }
  return Status::ok();
}

}  // namespace

Expected<PayloadStore> PayloadStore::open(Database& db, const std::string& store_dir) {
  PayloadStore ps(db, store_dir);
  const Status prepared = prepare_all(db.handle(), {
      {&ps.exists_, "SELECT 1 FROM payloads WHERE sha256 = ?1"},
      {&ps.insert_,
       "INSERT INTO payloads (sha256, size, data, created_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (sha256) DO NOTHING"},
  });
  if (!prepared) return Error{prepared.message()};
  return ps;
}

std::string PayloadStore::file_path(const std::string& sha256) const {
  return dir_ + "/payloads/" + sha256.substr(0, 2) + "/" + sha256;
}

Expected<std::string> PayloadStore::put(std::string_view bytes, std::int64_t now_ms) {
  const std::string sha = sha256_hex(bytes);
  if (auto s = put(bytes, sha, now_ms); !s) return Error{s.message()};
  return sha;
}

Status PayloadStore::put(std::string_view bytes, const std::string& sha256, std::int64_t now_ms) {
  auto found = exists_.bind(1, std::string_view(sha256)).step();
  if (!found) return Status::error(found.error());
  exists_.reset();
  if (*found) return Status::ok();
  const bool inline_bytes = bytes.size() <= kInlinePayloadBytes;
  if (!inline_bytes) {
    if (auto s = write_file(bytes, sha256); !s) return s;
  }
  insert_.bind(1, std::string_view(sha256)).bind(2, static_cast<std::int64_t>(bytes.size())).bind(4, now_ms);
  if (inline_bytes) insert_.bind_blob(3, bytes);
  else insert_.bind_null(3);
  return insert_.run();
}

Status PayloadStore::write_file(std::string_view bytes, const std::string& sha256) {
  if (auto s = make_private_dir(dir_ + "/payloads"); !s) return s;
  if (auto s = make_private_dir(dir_ + "/payloads/" + sha256.substr(0, 2)); !s) return s;
  const std::string final_path = file_path(sha256);
  if (auto s = write_file_whole(final_path, final_path + ".tmp." + std::to_string(::getpid()), bytes); !s) {
    return Status::error("store: " + s.message());
  }
  return Status::ok();
}

Expected<std::string> PayloadStore::get(const std::string& sha256) {
  auto found = find(sha256);
  if (!found) return Error{found.error()};
  return read_checked(*found);
}

Expected<PayloadStore::Found> PayloadStore::find(const std::string& sha256) {
  auto stmt = Statement::prepare(db_->handle(), "SELECT data FROM payloads WHERE sha256 = ?1");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, std::string_view(sha256)).step();
  if (!row) return Error{row.error()};
  if (!*row) return Error{"store: no payload " + sha256};
  Found found{sha256, {}, {}};
  if (!stmt->column_is_null(0)) {
    found.inline_bytes = stmt->column_text(0);
    return found;
  }
  const std::string path = file_path(sha256);
  found.file = open_for_reading_at(AT_FDCWD, path, O_NOFOLLOW);
  if (!found.file.valid()) {
    return Error{"store: cannot read payload " + sha256 + ": cannot read " + path + ": " + std::strerror(errno)};
  }
  return found;
}

Expected<std::string> PayloadStore::read_checked(Found& found) {
  std::string bytes;
  if (found.file.valid()) {
    auto file = read_regular_fd(found.file.get(), kMaxPayloadBytes);
    if (!file) return Error{"store: cannot read payload " + found.sha256 + ": " + file.error()};
    bytes = std::move(*file);
  } else {
    bytes = found.inline_bytes;
  }
  if (sha256_hex(bytes) != found.sha256) {
    return Error{"store: payload " + found.sha256 + " is damaged (its hash does not match)"};
  }
  return bytes;
}

Expected<std::uint64_t> PayloadStore::check_file(const Found& found) {
  const auto failed = [&](const std::string& why) {
    return Error{"store: cannot read payload " + found.sha256 + ": " + why};
  };
  struct stat st {};
  if (::fstat(found.file.get(), &st) != 0) return failed(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return failed("not a regular file");
  Sha256 hash;
  std::string block(64 * 1024, '\0');
  std::uint64_t size = 0;
  while (true) {
    const ssize_t n = ::pread(found.file.get(), block.data(), block.size(), static_cast<off_t>(size));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed(std::strerror(errno));
    if (n == 0) break;
    hash.update(block.data(), static_cast<std::size_t>(n));
    size += static_cast<std::uint64_t>(n);
    if (size > kMaxPayloadBytes) return failed("larger than the 1 GiB limit");
  }
  if (digest_hex(hash.finish()) != found.sha256) return Error{"store: payload " + found.sha256 + " is damaged (its hash does not match)"};
  return size;
}

Expected<std::string> PayloadStore::head(const std::string& sha256, std::size_t max_bytes) {
  auto stmt = Statement::prepare(db_->handle(), "SELECT substr(data, 1, ?2), data IS NULL FROM payloads WHERE sha256 = ?1");
  if (!stmt) return Error{stmt.error()};
  auto row = stmt->bind(1, std::string_view(sha256)).bind(2, static_cast<std::int64_t>(max_bytes)).step();
  if (!row) return Error{row.error()};
  if (!*row) return Error{"store: no payload " + sha256};
  if (stmt->column_int(1) == 0) return stmt->column_text(0);
  const std::string path = file_path(sha256);
  UniqueFd fd = open_for_reading_at(AT_FDCWD, path, O_NOFOLLOW);
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return Error{"store: cannot read payload " + sha256 + ": " + std::strerror(errno)};
  }
  if (!S_ISREG(st.st_mode)) return Error{"store: cannot read payload " + sha256 + ": not a regular file"};
  std::string bytes(max_bytes, '\0');
  std::size_t got = 0;
  while (got < max_bytes) {
    const ssize_t n = ::read(fd.get(), bytes.data() + got, max_bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error{"store: cannot read payload " + sha256 + ": " + std::strerror(errno)};
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

Expected<std::vector<std::string>> PayloadStore::remove_unreferenced(std::size_t& rows) {
  // Two statements, not DELETE ... RETURNING: SQLite 3.40 evaluates
  // "data IS NULL" wrongly in a RETURNING clause on this table, and the
  // files of large payloads would stay behind.
  const char* kUnreferenced =
      "sha256 NOT IN (SELECT payload_sha256 FROM quarantine) AND "
      "sha256 NOT IN (SELECT minimized_sha256 FROM quarantine WHERE minimized_sha256 IS NOT NULL) AND "
      "sha256 NOT IN (SELECT best_sha256 FROM minimize_state) AND "
      "sha256 NOT IN (SELECT payload_sha256 FROM revisions)";
  auto select = Statement::prepare(db_->handle(), std::string("SELECT sha256, typeof(data) = 'null' FROM payloads WHERE ") +
                                                      kUnreferenced);
  if (!select) return Error{select.error()};
  std::vector<std::string> files;
  const Status read = select->each_row([&] {
    if (select->column_int(1) != 0) files.push_back(file_path(select->column_text(0)));
  });
  if (!read) return Error{read.message()};
  if (auto s = db_->exec(std::string("DELETE FROM payloads WHERE ") + kUnreferenced); !s) return Error{s.message()};
  rows = static_cast<std::size_t>(::sqlite3_changes(db_->handle()));
  return files;
}

}  // namespace pillbox::store
