#include "supervisor/serve/console_jobs.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/process.hpp>
#include <boost/process/extend.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>

namespace pillbox::serve {

namespace bp = boost::process;
using nlohmann::json;

namespace {

const char* to_string(JobKind kind) {
  switch (kind) {
    case JobKind::kReproduce: return "reproduce";
    case JobKind::kMinimize: return "minimize";
    case JobKind::kReplay: return "replay";
  }
  return "?";
}

enum class JobState { kRunning, kDone, kFailed, kStopped };

const char* to_string(JobState state) {
  switch (state) {
    case JobState::kRunning: return "running";
    case JobState::kDone: return "done";
    case JobState::kFailed: return "failed";
    case JobState::kStopped: return "stopped";
  }
  return "?";
}

// The child's descriptor for its progress lines (PILLBOX_PROGRESS_FD).
constexpr int kProgressFd = 3;
// A progress line longer than this is dropped (they are ~200 bytes).
constexpr std::size_t kMaxProgressLine = 64u << 10;

// Reads what `fd` has now (it is non-blocking) into `sink`; false at its end.
template <typename Sink>
bool read_available(int fd, Sink&& sink) {
  char block[65536];
  while (true) {
    const ssize_t n = ::read(fd, block, sizeof block);
    if (n > 0) {
      sink(block, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// A pipe whose ends are closed on exec (the child gets its end by dup2).
struct Pipe {
  int read = -1;
  int write = -1;
  bool open() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    read = fds[0];
    write = fds[1];
    ::fcntl(read, F_SETFL, ::fcntl(read, F_GETFL) | O_NONBLOCK);
    return true;
  }
  void close_write() {
    if (write >= 0) ::close(write);
    write = -1;
  }
  ~Pipe() {
    close_write();
    if (read >= 0) ::close(read);
  }
};

}  // namespace

struct JobBoard::Job {
  std::int64_t id = 0;
  JobKind kind = JobKind::kReproduce;
  std::vector<std::string> command;  // the program, then its arguments
  std::string actor;
  std::vector<std::string> records;
  JobState state = JobState::kRunning;
  std::int64_t started_at = 0;
  std::int64_t ended_at = 0;
  std::optional<int> exit_code;
  std::optional<int> signal;
  json progress;  // the last progress line's object
  json result;
  std::string stderr_tail;
  std::string error;  // why it did not start, or why it has no result
  pid_t pid = 0;      // while it runs and is not reaped: what stop() signals
  bool stop_requested = false;
  std::thread thread;
};

JobBoard::JobBoard(std::string program, std::vector<std::string> source_args, Environment source_env,
                   std::chrono::milliseconds stop_grace)
    : program_(std::move(program)),
      source_args_(std::move(source_args)),
      source_env_(std::move(source_env)),
      stop_grace_(stop_grace) {
  // An ignored SIGCHLD (inherited across exec from whoever started serve)
  // makes the kernel reap the jobs itself: waitid could never see one end.
  ::signal(SIGCHLD, SIG_DFL);
}

JobBoard::~JobBoard() { stop_all(); }

std::string JobBoard::self_program() {
  char path[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : "";
}

std::size_t JobBoard::running() const {
  std::size_t n = 0;
  for (const auto& j : jobs_) n += j->state == JobState::kRunning;
  return n;
}

ApiReply JobBoard::start(JobRequest request) {
  std::unique_lock<std::mutex> hold(lock_);
  if (closing_) return error_reply(503, "the console is stopping; no new jobs");
  if (program_.empty()) return error_reply(500, "cannot find the pillbox binary (/proc/self/exe)");
  if (running() >= kMaxRunningJobs) {
    return error_reply(429, std::to_string(kMaxRunningJobs) + " jobs are running; wait or stop one at /jobs");
  }
  // A replay by filter names no record.
  for (const auto& j : jobs_) {
    if (j->state != JobState::kRunning) continue;
    if (request.kind == JobKind::kReplay && j->kind == JobKind::kReplay) continue;
    for (const auto& id : j->records) {
      for (const auto& asked : request.records) {
        if (id == asked) {
          return error_reply(409, "job " + std::to_string(j->id) + " (" + to_string(j->kind) + ") runs on record " +
                                      id + "; wait for it or stop it at /jobs/" + std::to_string(j->id));
        }
      }
    }
  }
  // The oldest finished jobs go (their threads have ended or are ending).
  std::size_t finished = jobs_.size() - running();
  for (auto it = jobs_.begin(); finished >= kKeptJobs && it != jobs_.end();) {
    if ((*it)->state == JobState::kRunning) {
      ++it;
      continue;
    }
    if ((*it)->thread.joinable()) (*it)->thread.join();
    it = jobs_.erase(it);
    --finished;
  }
  auto job = std::make_shared<Job>();
  job->id = ++last_id_;
  job->kind = request.kind;
  job->command.push_back(program_);
  job->command.insert(job->command.end(), request.args.begin(), request.args.end());
  job->command.insert(job->command.end(), source_args_.begin(), source_args_.end());
  job->actor = std::move(request.actor);
  job->records = std::move(request.records);
  job->started_at = store::now_ms();
  jobs_.push_back(job);
  // The child is started by the job's own thread: PR_SET_PDEATHSIG fires
  // when the thread that forked it ends, and this one lives until it is reaped.
  job->thread = std::thread([this, job] { run(job); });
  return {202, {{"job", to_json(*job, true)}}};
}

void JobBoard::run(const std::shared_ptr<Job>& job) {
  Pipe out, err, progress;
  std::string spawn_error;
  pid_t pid = -1;
  if (!out.open() || !err.open() || !progress.open()) {
    spawn_error = std::string("cannot make a pipe: ") + std::strerror(errno);
  } else {
    try {
      bp::environment env = boost::this_process::environment();
      // set(), not operator[]: Boost 1.74's find() behind [] compares the
      // key with each entry past the end of a shorter one (ASan says so).
      env.set("PILLBOX_ACTOR", job->actor);
      env.set("PILLBOX_PROGRESS_FD", std::to_string(kProgressFd));
      for (const auto& [name, value] : source_env_) env.set(name, value);
      const pid_t parent = ::getpid();
      // Where the child's loop over descriptors ends when close_range is missing (before Linux 5.11).
      rlimit files{};
      const int max_fd = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < 65536
                             ? static_cast<int>(files.rlim_cur) : 65536;
      const int child_out = out.write, child_err = err.write, child_progress = progress.write;
      // In the child, between fork and exec: async-signal-safe calls only.
      auto setup = [=](auto&) {
        // Out of the way of 1 to 3 first (a pipe may be one of them), then into them.
        const int o = ::fcntl(child_out, F_DUPFD_CLOEXEC, 10);
        const int e = ::fcntl(child_err, F_DUPFD_CLOEXEC, 10);
        const int p = ::fcntl(child_progress, F_DUPFD_CLOEXEC, 10);
        if (o < 0 || e < 0 || p < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0 || ::dup2(p, kProgressFd) < 0) _exit(127);
        // Nothing else of serve's goes with it: cpp-httplib's sockets (the
        // listener too, which would keep the port from a restarted serve)
        // are not close-on-exec. Marked, not closed: Boost.Process reports a
        // failed exec on a pipe of its own, closed by the exec.
        if (::close_range(kProgressFd + 1, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
          for (int fd = kProgressFd + 1; fd < max_fd; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        // serve blocks SIGINT and SIGTERM in every thread (console_server.cpp)
        // and a mask outlives exec: the verb must get them to stop cleanly.
        sigset_t none;
        sigemptyset(&none);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        // A serve that is gone makes a write to these pipes fail, not kill
        // the verb before it has released what it holds.
        ::signal(SIGPIPE, SIG_IGN);
        // A group of its own: a terminal's SIGHUP or Ctrl-C to serve's group
        // must not kill a replay that holds claims (it stops on SIGTERM alone).
        ::setpgid(0, 0);
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        // The serve died before the line above: the signal will not come.
        if (::getppid() != parent) _exit(128 + SIGTERM);
      };
      std::vector<std::string> args(job->command.begin() + 1, job->command.end());
      // The binary serve runs from, even when a new one was installed over
      // it (or it was removed) since: exec opens a path again, so the one of
      // this process (self_program()) goes as /proc/self/exe.
      const std::string exe = program_ == self_program() ? std::string("/proc/self/exe") : program_;
      // Boost.Process forgets the pid of a child whose exec failed: reaped
      // here, or it would stay a zombie of serve.
      auto reap_failed = [](auto& exec, const std::error_code&) {
        if (exec.pid > 0) {
          int ignored = 0;
          while (::waitpid(exec.pid, &ignored, 0) < 0 && errno == EINTR) {
          }
        }
      };
      bp::child child(bp::exe = exe, bp::args = args, env, bp::std_in < bp::null,
                      bp::extend::on_exec_setup = setup, bp::extend::on_exec_error = reap_failed);
      pid = child.id();
      child.detach();  // reaped below, by waitpid
    } catch (const std::exception& e) {
      spawn_error = std::string("cannot start ") + program_ + ": " + e.what();
    }
  }
  out.close_write();
  err.close_write();
  progress.close_write();
  {
    std::lock_guard<std::mutex> hold(lock_);
    if (pid <= 0) {
      job->state = JobState::kFailed;
      job->error = spawn_error;
      job->ended_at = store::now_ms();
      ended_.notify_all();
      return;
    }
    job->pid = pid;
    if (job->stop_requested) ::kill(pid, SIGTERM);
  }

  std::string stdout_text;
  bool too_large = false;
  std::string progress_line;
  auto on_stdout = [&](const char* data, std::size_t n) {
    if (too_large || stdout_text.size() + n > kMaxJobResultBytes) {
      too_large = true;
      stdout_text.clear();
      return;
    }
    stdout_text.append(data, n);
  };
  auto on_stderr = [&](const char* data, std::size_t n) {
    std::lock_guard<std::mutex> hold(lock_);
    job->stderr_tail.append(data, n);
    if (job->stderr_tail.size() > kJobStderrTailBytes) {
      job->stderr_tail.erase(0, job->stderr_tail.size() - kJobStderrTailBytes);
    }
  };
  auto on_progress = [&](const char* data, std::size_t n) {
    progress_line.append(data, n);
    std::size_t end;
    while ((end = progress_line.find('\n')) != std::string::npos) {
      json line = json::parse(progress_line.substr(0, end), nullptr, false);
      progress_line.erase(0, end + 1);
      if (!line.is_object()) continue;
      std::lock_guard<std::mutex> hold(lock_);
      job->progress = std::move(line);
    }
    if (progress_line.size() > kMaxProgressLine) progress_line.clear();
  };
  struct Stream {
    int fd;
    std::function<void(const char*, std::size_t)> sink;
    bool open = true;
  };
  Stream streams[] = {{out.read, on_stdout}, {err.read, on_stderr}, {progress.read, on_progress}};
  auto read_all = [&] {
    for (auto& s : streams) {
      if (s.open) s.open = read_available(s.fd, s.sink);
    }
  };
  while (true) {
    pollfd fds[3];
    nfds_t n = 0;
    for (const auto& s : streams) {
      if (s.open) fds[n++] = {s.fd, POLLIN, 0};
    }
    ::poll(n > 0 ? fds : nullptr, n, 250);
    read_all();
    // Ended? Looked at without reaping: until it is reaped, its pid is its
    // own and stop() may signal it.
    siginfo_t info{};
    const int seen = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if ((seen == 0 && info.si_pid == pid) || (seen < 0 && errno == ECHILD)) break;  // ECHILD: reaped by someone else
  }
  read_all();  // what it wrote last (a sandbox it left behind may hold the pipes: not waited for)
  {
    std::lock_guard<std::mutex> hold(lock_);
    job->pid = 0;
  }
  int status = 0;
  pid_t reaped;
  while ((reaped = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }

  json result;
  if (!too_large) {
    if (job->kind == JobKind::kReplay) {
      // replay --json: one object a replayed record (as run --json).
      json lines = json::array();
      bool all_json = true;
      std::size_t start = 0;
      while (start < stdout_text.size()) {
        std::size_t end = stdout_text.find('\n', start);
        if (end == std::string::npos) end = stdout_text.size();
        if (end > start) {
          json line = json::parse(stdout_text.substr(start, end - start), nullptr, false);
          all_json = all_json && !line.is_discarded();
          lines.push_back(std::move(line));
        }
        start = end + 1;
      }
      if (all_json) result = {{"results", std::move(lines)}, {"stopped_because", nullptr}};
    } else if (!stdout_text.empty()) {
      result = json::parse(stdout_text, nullptr, false);
      if (result.is_discarded()) result = nullptr;
    }
  }

  std::lock_guard<std::mutex> hold(lock_);
  // Why a replay stopped is in its last progress line (quarantine_replay.cpp).
  if (result.is_object() && result.contains("stopped_because") && job->progress.is_object()) {
    const json note = job->progress.value("note", json());
    if (note.is_string() && note.get<std::string>().rfind("stopped: ", 0) == 0) {
      result["stopped_because"] = note.get<std::string>().substr(9);
    }
  }
  job->result = std::move(result);
  if (too_large) job->error = "the result is over 1 MiB; run the command on the CLI to see it";
  if (reaped != pid) {
    job->state = JobState::kFailed;
    job->error = "its exit status is unknown: the process was reaped by someone else";
  } else if (WIFSIGNALED(status)) {
    job->signal = WTERMSIG(status);
    job->state = job->stop_requested ? JobState::kStopped : JobState::kFailed;
  } else {
    job->exit_code = WEXITSTATUS(status);
    const bool stopped = job->stop_requested && (*job->exit_code == 128 + SIGTERM || *job->exit_code == 128 + SIGKILL);
    // Exit 1 is an answer too: not reproduced, or some replays failed again.
    const bool answered = (*job->exit_code == 0 || *job->exit_code == 1) && !job->result.is_null();
    job->state = stopped ? JobState::kStopped : answered ? JobState::kDone : JobState::kFailed;
  }
  job->ended_at = store::now_ms();
  ended_.notify_all();
}

json JobBoard::to_json(const Job& job, bool whole) const {
  json j = {{"id", job.id},
            {"kind", to_string(job.kind)},
            {"command", job.command},
            {"actor", job.actor},
            {"records", job.records},
            {"state", to_string(job.state)},
            {"started_at_ms", job.started_at},
            {"ended_at_ms", job.ended_at == 0 ? json() : json(job.ended_at)},
            {"exit_code", job.exit_code ? json(*job.exit_code) : json()},
            {"signal", job.signal ? json(*job.signal) : json()},
            {"pid", job.pid > 0 ? json(job.pid) : json()},
            {"stop_requested", job.stop_requested},
            {"progress", job.progress},
            {"error", job.error.empty() ? json() : json(job.error)}};
  if (whole) {
    j["result"] = job.result;
    j["stderr_tail"] = job.stderr_tail;
  }
  return j;
}

std::shared_ptr<JobBoard::Job> JobBoard::find(const std::string& id_text) const {
  auto id = record_id(id_text);  // the same form: a positive number
  if (!id) return nullptr;
  for (const auto& j : jobs_) {
    if (j->id == *id) return j;
  }
  return nullptr;
}

ApiReply JobBoard::list() const {
  std::lock_guard<std::mutex> hold(lock_);
  json jobs = json::array();
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) jobs.push_back(to_json(**it, false));
  return {200, {{"jobs", std::move(jobs)}}};
}

ApiReply JobBoard::show(const std::string& id_text) const {
  std::lock_guard<std::mutex> hold(lock_);
  const auto job = find(id_text);
  if (!job) return error_reply(404, "no job '" + id_text.substr(0, 40) + "' (the console keeps the last " +
                                        std::to_string(kKeptJobs) + " finished jobs, until it stops)");
  return {200, {{"job", to_json(*job, true)}}};
}

ApiReply JobBoard::stop(const std::string& id_text) {
  std::lock_guard<std::mutex> hold(lock_);
  const auto job = find(id_text);
  if (!job) return error_reply(404, "no job '" + id_text.substr(0, 40) + "'");
  if (job->state != JobState::kRunning) {
    return error_reply(409, "job " + std::to_string(job->id) + " has ended (" + to_string(job->state) + ")");
  }
  job->stop_requested = true;
  if (job->pid > 0) ::kill(job->pid, SIGTERM);
  return {202, {{"job", to_json(*job, true)}}};
}

void JobBoard::stop_all() {
  std::unique_lock<std::mutex> hold(lock_);
  closing_ = true;
  for (const auto& j : jobs_) {
    if (j->state != JobState::kRunning) continue;
    j->stop_requested = true;
    if (j->pid > 0) ::kill(j->pid, SIGTERM);
  }
  if (!ended_.wait_for(hold, stop_grace_, [this] { return running() == 0; })) {
    for (const auto& j : jobs_) {
      if (j->state == JobState::kRunning && j->pid > 0) ::kill(j->pid, SIGKILL);
    }
    // Bounded as well: a job whose thread cannot tell its end is left, not waited for forever.
    ended_.wait_for(hold, stop_grace_, [this] { return running() == 0; });
  }
  // Joined outside the lock: a thread's last step takes it.
  std::vector<std::shared_ptr<Job>> all(jobs_.begin(), jobs_.end());
  hold.unlock();
  for (const auto& j : all) {
    if (j->thread.joinable()) j->thread.join();
  }
}

}  // namespace pillbox::serve
