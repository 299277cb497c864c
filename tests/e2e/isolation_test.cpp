// What a child can see of the host, checked from inside with ordinary
// programs in exec mode: its PID namespace, its network namespace, its uid.
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "tests/e2e/support.h"

namespace {

// True when this host lets us create the namespace (tried in a child).
bool can_unshare(int flag) {
  const pid_t pid = ::fork();
  if (pid == 0) _exit(::unshare(flag) == 0 ? 0 : 1);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string run_program_output(const std::vector<std::string>& program) {
  e2e::TempDir dir;
  const std::string input = dir.write("payload", "x");
  std::vector<std::string> args{"run", "--json", input, "--"};
  args.insert(args.end(), program.begin(), program.end());
  const auto r = e2e::run_pillbox(args);
  INFO(r.describe());
  REQUIRE(r.records.size() == 1);
  REQUIRE(r.records[0]["kind"] == "ok");
  return r.records[0]["output"].get<std::string>();
}

// The interfaces named in /proc/net/dev: two header lines, then one per line.
std::vector<std::string> interfaces_of(const std::string& net_dev) {
  std::vector<std::string> names;
  std::size_t start = 0, line = 0;
  while (start < net_dev.size()) {
    const std::size_t end = net_dev.find('\n', start);
    const std::string text = net_dev.substr(start, end - start);
    if (line++ >= 2 && text.find(':') != std::string::npos) {
      const std::size_t first = text.find_first_not_of(' ');
      names.push_back(text.substr(first, text.find(':') - first));
    }
    start = end == std::string::npos ? net_dev.size() : end + 1;
  }
  return names;
}

}  // namespace

TEST_CASE("children live in the zygote's PID namespace: pid 1 is the zygote, no host process is visible") {
  if (!e2e::is_root() || !can_unshare(CLONE_NEWPID)) {
    MESSAGE("skipped: this host does not allow a PID namespace here");
    return;
  }
  CHECK(run_program_output({"/bin/cat", "/proc/1/comm"}) == "pillbox-sandbox\n");
  // /proc lists the namespace's processes only: the zygote and this child.
  const std::string listing = run_program_output({"/bin/ls", "/proc"});
  int numeric = 0;
  std::size_t start = 0;
  while (start < listing.size()) {
    const std::size_t end = listing.find('\n', start);
    const std::string name = listing.substr(start, end - start);
    if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos) ++numeric;
    start = end == std::string::npos ? listing.size() : end + 1;
  }
  CHECK(numeric >= 2);
  CHECK(numeric <= 4);
}

TEST_CASE("children have no network but loopback") {
  if (!e2e::is_root() || !can_unshare(CLONE_NEWNET)) {
    MESSAGE("skipped: this host does not allow a network namespace here");
    return;
  }
  CHECK(interfaces_of(run_program_output({"/bin/cat", "/proc/net/dev"})) == std::vector<std::string>{"lo"});
}

TEST_CASE("as root, children run under a uid of the policy's uid_pool, not root") {
  if (!e2e::is_root()) {
    MESSAGE("skipped: not running as root, there is no privilege to drop");
    return;
  }
  const std::string uid = run_program_output({"/usr/bin/id", "-u"});
  const unsigned long value = std::stoul(uid);
  CHECK(value >= 2000000000ul);   // policies/exec.policy: uid_pool = 2000000000-2000004095
  CHECK(value <= 2000004095ul);
}

// Without root: the zygote enters a user namespace (where the host allows
// unprivileged ones) and gets the other namespaces from there; children keep
// no capability. Run as `nobody` with setpriv(1) from util-linux.
TEST_CASE("without root, a user namespace still gives children their own namespaces and no capabilities") {
  if (!e2e::is_root() || ::access("/usr/bin/setpriv", X_OK) != 0) {
    MESSAGE("skipped: needs root (to become nobody for the test) and setpriv");
    return;
  }
  const bool userns = [] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) _exit(2);
      _exit(::unshare(CLONE_NEWUSER) == 0 ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  if (!userns) {
    MESSAGE("skipped: this host does not allow unprivileged user namespaces");
    return;
  }
  e2e::TempDir dir;  // 0755: readable by nobody
  const std::string input = dir.write("payload", "x");
  auto as_nobody = [&](std::vector<std::string> program) {
    std::vector<std::string> args{"--reuid=65534", "--regid=65534", "--clear-groups", e2e::pillbox_for_any_uid(),
                                  "run", "--json", input, "--"};
    args.insert(args.end(), program.begin(), program.end());
    return e2e::run_command("/usr/bin/setpriv", args);
  };
  const auto comm = as_nobody({"/bin/cat", "/proc/1/comm"});
  INFO(comm.describe());
  REQUIRE(comm.records.size() == 1);
  CHECK(comm.records[0]["kind"] == "ok");
  CHECK(comm.records[0]["output"] == "pillbox-sandbox\n");
  const auto status = as_nobody({"/bin/grep", "^Cap", "/proc/self/status"});
  INFO(status.describe());
  REQUIRE(status.records.size() == 1);
  const std::string caps = status.records[0]["output"];
  CHECK(caps.find("CapEff:\t0000000000000000") != std::string::npos);
  CHECK(caps.find("CapPrm:\t0000000000000000") != std::string::npos);
  CHECK(caps.find("CapBnd:\t0000000000000000") != std::string::npos);
  const auto net = as_nobody({"/bin/cat", "/proc/net/dev"});
  INFO(net.describe());
  REQUIRE(net.records.size() == 1);
  CHECK(interfaces_of(net.records[0]["output"]) == std::vector<std::string>{"lo"});
}
