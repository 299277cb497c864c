#include "tests/e2e/rabbit_server.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>

namespace e2e {
namespace {

// The scripts themselves, not /usr/sbin's wrappers, which switch to the
// rabbitmq user.
const char* const kServer = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const char* const kCtl = "/usr/lib/rabbitmq/bin/rabbitmqctl";
const char* const kEpmd = "/usr/bin/epmd";

// `pid`'s descendants: beam.smp's erl_child_setup and the programs it
// starts (inet_gethost, the disk monitor's sh). Each calls setsid(): no
// process group holds them, only their parents link them to the node.
std::vector<pid_t> descendants(pid_t pid) {
  const auto procs = list_processes();
  std::vector<pid_t> found = {pid};
  for (std::size_t i = 0; i < found.size(); ++i) {
    for (const auto& p : procs) {
      if (p.ppid == found[i]) found.push_back(p.pid);
    }
  }
  found.erase(found.begin());
  return found;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> p;
  for (auto& s : strings) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace

RabbitServer::RabbitServer() : dir_(0700) {
  if (::access(kServer, X_OK) != 0) {
    why_not_ = std::string(kServer) + " is not installed (tools/setup.sh --tests installs rabbitmq-server)";
    return;
  }
  if (::geteuid() != 0) {
    why_not_ = "not root: the Debian wrappers switch to the rabbitmq user; the tests run the server directly, as root";
    return;
  }
  static std::atomic<int> count{0};
  node_ = "pbtest-" + std::to_string(::getpid()) + "-" + std::to_string(++count) + "@localhost";
  dist_port_ = free_loopback_port();
  ctl_port_ = free_loopback_port();
  port_ = free_loopback_port();
  dir_.write("enabled_plugins", "[].\n");
  // A low disk limit: a full /tmp must not block publishers (a test that
  // would hang on a disk alarm rather than fail).
  dir_.write("rabbitmq.conf", "listeners.tcp.default = 127.0.0.1:" + std::to_string(port_) +
                                  "\ndefault_user = pillbox\ndefault_pass = " + password() +
                                  "\ndefault_vhost = /\nloopback_users = none\nlog.console = true\nlog.file = rabbit.log\n"
                                  "disk_free_limit.absolute = 1MB\n");
  start_epmd();
  start();
}

// Our own epmd, not a shared `epmd -daemon` that would outlive the test. We
// bind and listen on its socket ourselves and hand it over the way systemd
// does (LISTEN_FDS, -systemd): it accepts connections from the moment we
// listen, so the server never races its start (no waiting, no probing), and
// the port cannot be taken by another process in between.
void RabbitServer::start_epmd() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 128) == 0);
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  epmd_port_ = ntohs(a.sin_port);
  std::vector<std::string> args = {kEpmd, "-systemd", "-port", std::to_string(epmd_port_)};
  auto argv = pointers(args);
  char listen_pid[32] = "LISTEN_PID=";  // the child writes its pid in: no allocation after fork
  char listen_fds[] = "LISTEN_FDS=1";
  char* envp[] = {listen_pid, listen_fds, nullptr};
  const pid_t parent = ::getpid();
  epmd_ = ::fork();
  REQUIRE(epmd_ >= 0);
  if (epmd_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a test that died
    if (::getppid() != parent) ::_exit(127);
    char digits[16];
    int n = 0;
    for (pid_t v = ::getpid(); v > 0; v /= 10) digits[n++] = static_cast<char>('0' + v % 10);
    for (char* p = listen_pid + 11; n > 0; ++p) *p = digits[--n];
    if (fd == 3) ::fcntl(3, F_SETFD, 0); else ::dup2(fd, 3);  // systemd's first fd, without CLOEXEC
    ::execve(kEpmd, argv.data(), envp);
    ::_exit(127);
  }
  ::close(fd);
}

std::vector<std::string> RabbitServer::environment() const {
  const std::string d = dir_.path();
  // Distribution on loopback only, and no `epmd -daemon` of the node's or
  // rabbitmqctl's own. (RabbitMQ's epmd-starter still runs one at each
  // start: it exits at once, as ours holds the port.)
  const std::string erl_args = "-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}";
  return {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "LC_ALL=C.UTF-8",
          "HOME=" + d,  // the Erlang cookie, shared by server and rabbitmqctl
          "ERL_EPMD_PORT=" + std::to_string(epmd_port_), "RABBITMQ_NODENAME=" + node_,
          "RABBITMQ_DIST_PORT=" + std::to_string(dist_port_),
          "RABBITMQ_CTL_DIST_PORT_MIN=" + std::to_string(ctl_port_), "RABBITMQ_CTL_DIST_PORT_MAX=" + std::to_string(ctl_port_),
          // Not the host's /etc/rabbitmq files: none there is read.
          "RABBITMQ_CONF_ENV_FILE=" + d + "/rabbitmq-env.conf", "RABBITMQ_ADVANCED_CONFIG_FILE=" + d + "/advanced.config",
          "RABBITMQ_CONFIG_FILE=" + d + "/rabbitmq.conf", "RABBITMQ_ENABLED_PLUGINS_FILE=" + d + "/enabled_plugins",
          "RABBITMQ_MNESIA_BASE=" + d + "/mnesia", "RABBITMQ_LOG_BASE=" + d + "/log", "RABBITMQ_PID_FILE=" + d + "/pid",
          "ERL_CRASH_DUMP=" + d + "/erl_crash.dump",  // not in the test's working directory
          // Input allowed: the script then execs erl instead of staying its
          // shell parent, so our child is beam.smp itself (its death signal
          // and our SIGTERM reach the node); -noinput keeps stdin unread.
          "RABBITMQ_ALLOW_INPUT=1", "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=-noinput " + erl_args,
          "RABBITMQ_CTL_ERL_ARGS=" + erl_args};
}

void RabbitServer::start() {
  REQUIRE(available());
  REQUIRE(pid_ == 0);
  int out[2];
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  std::vector<std::string> args = {kServer}, env = environment();
  auto argv = pointers(args), envp = pointers(env);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  REQUIRE(pid_ >= 0);
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives a test that died
    if (::getppid() != parent) ::_exit(127);
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::execve(kServer, argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  // Ready when it says "Starting broker... completed with 0 plugins." (at
  // most 60 s): its listeners are open and its default user is there.
  std::string log;
  const bool ready = await_output(out[0], "completed with", std::chrono::seconds(60), log, log_drain_);
  if (!ready) {
    stop(SIGKILL);
    FAIL("rabbitmq-server " << node_ << " did not get ready on port " << port_ << ":\n"
                            << log.substr(log.size() > 4000 ? log.size() - 4000 : 0));
  }
}

void RabbitServer::stop(int sig) {
  if (pid_ > 0) {
    // SIGTERM: RabbitMQ's own handler stops the broker cleanly. SIGKILL:
    // beam.smp dies as in a crash; its helpers end when they see it gone.
    const auto helpers = descendants(pid_);
    ::kill(pid_, sig);
    if (!still_running_after({pid_}, std::chrono::seconds(60)).empty()) {
      ::kill(pid_, SIGKILL);
      FAIL_CHECK("rabbitmq-server " << node_ << " still running 60 s after signal " << sig << ", killed");
    }
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    pid_ = 0;
    // Its helpers end when they see beam.smp gone: nothing of the node is
    // left when stop() returns.
    auto left = still_running_after(helpers, std::chrono::seconds(10));
    for (const pid_t p : left) ::kill(p, SIGKILL);
    CHECK_MESSAGE(still_running_after(left, std::chrono::seconds(10)).empty(), "helpers of " << node_ << " left after stop");
  }
  // The log pipe ends with the last of them.
  if (log_drain_.joinable()) log_drain_.join();
}

RabbitServer::~RabbitServer() {
  stop(SIGTERM);
  if (epmd_ > 0) {
    ::kill(epmd_, SIGKILL);  // nothing of it is worth keeping
    while (::waitpid(epmd_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

RabbitServer::CtlResult RabbitServer::ctl(const std::vector<std::string>& args) const {
  REQUIRE(available());
  // env -i: rabbitmqctl sees the broker's environment, not the test's.
  std::vector<std::string> command = {"-i"};
  for (auto& e : environment()) command.push_back(e);
  command.insert(command.end(), {kCtl, "-n", node_});
  command.insert(command.end(), args.begin(), args.end());
  const auto r = run_command("/usr/bin/env", command, "", {}, {}, 120);
  return {r.exit_code, r.out, r.err};
}

}  // namespace e2e
