#include "supervisor/fuzz/inflight_journal.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "shared/control.h"
#include "shared/task_input.h"
#include "supervisor/io/private_file.h"

namespace pillbox::fuzz {
namespace {

namespace fs = std::filesystem;

// File names in a session's directory:
//   session               its identity; the session holds a flock on it
//   new-<N>               candidate N being written (renamed to run-<N> when
//                         whole, so that a session killed while writing one
//                         leaves no half file; it had not started)
//   run-<N>               candidate N of the session, running
//   orphan-<L>-<K>        a recovered candidate, not run yet; L solo losses
//   alone-<L>-<K>         a recovered candidate running alone
constexpr const char* kSessionFile = "session";
// Any payload (a seed may be as large as a run's payload) plus its header.
constexpr std::uint64_t kMaxCandidateFile = std::uint64_t{kMaxPayloadBytes} + (1 << 20);
// Generations and loss counts beyond these are not from a session of ours.
constexpr std::uint64_t kMaxGeneration = 1'000'000'000;

std::string errno_text() { return std::strerror(errno); }

std::string encode(const JournalOrigin& o, const std::string& bytes) {
  const nlohmann::json header = {{"seed", o.seed},
                                 {"seed_sha256", o.seed_sha256},
                                 {"generation", o.generation},
                                 {"mutations", o.mutations}};
  return header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" + bytes;
}

// The header line and the payload after it; nullopt when it is not one.
std::optional<std::pair<JournalOrigin, std::string>> decode(const std::string& file) {
  const auto newline = file.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  const auto header = nlohmann::json::parse(file.substr(0, newline), nullptr, false);
  if (!header.is_object()) return std::nullopt;
  JournalOrigin o;
  try {
    o.seed = header.at("seed").get<std::string>();
    o.seed_sha256 = header.at("seed_sha256").get<std::string>();
    const auto& generation = header.at("generation");
    if (!generation.is_number_unsigned() || generation.get<std::uint64_t>() > kMaxGeneration) return std::nullopt;
    o.generation = generation.get<std::uint32_t>();
    o.mutations = header.at("mutations").get<std::string>();
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
  return std::make_pair(std::move(o), file.substr(newline + 1));
}

// "orphan-2-7" -> 2 with prefix "orphan-"; nullopt for other names.
std::optional<std::uint32_t> losses_in(const std::string& name, std::string_view prefix) {
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const std::string rest = name.substr(prefix.size());
  const auto dash = rest.find('-');
  if (dash == 0 || dash == std::string::npos || rest.find_first_not_of("0123456789") != dash) return std::nullopt;
  if (dash > 9) return std::nullopt;
  return static_cast<std::uint32_t>(std::stoul(rest.substr(0, dash)));
}

bool is_candidate_file(const std::string& name) {
  return name.rfind("run-", 0) == 0 || losses_in(name, "orphan-") || losses_in(name, "alone-");
}

// Run order: by the number after the last '-' (run-9 before run-10).
bool in_run_order(const fs::path& a, const fs::path& b) {
  auto number = [](const fs::path& p) {
    const std::string name = p.filename().string();
    const std::string digits = name.substr(name.rfind('-') + 1);
    return std::make_pair(digits.size(), digits);
  };
  return number(a) < number(b);
}

// Removes what is left in a gone session's directory (its `session` file,
// partial writes, anything not a candidate) and the directory itself.
void remove_session_dir(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> left;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) left.push_back(it->path());
  for (const auto& path : left) {
    std::error_code remove_ec;
    fs::remove_all(path, remove_ec);
  }
  ::rmdir(dir.c_str());
}

}  // namespace

Expected<InFlightJournal> InFlightJournal::open(const std::string& root, const std::string& identity) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Error{"cannot create " + root + ": " + ec.message()};
  std::random_device random;
  char name[64];
  std::snprintf(name, sizeof name, "%d-%08x", static_cast<int>(::getpid()), static_cast<unsigned>(random()));
  const std::string dir = root + "/" + name;
  if (::mkdir(dir.c_str(), 0700) != 0) return Error{"cannot create " + dir + ": " + errno_text()};
  // The session file is written and locked under another name, then renamed
  // into place: a session file another process can open is always whole and
  // locked by its session while that lives.
  const std::string partial = dir + "/session-new";
  const std::string session = dir + "/" + kSessionFile;
  const int fd = ::open(partial.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  auto give_up = [&](const std::string& message) -> Expected<InFlightJournal> {
    if (fd >= 0) ::close(fd);
    ::unlink(partial.c_str());
    ::unlink(session.c_str());
    ::rmdir(dir.c_str());
    return Error{message};
  };
  if (fd < 0 || ::flock(fd, LOCK_EX | LOCK_NB) != 0) return give_up("cannot lock " + partial + ": " + errno_text());
  if (auto s = write_all(fd, identity); !s) return give_up("cannot write " + partial + ": " + s.message());
  if (::rename(partial.c_str(), session.c_str()) != 0) return give_up("cannot rename " + partial + ": " + errno_text());
  return InFlightJournal(root, dir, identity, fd);
}

InFlightJournal::InFlightJournal(InFlightJournal&& other) noexcept
    : root_(std::move(other.root_)),
      dir_(std::move(other.dir_)),
      identity_(std::move(other.identity_)),
      lock_fd_(std::exchange(other.lock_fd_, -1)),
      recovered_(other.recovered_) {}

InFlightJournal::~InFlightJournal() {
  if (lock_fd_ < 0) return;
  // Recovered candidates this session did not get to run stay, for the
  // next session; one stopped while running alone did not kill us: no loss.
  bool keep = false;
  std::error_code ec;
  std::vector<fs::path> entries;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) entries.push_back(it->path());
  for (const auto& path : entries) {
    const std::string name = path.filename().string();
    if (auto losses = losses_in(name, "alone-")) {
      const std::string rest = name.substr(std::string("alone-").size());
      fs::rename(path, path.parent_path() / ("orphan-" + rest), ec);
      keep = true;
    } else if (losses_in(name, "orphan-")) {
      keep = true;
    } else if (name != kSessionFile) {
      ::unlink(path.c_str());  // run-N: told, or killed by a stop signal
    }
  }
  if (!keep) {
    ::unlink((dir_ + "/" + kSessionFile).c_str());
    ::rmdir(dir_.c_str());
  }
  ::close(lock_fd_);  // releases the lock: a kept directory is the next session's to recover
}

Expected<std::vector<RecoveredCandidate>> InFlightJournal::recover(std::size_t& other_identity) {
  other_identity = 0;
  std::vector<RecoveredCandidate> out;
  std::error_code ec;
  std::vector<fs::path> sessions;
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec) && it->path().string() != dir_) sessions.push_back(it->path());
  }
  if (ec) return Error{"cannot read " + root_ + ": " + ec.message()};
  std::sort(sessions.begin(), sessions.end());
  for (const auto& session_dir : sessions) {
    const std::string session = (session_dir / kSessionFile).string();
    const int fd = ::open(session.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) continue;  // being created, or not ours
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);  // alive
      continue;
    }
    auto identity = read_private_file(session, 1 << 20);
    std::vector<fs::path> files;
    std::error_code list_ec;
    for (fs::directory_iterator it(session_dir, list_ec), end; !list_ec && it != end; it.increment(list_ec)) {
      if (is_candidate_file(it->path().filename().string())) files.push_back(it->path());
    }
    if (list_ec) {
      ::close(fd);  // cannot tell what is in it: left for a later session
      continue;
    }
    std::sort(files.begin(), files.end(), in_run_order);
    if (files.empty()) {
      remove_session_dir(session_dir);  // nothing to recover, whoever it was
      ::close(fd);
      continue;
    }
    if (!identity || *identity != identity_) {
      other_identity += files.size();
      ::close(fd);
      continue;
    }
    bool all_moved = true;
    for (const auto& path : files) {
      const std::string name = path.filename().string();
      std::uint32_t losses = 0;
      if (auto l = losses_in(name, "orphan-")) losses = *l;
      if (auto l = losses_in(name, "alone-")) losses = *l + 1;  // it ran alone when that session died
      losses = std::min(losses, kMaxSoloLosses);
      auto bytes = read_private_file(path.string(), kMaxCandidateFile);
      if (!bytes) {
        all_moved = false;  // cannot be read now: left for a later session
        continue;
      }
      auto decoded = decode(*bytes);
      if (!decoded) {
        // Whole files are renamed into place, so only a power cut (no fsync)
        // can leave one that does not decode: nothing in it can be run.
        ::unlink(path.c_str());
        continue;
      }
      RecoveredCandidate c;
      c.file = dir_ + "/orphan-" + std::to_string(losses) + "-" + std::to_string(++recovered_);
      if (::rename(path.c_str(), c.file.c_str()) != 0) {
        all_moved = false;
        continue;
      }
      c.origin = std::move(decoded->first);
      c.bytes = std::move(decoded->second);
      c.solo_losses = losses;
      c.from_session = session_dir.filename().string();
      out.push_back(std::move(c));
    }
    if (all_moved) remove_session_dir(session_dir);
    ::close(fd);
  }
  return out;
}

Status InFlightJournal::add(std::uint64_t run, const JournalOrigin& origin, const std::string& bytes) {
  return write_file_whole(dir_ + "/run-" + std::to_string(run), dir_ + "/new-" + std::to_string(run),
                          encode(origin, bytes));
}

void InFlightJournal::remove(std::uint64_t run) { ::unlink((dir_ + "/run-" + std::to_string(run)).c_str()); }

Expected<std::string> InFlightJournal::mark_running_alone(const RecoveredCandidate& c) {
  const std::string name = fs::path(c.file).filename().string();
  const std::string alone = dir_ + "/alone-" + name.substr(std::string("orphan-").size());
  if (::rename(c.file.c_str(), alone.c_str()) != 0) return Error{"cannot rename " + c.file + ": " + errno_text()};
  return alone;
}

void InFlightJournal::remove_file(const std::string& file) { ::unlink(file.c_str()); }

void InFlightJournal::keep(std::uint64_t run) {
  const std::string from = dir_ + "/run-" + std::to_string(run);
  const std::string to = dir_ + "/orphan-0-" + std::to_string(++recovered_);
  ::rename(from.c_str(), to.c_str());
}

void InFlightJournal::unmark_running_alone(const std::string& file) {
  const fs::path path(file);
  const std::string name = path.filename().string();
  if (name.rfind("alone-", 0) != 0) return;
  ::rename(file.c_str(), (path.parent_path() / ("orphan-" + name.substr(6))).c_str());
}

}  // namespace pillbox::fuzz
