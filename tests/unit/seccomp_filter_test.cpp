// The compiled seccomp filters, read without loading them: what each one
// answers for every syscall (against the rules it was compiled from), and
// how long a path the kernel walks to answer.
#include <doctest/doctest.h>

#include <linux/audit.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "sandbox/seccomp_filter.h"
#include "shared/policy_parser.h"
#include "tests/unit/classic_bpf.h"

using namespace pillbox;
using pillbox::test::run_seccomp_bpf;

namespace {

// Above the highest x86_64 syscall number the kernel knows today.
constexpr int kHighestNr = 600;
constexpr std::uint64_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                          CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;

std::uint32_t decide(const std::vector<sock_filter>& program, std::uint32_t arch, int nr, std::uint64_t arg0 = 0) {
  seccomp_data data{};
  data.nr = nr;
  data.arch = arch;
  data.args[0] = arg0;
  const auto verdict = run_seccomp_bpf(program, data);
  REQUIRE(verdict.has_value());
  return verdict->action;
}

std::set<int> allowed_numbers(const SeccompRules& rules, bool exec_mode) {
  std::set<int> out;
  for (const auto* list : {&sandbox::runtime_syscalls(exec_mode), &rules.allow}) {
    for (const std::string& name : *list) out.insert(seccomp_syscall_resolve_name(name.c_str()));
  }
  return out;
}

// Every syscall number of every ABI against the rules: allowed by name,
// clone and unshare only without namespace flags, clone3 ENOSYS, anything
// else (other numbers, i386 and x32 calls, an unknown arch) the default.
void check_decisions(const std::vector<sock_filter>& program, std::uint32_t default_action, const SeccompRules& rules,
                     bool exec_mode) {
  const std::set<int> allowed = allowed_numbers(rules, exec_mode);
  for (int nr = 0; nr <= kHighestNr; ++nr) {
    CAPTURE(nr);
    std::uint32_t expected = allowed.count(nr) ? SECCOMP_RET_ALLOW : default_action;
    if (nr == __NR_clone3) expected = SECCOMP_RET_ERRNO | ENOSYS;
    CHECK(decide(program, AUDIT_ARCH_X86_64, nr) == expected);
    CHECK(decide(program, AUDIT_ARCH_X86_64, nr | __X32_SYSCALL_BIT) == default_action);
    CHECK(decide(program, AUDIT_ARCH_I386, nr) == default_action);
    CHECK(decide(program, AUDIT_ARCH_AARCH64, nr) == default_action);
  }
  for (int nr : {__NR_clone, __NR_unshare}) {
    CAPTURE(nr);
    const bool by_name = allowed.count(nr) > 0;
    CHECK(decide(program, AUDIT_ARCH_X86_64, nr, SIGCHLD) == (by_name ? SECCOMP_RET_ALLOW : default_action));
    CHECK(decide(program, AUDIT_ARCH_X86_64, nr, CLONE_VM | CLONE_THREAD | CLONE_SIGHAND) ==
          (by_name ? SECCOMP_RET_ALLOW : default_action));
    for (std::uint64_t bit = 1; bit != 0; bit <<= 1) {
      if ((kNamespaceFlags & bit) == 0) continue;
      CAPTURE(bit);
      CHECK(decide(program, AUDIT_ARCH_X86_64, nr, bit | SIGCHLD) == default_action);
    }
  }
}

// The longest walk through the program for a native syscall number.
std::size_t longest_path(const std::vector<sock_filter>& program) {
  std::size_t longest = 0;
  for (int nr = 0; nr <= kHighestNr; ++nr) {
    seccomp_data data{};
    data.nr = nr;
    data.arch = AUDIT_ARCH_X86_64;
    const auto verdict = run_seccomp_bpf(program, data);
    REQUIRE(verdict.has_value());
    longest = std::max(longest, verdict->steps);
  }
  return longest;
}

}  // namespace

TEST_CASE("seccomp filter: every syscall of every ABI is decided as the policy's rules say") {
  for (const std::string name : {"strict", "exec"}) {
    for (bool exec_mode : {false, true}) {
      CAPTURE(name);
      CAPTURE(exec_mode);
      auto policy = resolve_policy(name);
      REQUIRE(policy);
      REQUIRE(policy->seccomp.default_action == SeccompDefault::kTrap);
      auto filter = sandbox::compile_filter(policy->seccomp, exec_mode);
      REQUIRE(filter);
      REQUIRE(filter->notifies);
      check_decisions(filter->program, SECCOMP_RET_USER_NOTIF, policy->seccomp, exec_mode);
      check_decisions(filter->fallback, SECCOMP_RET_TRAP, policy->seccomp, exec_mode);
    }
  }
}

TEST_CASE("seccomp filter: with a kill or errno default, only the default changes") {
  auto policy = resolve_policy("strict");
  REQUIRE(policy);
  policy->seccomp.default_action = SeccompDefault::kKill;
  auto killing = sandbox::compile_filter(policy->seccomp, false);
  REQUIRE(killing);
  check_decisions(killing->program, SECCOMP_RET_KILL_PROCESS, policy->seccomp, false);
  policy->seccomp.default_action = SeccompDefault::kErrno;
  auto failing = sandbox::compile_filter(policy->seccomp, false);
  REQUIRE(failing);
  check_decisions(failing->program, SECCOMP_RET_ERRNO | EPERM, policy->seccomp, false);
}

// Loading a filter, the kernel runs it once for every syscall number (its
// allow cache), and that dominates the load: a handler child spent ~100 us
// of CPU on it with libseccomp's list of 51 instructions (up to 48 steps per
// number), against ~60 us with the same rules as a binary tree of 62 (at
// most 14 steps). Measured by forking children that load one or the other.
TEST_CASE("seccomp filter: the kernel decides any native syscall in a short walk") {
  // The exec policy allows 155 syscalls: its list walked up to 171 steps.
  for (const auto& item : {std::pair<std::string, std::size_t>{"strict", 16}, {"exec", 24}}) {
    const auto& name = item.first;  // clang 14 cannot capture a structured binding
    const auto& limit = item.second;
    CAPTURE(name);
    auto policy = resolve_policy(name);
    REQUIRE(policy);
    auto filter = sandbox::compile_filter(policy->seccomp, name == "exec");
    REQUIRE(filter);
    CHECK(longest_path(filter->program) <= limit);
    CHECK(longest_path(filter->fallback) <= limit);
  }
}
