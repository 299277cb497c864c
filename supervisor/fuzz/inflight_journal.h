#pragma once
// The candidates a fuzz session is running, one file each under
// <store>/fuzz-inflight/<session>/, so that the candidate that killed
// pillbox leaves a trace and the next session (same handler and policy)
// runs them first. See docs/fuzzing.md, Candidates running when a session
// dies.
// A session flocks its `session` file; a free lock means a gone session.
// No fsync: files outlive the process, not a power loss. A recovered
// candidate that was running alone when a session died counts a loss; after
// kMaxSoloLosses it is recorded as supervisor-lost instead of run.
#include <cstdint>
#include <string>
#include <vector>

#include "shared/status.h"

namespace pillbox::fuzz {

inline constexpr std::uint32_t kMaxSoloLosses = 2;

// What a candidate file holds besides the payload: where it came from.
struct JournalOrigin {
  std::string seed;
  std::string seed_sha256;
  std::uint32_t generation = 0;
  std::string mutations;
};

// A candidate left by a session that is gone, now in this session's journal.
struct RecoveredCandidate {
  std::string file;              // its file in this session's journal
  std::string bytes;
  JournalOrigin origin;
  std::uint32_t solo_losses = 0; // sessions that died while it ran alone
  std::string from_session;      // the directory name of the session that died
};

class InFlightJournal {
 public:
  // Creates this session's directory under `root` (created if missing) and
  // locks it. `identity` names what the candidates run under (handler and
  // policy identities): only a session with the same identity recovers them.
  static Expected<InFlightJournal> open(const std::string& root, const std::string& identity);

  InFlightJournal(InFlightJournal&& other) noexcept;
  InFlightJournal& operator=(InFlightJournal&&) = delete;
  InFlightJournal(const InFlightJournal&) = delete;
  // Removes the directory: the session ended, whatever was in flight was told.
  ~InFlightJournal();

  // Moves the candidates of every gone session with this identity into this
  // journal and returns them (sessions in name order, candidates in run
  // order). Other identities' are left; `other_identity` counts them. An
  // unreadable file is left for a later session; an empty gone session's
  // directory is removed.
  Expected<std::vector<RecoveredCandidate>> recover(std::size_t& other_identity);

  // Candidate `run` is about to run: writes it. Errors: the file cannot be written.
  Status add(std::uint64_t run, const JournalOrigin& origin, const std::string& bytes);
  // Candidate `run` has an outcome: removes its file.
  void remove(std::uint64_t run);
  // Candidate `run` has an outcome that could not be recorded (the store
  // failed): kept for the next session, as a recovered candidate would be.
  void keep(std::uint64_t run);

  // A recovered candidate is about to run alone: its file is renamed so that
  // if this session dies too, the next one counts the loss. Returns the new name.
  Expected<std::string> mark_running_alone(const RecoveredCandidate& c);
  // A recovered candidate has an outcome (or was recorded): removes its file.
  void remove_file(const std::string& file);
  // A recovered candidate's outcome could not be recorded: back to waiting,
  // with no loss counted (this session did not die).
  void unmark_running_alone(const std::string& file);

  const std::string& dir() const { return dir_; }

 private:
  InFlightJournal(std::string root, std::string dir, std::string identity, int lock_fd)
      : root_(std::move(root)), dir_(std::move(dir)), identity_(std::move(identity)), lock_fd_(lock_fd) {}

  std::string root_;
  std::string dir_;
  std::string identity_;
  int lock_fd_ = -1;
  std::uint64_t recovered_ = 0;  // numbers the recovered files
};

}  // namespace pillbox::fuzz
