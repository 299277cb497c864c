#include "supervisor/flow/alert_hook.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "shared/process_group.h"
#include "shared/status.h"

extern char** environ;

namespace pillbox {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

std::string errno_text(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

// Long commands would drown the warning they are part of.
std::string quoted(const std::string& command) {
  constexpr std::size_t kMax = 80;
  if (command.size() <= kMax) return "'" + command + "'";
  return "'" + command.substr(0, kMax) + "...'";
}

std::string duration_text(milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + " s";
  return std::to_string(d.count()) + " ms";
}

std::string wait_status_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char* abbrev = ::sigabbrev_np(WTERMSIG(status));
    return abbrev != nullptr ? std::string("was killed by SIG") + abbrev
                             : "was killed by signal " + std::to_string(WTERMSIG(status));
  }
  return "ended with wait status " + std::to_string(status);
}

// The record goes into an in-memory file rather than a pipe: the hook may
// read all of it, some of it or none of it, and no write of ours can ever
// block on that.
Expected<UniqueFd> stdin_file(const std::string& json) {
  UniqueFd fd(::memfd_create("pillbox-hook-stdin", MFD_CLOEXEC));
  if (!fd.valid()) return Error{errno_text("memfd_create", errno)};
  // Keep it clear of 0-2 so the dup onto stdin is a real dup (which is what
  // drops close-on-exec) even when the supervisor was started with stdin closed.
  if (fd.get() < 3) {
    UniqueFd high(::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3));
    if (!high.valid()) return Error{errno_text("fcntl", errno)};
    fd = std::move(high);
  }
  std::size_t done = 0;
  while (done < json.size()) {
    const ssize_t n = ::write(fd.get(), json.data() + done, json.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Error{errno_text("write to memfd", n < 0 ? errno : EIO)};
    done += static_cast<std::size_t>(n);
  }
  if (::lseek(fd.get(), 0, SEEK_SET) != 0) return Error{errno_text("lseek", errno)};
  return fd;
}

// posix_spawn rather than fork: the supervisor has threads (this one), and
// glibc's posix_spawn (clone + exec, nothing else in between) is safe there.
Expected<pid_t> spawn_hook(const std::string& command, int stdin_fd, const std::vector<std::string>& env) {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  if (int e = ::posix_spawn_file_actions_init(&actions); e != 0) return Error{errno_text("posix_spawn", e)};
  if (int e = ::posix_spawnattr_init(&attr); e != 0) {
    ::posix_spawn_file_actions_destroy(&actions);
    return Error{errno_text("posix_spawn", e)};
  }

  // stderr stays: that is where an operator looks for a hook's complaints.
  // stdout would mix into the run's own output (maybe --json), so it goes
  // nowhere. Nothing else of the supervisor's (sockets, the store) leaks in.
  int e = ::posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
  if (e == 0) e = ::posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  if (e == 0) e = ::posix_spawn_file_actions_addclosefrom_np(&actions, 3);

  // Own process group, so a timeout can kill whatever the hook started too.
  // The supervisor ignores SIGPIPE, and ignored signals survive exec: reset
  // every signal to default and unblock them all, as a shell would expect.
  sigset_t none, all;
  ::sigemptyset(&none);
  ::sigfillset(&all);
  if (e == 0) e = ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  if (e == 0) e = ::posix_spawnattr_setpgroup(&attr, 0);
  if (e == 0) e = ::posix_spawnattr_setsigmask(&attr, &none);
  if (e == 0) e = ::posix_spawnattr_setsigdefault(&attr, &all);

  pid_t pid = -1;
  if (e == 0) {
    std::string sh = "sh", dash_c = "-c", cmd = command;
    char* argv[] = {sh.data(), dash_c.data(), cmd.data(), nullptr};
    std::vector<char*> envp;
    envp.reserve(env.size() + 1);
    for (const std::string& s : env) envp.push_back(const_cast<char*>(s.c_str()));
    envp.push_back(nullptr);
    // Claimed while spawned: spawn mode's reaper (reap_children) must not
    // take this child's exit status from us.
    spawn_claimed_child([&] {
      e = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, argv, envp.data());
      return e == 0 ? pid : -1;
    });
  }
  ::posix_spawnattr_destroy(&attr);
  ::posix_spawn_file_actions_destroy(&actions);
  if (e != 0) return Error{errno_text("posix_spawn /bin/sh", e)};
  return pid;
}

enum class End { kExited, kTimedOut, kAborted, kWaitFailed };

// Waits for `pid` to exit, the deadline to pass or `wake` to become readable,
// without reaping. A pidfd turns the child's exit into something poll() can
// wait on together with the wake-up, so nothing sleeps and nothing spins.
End wait_pidfd(int pidfd, int wake, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return End::kTimedOut;
    pollfd fds[2] = {{pidfd, POLLIN, 0}, {wake, POLLIN, 0}};  // a wake of -1 is skipped by poll
    const int n = ::poll(fds, 2, static_cast<int>(std::min<milliseconds::rep>(left.count(), 60'000)));
    if (n < 0 && errno != EINTR) return End::kWaitFailed;  // rather than spin
    if (n <= 0) continue;
    if (fds[0].revents != 0) return End::kExited;
    if (fds[1].revents != 0) return End::kAborted;
  }
}

// Fallback for kernels without pidfd_open (before 5.3): waitpid(WNOHANG)
// every few milliseconds, the pause spent in poll() on `wake` so an abort
// is still noticed at once. Reaps the child when it exits (*status set).
End wait_polling(pid_t pid, int wake, Clock::time_point deadline, int* status, bool* reaped) {
  for (;;) {
    const pid_t r = ::waitpid(pid, status, WNOHANG);
    if (r == pid) {
      *reaped = true;
      return End::kExited;
    }
    if (r < 0 && errno != EINTR) return End::kExited;  // reaped elsewhere; the caller finds out
    const auto left = std::chrono::ceil<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return End::kTimedOut;
    pollfd fd = {wake, POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(std::min<milliseconds::rep>(left.count(), 10))) > 0) return End::kAborted;
  }
}

// Blocks every signal in the calling thread for one scope, so a thread
// started inside it never takes a signal meant for the run's main loop.
class AllSignalsBlocked {
 public:
  AllSignalsBlocked() {
    sigset_t all;
    ::sigfillset(&all);
    ::pthread_sigmask(SIG_SETMASK, &all, &old_);
  }
  ~AllSignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

}  // namespace

AlertHook::AlertHook(HookSettings settings) : settings_(std::move(settings)) {
  // Captured once: getenv/setenv elsewhere in the process while this thread
  // walked `environ` would be a data race.
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "PILLBOX_HOOK=", 13) != 0) env_.emplace_back(*e);
  }
  env_.emplace_back("PILLBOX_HOOK=1");
  // Without it finish() still works, only later: the hook's own timeout ends it.
  wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  AllSignalsBlocked blocked;
  worker_ = std::thread([this] { work(); });
}

AlertHook::~AlertHook() { finish(milliseconds(1000)); }

void AlertHook::fire(std::string json) {
  {
    std::lock_guard lock(mu_);
    ++fired_;
    if (stopping_) {
      ++dropped_at_end_;
      return;
    }
    if (queue_.size() >= settings_.max_queued) {
      ++dropped_full_;
      return;
    }
    queue_.push_back(std::move(json));
  }
  cv_.notify_all();
}

void AlertHook::finish(milliseconds grace) {
  {
    std::unique_lock lock(mu_);
    if (finished_) return;
    finished_ = true;
    stopping_ = true;
    cv_.notify_all();
    if (!cv_.wait_until(lock, Clock::now() + grace, [this] { return worker_done_; })) {
      aborted_ = true;
      cv_.notify_all();
    }
  }
  if (wake_.valid()) {
    const std::uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_.get(), &one, sizeof one);
  }
  if (worker_.joinable()) worker_.join();
}

std::size_t AlertHook::fired() const {
  std::lock_guard lock(mu_);
  return fired_;
}

std::size_t AlertHook::succeeded() const {
  std::lock_guard lock(mu_);
  return succeeded_;
}

std::size_t AlertHook::failed() const {
  std::lock_guard lock(mu_);
  return failed_;
}

std::size_t AlertHook::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_full_ + dropped_at_end_;
}

std::vector<std::string> AlertHook::problems() const {
  std::lock_guard lock(mu_);
  std::vector<std::string> lines = problems_;
  const std::string hook = "hook " + quoted(settings_.command);
  if (problems_omitted_ > 0) {
    lines.push_back(hook + ": " + std::to_string(problems_omitted_) + " more failures not shown");
  }
  if (dropped_full_ > 0) {
    lines.push_back(hook + ": " + std::to_string(dropped_full_) + " records dropped: " +
                    std::to_string(settings_.max_queued) + " were already waiting for the hook");
  }
  if (dropped_at_end_ > 0) {
    lines.push_back(hook + ": " + std::to_string(dropped_at_end_) +
                    " records not delivered: the run ended before the hook got to them");
  }
  return lines;
}

void AlertHook::note_failure(std::string line) {
  ++failed_;
  if (problems_.size() < kMaxProblemLines) problems_.push_back(std::move(line));
  else ++problems_omitted_;
}

void AlertHook::work() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return !queue_.empty() || stopping_; });
    if (aborted_) {
      dropped_at_end_ += queue_.size();
      queue_.clear();
      break;
    }
    if (queue_.empty()) break;  // stopping, and everything delivered
    std::string json = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    try {
      run_one(json);
    } catch (const std::exception& e) {  // bad_alloc and the like: lose this record, not the run
      std::lock_guard relock(mu_);
      note_failure("hook " + quoted(settings_.command) + " could not run: " + e.what());
    }
    lock.lock();
  }
  worker_done_ = true;
  cv_.notify_all();
}

void AlertHook::run_one(const std::string& json) {
  const std::string hook = "hook " + quoted(settings_.command);
  auto fail = [&](std::string line) {
    std::lock_guard lock(mu_);
    note_failure(std::move(line));
  };

  Expected<UniqueFd> input = stdin_file(json);
  if (!input) return fail(hook + " could not start: " + input.error());
  Expected<pid_t> spawned = spawn_hook(settings_.command, input->get(), env_);
  if (!spawned) return fail(hook + " could not start: " + spawned.error());
  const pid_t pid = *spawned;
  input->reset();
  const Clock::time_point deadline = Clock::now() + settings_.timeout;

  int status = 0;
  bool reaped = false;
  End end;
  if (UniqueFd pidfd(pidfd_open(pid)); pidfd.valid()) end = wait_pidfd(pidfd.get(), wake_.get(), deadline);
  else end = wait_polling(pid, wake_.get(), deadline, &status, &reaped);

  if (end != End::kExited) {
    // Not reaped yet, so the pid (and with it the group id) is still the
    // hook's: the kill cannot reach a process that reused the number.
    kill_task_group(pid);
  }
  if (!reaped) {
    pid_t r;
    do r = ::waitpid(pid, &status, 0);
    while (r < 0 && errno == EINTR);
    if (r != pid) {
      release_claimed_child(pid);
      return fail(hook + ": exit status lost (the process was reaped by another part of the supervisor)");
    }
  }
  release_claimed_child(pid);

  if (end == End::kTimedOut) return fail(hook + " killed after " + duration_text(settings_.timeout) + " timeout");
  if (end == End::kAborted) return fail(hook + " killed: the run ended before it finished");
  if (end == End::kWaitFailed) return fail(hook + " killed: could not wait for it (poll failed)");
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::lock_guard lock(mu_);
    ++succeeded_;
    return;
  }
  fail(hook + " " + wait_status_text(status));
}

}  // namespace pillbox
