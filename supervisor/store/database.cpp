#include "supervisor/store/database.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <cstring>
#include <utility>

#include "shared/raise_site.h"
#include "shared/unique_fd.h"

namespace pillbox::store {
namespace {

// Long enough for another pillbox's group commit to finish; short enough
// that a stuck one is reported rather than waited on forever.
constexpr int kBusyTimeoutMs = 10'000;

// The switch to WAL needs the file to itself and SQLite does not call the
// busy handler for it: two processes creating one store at once would see
// "database is locked", so retry within the busy timeout. WAL is a property
// of the file: once set, no lock is taken.
Status use_wal(Database& db, sqlite3* raw, const std::string& path) {
  auto mode = db.query_text("PRAGMA journal_mode");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  auto pause = std::chrono::milliseconds(1);
  while (!mode || *mode != "wal") {
    if (!mode && (::sqlite3_errcode(raw) & 0xff) != SQLITE_BUSY && (::sqlite3_errcode(raw) & 0xff) != SQLITE_LOCKED) {
      return Status::error(mode.error());
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      if (!mode) return Status::error(mode.error());
      return Status::error("store database " + path + ": cannot use WAL journaling (still '" + *mode + "')");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
    mode = db.query_text("PRAGMA journal_mode=WAL");
  }
  return Status::ok();
}

// Checks (or creates) the file without ever opening an existing one: closing
// any descriptor of it would drop this process's POSIX locks, SQLite's
// included, and another process could then delete the WAL under a live
// connection (issue 25; docs/architecture.md, The store). The 0700 store
// directory keeps the file from being swapped before SQLite's open.
Status check_database_file(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return Status::error("store database " + path + ": " + std::strerror(errno));
    // Created here so that it is 0600 whatever the umask (-wal and -shm take
    // its mode). A file that did not exist holds no lock to drop.
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (fd.valid()) return Status::ok();
    if (errno != EEXIST) return Status::error("store database " + path + ": " + std::strerror(errno));
    if (::lstat(path.c_str(), &st) != 0) return Status::error("store database " + path + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) return Status::error("store database " + path + " is not a regular file");
  if (st.st_uid != ::geteuid()) {
    return Status::error("store database " + path + " belongs to uid " + std::to_string(st.st_uid) +
                         ", not to this user");
  }
  if ((st.st_mode & 077) != 0 && ::chmod(path.c_str(), 0600) != 0) {
    return Status::error("store database " + path + ": cannot make it 0600: " + std::strerror(errno));
  }
  return Status::ok();
}

// pillbox_raise_site_id(kind, crash_state, handler_identity) in SQL, so that
// --raise-site filters by shared/raise_site.h's rule, the one every view shows.
void raise_site_function(sqlite3_context* ctx, int, sqlite3_value** argv) {
  const auto text = [](sqlite3_value* v) {
    const unsigned char* p = ::sqlite3_value_text(v);  // before _bytes: it may convert
    return p == nullptr ? std::string_view()
                        : std::string_view(reinterpret_cast<const char*>(p), static_cast<std::size_t>(::sqlite3_value_bytes(v)));
  };
  const std::string id = raise_site_id(text(argv[2]), raise_site(text(argv[0]), text(argv[1])));
  ::sqlite3_result_text(ctx, id.data(), static_cast<int>(id.size()), SQLITE_TRANSIENT);
}

}  // namespace

Expected<Database> Database::open(const std::string& path) {
  if (auto s = check_database_file(path); !s) return Error{s.message()};

  sqlite3* raw = nullptr;
  const int rc = ::sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW, nullptr);
  Database db(raw, path);
  if (rc != SQLITE_OK) return Error{db.error("cannot open")};
  ::sqlite3_extended_result_codes(raw, 1);
  ::sqlite3_busy_timeout(raw, kBusyTimeoutMs);
  if (::sqlite3_create_function_v2(raw, "pillbox_raise_site_id", 3, SQLITE_UTF8 | SQLITE_DETERMINISTIC, nullptr,
                                   raise_site_function, nullptr, nullptr, nullptr) != SQLITE_OK) {
    return Error{db.error("cannot add the raise-site function to")};
  }
  // synchronous=NORMAL under WAL survives process crashes, which is what
  // pillbox guards against; only a power cut may lose the last commits.
  if (auto s = use_wal(db, raw, path); !s) return Error{s.message()};
  // cache_size 16 MiB: a large transaction (purge, bulk import) keeps its
  // dirty pages in memory instead of spilling them to the WAL.
  if (auto s = db.exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA cache_size=-16384;"); !s) {
    return Error{s.message()};
  }
  return db;
}

Database::Database(Database&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) ::sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

Database::~Database() {
  if (db_ != nullptr) ::sqlite3_close_v2(db_);
}

std::string Database::error(const std::string& what) const {
  return "store database " + path_ + ": " + what + ": " + (db_ != nullptr ? ::sqlite3_errmsg(db_) : "out of memory");
}

Status Database::exec(const std::string& sql) {
  char* message = nullptr;
  if (::sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &message) != SQLITE_OK) {
    std::string text = message != nullptr ? message : ::sqlite3_errmsg(db_);
    ::sqlite3_free(message);
    return Status::error("store database " + path_ + ": " + text);
  }
  return Status::ok();
}

namespace {

// Runs `sql` and hands its first row to `read`; an error when there is none.
template <typename Read>
auto first_row(sqlite3* db, const std::string& path, const std::string& sql, Read read)
    -> Expected<decltype(read(static_cast<sqlite3_stmt*>(nullptr)))> {
  sqlite3_stmt* stmt = nullptr;
  if (::sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    return Error{"store database " + path + ": " + ::sqlite3_errmsg(db)};
  }
  const int rc = ::sqlite3_step(stmt);
  if (rc != SQLITE_ROW) {
    std::string why = rc == SQLITE_DONE ? "no row from: " + sql : std::string(::sqlite3_errmsg(db));
    ::sqlite3_finalize(stmt);
    return Error{"store database " + path + ": " + why};
  }
  auto value = read(stmt);
  ::sqlite3_finalize(stmt);
  return value;
}

}  // namespace

Expected<std::int64_t> Database::query_int(const std::string& sql) {
  return first_row(db_, path_, sql, [](sqlite3_stmt* s) { return static_cast<std::int64_t>(::sqlite3_column_int64(s, 0)); });
}

Expected<std::string> Database::query_text(const std::string& sql) {
  return first_row(db_, path_, sql, [](sqlite3_stmt* s) {
    const unsigned char* text = ::sqlite3_column_text(s, 0);
    return text != nullptr ? std::string(reinterpret_cast<const char*>(text)) : std::string();
  });
}

}  // namespace pillbox::store
