// The fuzz in-flight journal (supervisor/fuzz/inflight_journal.h): what a
// session that dies leaves, and what the next one recovers. A dying session
// is a real child process that ends with _exit, so its flock is released
// the way the kernel releases it for a SIGKILLed pillbox.
#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/fuzz/inflight_journal.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox::fuzz;

namespace {

struct ScratchRoot {
  pillbox::test::ScratchDir scratch{"inflight-test"};
  std::string root = scratch.path + "/fuzz-inflight";

  std::size_t sessions() const {
    std::size_t n = 0;
    for ([[maybe_unused]] const auto& d : std::filesystem::directory_iterator(root)) ++n;
    return n;
  }

  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& session : std::filesystem::directory_iterator(root)) {
      for (const auto& f : std::filesystem::directory_iterator(session)) {
        out.push_back(session.path().filename().string() + "/" + f.path().filename().string());
      }
    }
    return out;
  }
};

// Runs `body` with a journal in a child process that then dies without
// cleaning up (as SIGKILL would leave it). Exit status 0: body returned true.
void in_a_session_that_dies(const std::string& root, const std::string& identity,
                            const std::function<bool(InFlightJournal&)>& body) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    auto journal = InFlightJournal::open(root, identity);
    bool ok = journal.has_value() && body(*journal);
    ::_exit(ok ? 0 : 1);  // no destructor: the directory stays, the lock goes with the process
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

// A new, live session on `root` under `identity`, and what it recovered.
struct NewSession {
  std::optional<InFlightJournal> journal;
  std::vector<RecoveredCandidate> got;
  std::size_t other_identity = 0;

  NewSession(const std::string& root, const std::string& identity) {
    auto opened = InFlightJournal::open(root, identity);
    REQUIRE_MESSAGE(opened.has_value(), opened.error());
    journal.emplace(std::move(*opened));
    auto recovered = journal->recover(other_identity);
    REQUIRE_MESSAGE(recovered.has_value(), recovered.error());
    got = std::move(*recovered);
  }
  InFlightJournal* operator->() { return &*journal; }
};

}  // namespace

TEST_CASE("inflight journal: a dead session's candidates go to the next session with the same identity") {
  ScratchRoot scratch;
  in_a_session_that_dies(scratch.root, "echo\npolicy\n", [](InFlightJournal& j) {
    return j.add(7, {"input seeds/a", "aa11", 3, "flip-bit | dict-insert"}, std::string("pay\0load\n", 9)).is_ok() &&
           j.add(8, {"input seeds/b", "bb22", 0, ""}, "").is_ok() &&
           j.add(9, {"input seeds/c", "cc33", 1, "x"}, "told").is_ok() && (j.remove(9), true);
  });

  // Another identity sees them and leaves them.
  {
    NewSession other(scratch.root, "regex\npolicy\n");
    CHECK(other.got.empty());
    CHECK(other.other_identity == 2);
  }

  NewSession session(scratch.root, "echo\npolicy\n");
  CHECK(session.other_identity == 0);
  REQUIRE(session.got.size() == 2);
  const RecoveredCandidate& a = session.got[0];
  CHECK(a.bytes == std::string("pay\0load\n", 9));
  CHECK(a.origin.seed == "input seeds/a");
  CHECK(a.origin.seed_sha256 == "aa11");
  CHECK(a.origin.generation == 3);
  CHECK(a.origin.mutations == "flip-bit | dict-insert");
  CHECK(a.solo_losses == 0);
  CHECK(!a.from_session.empty());
  CHECK(session.got[1].bytes.empty());
  CHECK(session.got[1].origin.seed == "input seeds/b");
  // Moved into this session's directory; the dead one is gone.
  for (const auto& c : session.got) CHECK(std::filesystem::exists(c.file));
  CHECK(std::filesystem::path(a.file).parent_path() == session->dir());
  CHECK(scratch.sessions() == 1);

  // A second recovery finds nothing more: this session is alive.
  NewSession again(scratch.root, "echo\npolicy\n");
  CHECK(again.got.empty());
}

TEST_CASE("inflight journal: only a candidate running alone when a session dies counts a loss") {
  ScratchRoot scratch;
  const std::string id = "exec\npolicy\n";
  in_a_session_that_dies(scratch.root, id, [](InFlightJournal& j) {
    return j.add(1, {"input killer", "k", 0, ""}, "KILLER").is_ok() && j.add(2, {"input other", "o", 0, ""}, "other").is_ok();
  });
  // The next session recovers both (no loss yet), runs KILLER alone and dies.
  in_a_session_that_dies(scratch.root, id, [](InFlightJournal& j) {
    std::size_t other = 0;
    auto got = j.recover(other);
    if (!got || got->size() != 2 || (*got)[0].solo_losses != 0) return false;
    for (const auto& c : *got) {
      if (c.bytes == "KILLER") return j.mark_running_alone(c).has_value();
    }
    return false;
  });
  NewSession session(scratch.root, id);
  REQUIRE(session.got.size() == 2);
  for (const auto& c : session.got) CHECK(c.solo_losses == (c.bytes == "KILLER" ? 1u : 0u));
}

TEST_CASE("inflight journal: a clean end removes the directory, but keeps recovered candidates not yet run") {
  ScratchRoot scratch;
  const std::string id = "echo\npolicy\n";
  {
    auto journal = InFlightJournal::open(scratch.root, id);
    REQUIRE(journal.has_value());
    REQUIRE(journal->add(1, {"s", "h", 0, ""}, "x").is_ok());
    journal->remove(1);
    REQUIRE(journal->add(2, {"s", "h", 1, "m"}, "killed by a stop signal").is_ok());
  }
  CHECK(scratch.entries().empty());
  CHECK(std::filesystem::is_empty(scratch.root));

  in_a_session_that_dies(scratch.root, id, [](InFlightJournal& j) { return j.add(1, {"s", "h", 2, "m"}, "left").is_ok(); });
  {
    // Recovers it, starts it alone, and is stopped (SIGINT) before its outcome.
    NewSession stopped(scratch.root, id);
    REQUIRE(stopped.got.size() == 1);
    REQUIRE(stopped->mark_running_alone(stopped.got[0]).has_value());
  }
  // Kept for the next session, and not counted as a loss: this one did not die.
  NewSession session(scratch.root, id);
  REQUIRE(session.got.size() == 1);
  CHECK(session.got[0].bytes == "left");
  CHECK(session.got[0].solo_losses == 0);
}

TEST_CASE("inflight journal: a half-written candidate (killed while writing it) is dropped, and the dead directory goes") {
  ScratchRoot scratch;
  const std::string id = "echo\npolicy\n";
  in_a_session_that_dies(scratch.root, id, [&](InFlightJournal& j) {
    // As a SIGKILL between open and write leaves them: a file being written
    // (new-N), and, as only a power cut could, a whole-named one that does not decode.
    std::FILE* a = std::fopen((j.dir() + "/new-5").c_str(), "w");
    std::FILE* b = std::fopen((j.dir() + "/run-6").c_str(), "w");
    if (a == nullptr || b == nullptr) return false;
    std::fputs("{\"seed\":", b);
    std::fclose(a);
    std::fclose(b);
    return j.add(7, {"s", "h", 0, ""}, "whole").is_ok();
  });
  NewSession session(scratch.root, id);
  REQUIRE(session.got.size() == 1);
  CHECK(session.got[0].bytes == "whole");
  CHECK(scratch.sessions() == 1);  // only this one
}

TEST_CASE("inflight journal: an outcome that could not be recorded is kept; empty gone sessions are removed whoever they were") {
  ScratchRoot scratch;
  const std::string id = "echo\npolicy\n";
  // A gone session under another identity with nothing in flight but a
  // stray file, and one of ours with nothing left: both removed by the next
  // recovery, not left forever.
  in_a_session_that_dies(scratch.root, "other\n", [](InFlightJournal& j) {
    std::FILE* f = std::fopen((j.dir() + "/stray").c_str(), "w");
    if (f == nullptr) return false;
    std::fclose(f);
    return true;
  });
  in_a_session_that_dies(scratch.root, id, [](InFlightJournal& j) { return j.add(1, {"s", "h", 0, ""}, "x").is_ok() && (j.remove(1), true); });
  {
    NewSession session(scratch.root, id);
    CHECK(session.got.empty());
    CHECK(session.other_identity == 0);
    CHECK(scratch.sessions() == 1);  // only this one

    // The store failed while recording run 2's failure: kept for the next session.
    REQUIRE(session->add(2, {"s", "h", 4, "m"}, "unrecorded").is_ok());
    session->keep(2);
    REQUIRE(session->add(3, {"s", "h", 0, ""}, "stopped by SIGINT").is_ok());
  }
  NewSession next(scratch.root, id);
  REQUIRE(next.got.size() == 1);
  CHECK(next.got[0].bytes == "unrecorded");
  CHECK(next.got[0].origin.generation == 4);
  CHECK(next.got[0].solo_losses == 0);
}
