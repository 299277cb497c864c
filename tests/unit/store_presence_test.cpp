// StorePresence: whether the database file pillbox serve opened is still
// the one at its path (moved away, put back, replaced by a copy).
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "supervisor/serve/store_presence.h"
#include "tests/unit/scratch_dir.h"

using pillbox::serve::StorePresence;

TEST_CASE("store presence: the file opened, moved away, put back, replaced") {
  pillbox::test::ScratchDir scratch("store-presence");
  const std::string db = scratch.write("pillbox.db", "database");
  // Held open, as serve's SQLite connection holds it: its inode is not
  // reused by a file made in its place.
  const int open_db = ::open(db.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(open_db >= 0);
  const StorePresence presence(scratch.path);
  CHECK_FALSE(presence.problem().has_value());
  const std::string away = scratch.path + "/away";
  REQUIRE(std::rename(db.c_str(), away.c_str()) == 0);
  REQUIRE(presence.problem().has_value());
  CHECK(presence.problem()->find("is gone") != std::string::npos);
  CHECK(presence.problem()->find(db) != std::string::npos);
  REQUIRE(std::rename(away.c_str(), db.c_str()) == 0);
  CHECK_FALSE(presence.problem().has_value());
  scratch.write("pillbox.db", "database");  // a new file with the same bytes
  REQUIRE(presence.problem().has_value());
  CHECK(presence.problem()->find("was replaced") != std::string::npos);
  // A store without its database when serve started: never "the same".
  pillbox::test::ScratchDir empty("store-presence-empty");
  CHECK(StorePresence(empty.path).problem().has_value());
  ::close(open_db);
}
