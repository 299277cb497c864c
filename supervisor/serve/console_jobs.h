#pragma once
// The console's actions that run (reproduce, minimize, replay; see
// docs/console.md, Actions that run): each a job, the pillbox CLI itself run
// as a child process (`pillbox reproduce ID --runs N --json --quiet --store
// DIR`), never inside serve: a job runs for minutes, starts sandboxes and
// handles its own stop signals, and its crash cannot take the console down.
// Its result is the verb's own --json, so the API says what the CLI says.
//
// The child gets PILLBOX_ACTOR (supervisor/store/actor.h),
// PILLBOX_PROGRESS_FD=3 (supervisor/cli/progress.h) and the source's
// secrets (a broker's password: never on a command line, which the job's
// JSON shows and any local user reads in /proc); one thread a job reads
// its output and reaps it. SIGTERM stops a verb cleanly: stop() sends it,
// and PR_SET_PDEATHSIG does when serve is killed. Jobs live in memory only:
// what they did is in the store's audit trail.
//
// Thread safety: every public member may be called from any thread.
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "supervisor/serve/console_api.h"

namespace pillbox::serve {

enum class JobKind { kReproduce, kMinimize, kReplay };

inline constexpr std::size_t kMaxRunningJobs = 2;
inline constexpr std::size_t kKeptJobs = 100;  // finished jobs kept, newest
inline constexpr std::size_t kMaxJobResultBytes = 1u << 20;
inline constexpr std::size_t kJobStderrTailBytes = 16u << 10;

// What to run: the verb's arguments (the program and the store's arguments
// are the board's), who asked, and the records it works on (one for
// reproduce and minimize: two of those never run on one record at once).
struct JobRequest {
  JobKind kind = JobKind::kReproduce;
  std::vector<std::string> args;  // e.g. {"reproduce", "7", "--runs", "5", "--json", "--quiet"}
  std::string actor;              // "web: 127.0.0.1"
  std::vector<std::string> records;  // ids as the CLI takes them (a number, or a fleet's entry id)
};

class JobBoard {
 public:
  // `program`: the pillbox binary (self_program()); `source_args`: where
  // the records are, appended to every command ({"--store", DIR});
  // `source_env`: what every command gets in its environment beside them
  // and is never shown (ConsoleSource::cli_source_env).
  using Environment = std::vector<std::pair<std::string, std::string>>;
  JobBoard(std::string program, std::vector<std::string> source_args, Environment source_env = {},
           std::chrono::milliseconds stop_grace = std::chrono::seconds(60));
  // stop_all(): no job outlives the board.
  ~JobBoard();
  JobBoard(const JobBoard&) = delete;
  JobBoard& operator=(const JobBoard&) = delete;

  // 202 {"job": JOB}; 429 when kMaxRunningJobs run; 409 when a job on one
  // of its records runs (but for two replays: their claims keep them apart).
  ApiReply start(JobRequest request);
  // {"jobs": [JOB without result and stderr_tail]}, newest first.
  ApiReply list() const;
  // {"job": JOB}; 404 for an id that is not a job (or one no longer kept).
  ApiReply show(const std::string& id_text) const;
  // SIGTERM to a running job: 202 {"job": JOB}; 409 when it has ended.
  ApiReply stop(const std::string& id_text);
  // SIGTERM to every running job, then waits for them (SIGKILL after the
  // grace period); later starts are refused (503).
  void stop_all();

  // /proc/self/exe, resolved (a binary replaced on disk since is still the
  // one that runs), or "" when it cannot be read.
  static std::string self_program();

 private:
  struct Job;
  void run(const std::shared_ptr<Job>& job);
  nlohmann::json to_json(const Job& job, bool whole) const;
  std::shared_ptr<Job> find(const std::string& id_text) const;
  std::size_t running() const;

  const std::string program_;
  const std::vector<std::string> source_args_;
  const Environment source_env_;
  const std::chrono::milliseconds stop_grace_;
  mutable std::mutex lock_;
  std::condition_variable ended_;  // a job ended
  std::deque<std::shared_ptr<Job>> jobs_;  // oldest first
  std::int64_t last_id_ = 0;
  bool closing_ = false;
};

}  // namespace pillbox::serve
