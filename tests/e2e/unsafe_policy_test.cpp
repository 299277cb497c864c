// Policies that switch confinement off (tasks as root, no seccomp) must be
// meant: refused with the line to fix unless the policy says
// allow_unsafe = yes, and warned about by `policy check` and `doctor` when
// it does. Only the two documented policies are shipped.
#include <unistd.h>

#include <doctest/doctest.h>
#include <regex>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string exec_policy_with(const std::string& from, const std::string& to) {
  return e2e::shipped_policy_with("exec", from, to);
}

std::string without_uid_pool(std::string text) {
  return std::regex_replace(text, std::regex("uid_pool = [0-9-]+\n"), "");
}

}  // namespace

TEST_CASE("user = root and seccomp off are refused at their line, by run and by policy check") {
  e2e::TempDir dir;
  const std::string input = dir.write("in", "x");
  const std::string as_root = dir.write("root.policy", without_uid_pool(exec_policy_with("user = nobody", "user = root")));
  const std::string no_seccomp = dir.write("open.policy", exec_policy_with("enabled = yes", "enabled = no"));
  for (const auto& item : {std::pair{as_root, "user = root"}, std::pair{no_seccomp, "seccomp enabled = no"}}) {
    const auto& policy = item.first;  // clang 14 cannot capture a structured binding
    const auto& setting = item.second;
    CAPTURE(policy);
    for (const auto& args : {std::vector<std::string>{"run", "--policy", policy, "--no-store", input, "--", "/bin/cat"},
                             std::vector<std::string>{"policy", "check", policy}}) {
      const auto r = run_pillbox(args);
      INFO(r.describe());
      CHECK(r.exit_code == 2);
      CHECK(r.out.empty());
      REQUIRE(r.err_lines().size() == 1);
      const std::string line = r.err_lines()[0];
      CHECK_MESSAGE(std::regex_search(line, std::regex(policy + ":[0-9]+: unsafe setting " + setting)), line);
      CHECK_MESSAGE(contains(line, "add 'allow_unsafe = yes' under [policy]"), line);
    }
  }
}

TEST_CASE("allow_unsafe = yes runs as written, and policy check and doctor warn") {
  e2e::TempDir dir;
  std::string text = without_uid_pool(exec_policy_with("user = nobody", "user = root"));
  text.replace(text.find("[policy]\n"), 9, "[policy]\nallow_unsafe = yes\n");
  const std::string meant = dir.write("meant.policy", text);

  const auto check = run_pillbox({"policy", "check", meant});
  INFO(check.describe());
  CHECK(check.exit_code == 0);
  CHECK(contains(check.out, meant + ": ok"));
  CHECK(contains(check.err, meant + ": warning: unsafe (allowed by allow_unsafe = yes): user = root"));

  const auto doctor = run_pillbox({"doctor", "--policy", meant});
  INFO(doctor.describe());
  CHECK(std::regex_search(doctor.out, std::regex("NO +policy " + meant + " +unsafe, allowed by allow_unsafe = yes: user = root")));
  CHECK(std::regex_search(doctor.out, std::regex("ok +policy strict +strict@")));
  CHECK(std::regex_search(doctor.out, std::regex("ok +policy exec +exec@")));

  if (!e2e::is_root()) {
    MESSAGE("skipped: running as root as written needs root");
    return;
  }
  const std::string input = dir.write("in", "x");
  const auto r = run_pillbox({"run", "--json", "--no-store", "--policy", meant, input, "--", "/usr/bin/id", "-u"});
  INFO(r.describe());
  REQUIRE(r.records.size() == 1);
  CHECK(r.records[0]["kind"] == "ok");
  CHECK(r.records[0]["output"] == "0\n");
}

TEST_CASE("policy check takes the shipped names; only strict and exec are shipped") {
  const auto r = run_pillbox({"policy", "check", "exec", "strict"});
  INFO(r.describe());
  CHECK(r.exit_code == 0);
  CHECK(contains(r.out, "exec: ok (policy 'exec'"));
  CHECK(contains(r.out, "strict: ok (policy 'strict'"));
  CHECK(r.err.empty());
  const auto gone = run_pillbox({"policy", "show", "default"});
  CHECK(gone.exit_code == 2);
  CHECK(contains(gone.err, "unknown policy 'default'"));
}
