#include "tests/e2e/background.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

extern char** environ;

namespace e2e {

Background::Background(const std::string& program, const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& extra_env,
                       const std::function<void()>& in_child) {
  std::vector<std::string> argv_s = {program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos && extra_env.count(kv.substr(0, eq)) > 0) continue;
    env_s.push_back(kv);
  }
  for (const auto& [k, v] : extra_env) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string out = dir_.file("out"), err = dir_.file("err");
  const pid_t parent = ::getpid();
  // Until the child has the default actions back, a signal sent to it
  // (a test's SIGTERM right after the start) would run the test's own
  // handler there (doctest's: "test case CRASHED", then on into execve),
  // and the program, never told, ran on for ever: blocked until then.
  sigset_t all, old;
  ::sigfillset(&all);
  ::sigprocmask(SIG_BLOCK, &all, &old);
  pid_ = ::fork();
  if (pid_ != 0) ::sigprocmask(SIG_SETMASK, &old, nullptr);
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    for (int sig = 1; sig < NSIG; ++sig) {
      struct sigaction current {};
      if (::sigaction(sig, nullptr, &current) == 0 && current.sa_handler != SIG_IGN) ::signal(sig, SIG_DFL);
    }
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(127);
    const int in = ::open("/dev/null", O_RDONLY);
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || o < 0 || e < 0) _exit(127);
    ::dup2(in, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    // The test's signal mask and handlers are not the program's.
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (in_child) in_child();
    ::execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
}

Background::~Background() {
  if (running()) {
    check_no_deleted_store_files(pid_);
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

std::string Background::contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void Background::signal(int sig) const {
  if (!running()) return;
  check_no_deleted_store_files(pid_);
  ::kill(pid_, sig);
}

bool Background::ended() {
  if (!reaped_ && pid_ > 0 && ::waitpid(pid_, &status_, WNOHANG) == pid_) reaped_ = true;
  return reaped_;
}

int Background::wait(std::chrono::milliseconds limit) {
  if (!reaped_) {
    check_no_deleted_store_files(pid_);
    // A pidfd becomes readable when the process ends: no polling.
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    REQUIRE_MESSAGE(pidfd >= 0, "pidfd_open: " << std::strerror(errno));
    pollfd p{pidfd, POLLIN, 0};
    int n;
    while ((n = ::poll(&p, 1, static_cast<int>(limit.count()))) < 0 && errno == EINTR) {
    }
    ::close(pidfd);
    if (n == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      reaped_ = true;
      FAIL_CHECK("still running after " << limit.count() << " ms, killed; stderr:\n" << err());
      return -1;
    }
    while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

bool eventually(const std::function<bool()>& done, std::chrono::milliseconds limit, std::chrono::milliseconds every) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(every);
  }
}

}  // namespace e2e
