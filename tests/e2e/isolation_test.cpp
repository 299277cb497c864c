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
  const std::string devices = run_program_output({"/bin/cat", "/proc/net/dev"});
  // Two header lines, then one line per interface: only "lo".
  int interfaces = 0;
  std::size_t start = 0, line = 0;
  while (start < devices.size()) {
    const std::size_t end = devices.find('\n', start);
    if (line++ >= 2) {
      ++interfaces;
      CHECK(devices.substr(start, end - start).find("lo:") != std::string::npos);
    }
    start = end == std::string::npos ? devices.size() : end + 1;
  }
  CHECK(interfaces == 1);
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
