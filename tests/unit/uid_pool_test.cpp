#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "shared/policy_parser.h"
#include "supervisor/exec/uid_pool.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

TEST_CASE("uid_pool in a policy: parsed, range-checked, written back") {
  auto p = parse_policy("[isolation]\nuid_pool = 2000000000-2000000009\n", "t.policy", "");
  REQUIRE(p.has_value());
  CHECK(p->isolation.uid_pool_first == 2000000000u);
  CHECK(p->isolation.uid_pool_size == 10u);
  auto again = parse_policy(format_policy(*p), "again", "");
  REQUIRE(again.has_value());
  CHECK(again->isolation.uid_pool_first == 2000000000u);
  CHECK(again->isolation.uid_pool_size == 10u);
  for (const char* bad : {"5-10", "2000000010-2000000000", "abc", "2000000000", "2000000000-2000100000",
                          "2147483640-2147483650"}) {
    CAPTURE(bad);
    auto r = parse_policy(std::string("[isolation]\nuid_pool = ") + bad + "\n", "t.policy", "");
    REQUIRE_FALSE(r.has_value());
    CHECK(r.error().rfind("t.policy:2: ", 0) == 0);
  }
}

// Claiming a uid kills whatever still runs under it, so this test uses uids
// far from the shipped policies' pool (a pillbox run beside it keeps its own).
TEST_CASE("uid claims: each uid goes to one claimant at a time, and is free again after release") {
  test::ScratchDir scratch{"uidpool"};
  const std::string& dir = scratch.path;
  {
    auto a = UidClaims::claim(2147480000, 4, 3, dir);
    REQUIRE(a.has_value());
    CHECK((*a)->size() == 3);
    CHECK((*a)->uid(0) == 2147480000u);
    CHECK((*a)->uid(2) == 2147480002u);
    // Another run gets what is left, and no more.
    auto b = UidClaims::claim(2147480000, 4, 1, dir);
    REQUIRE(b.has_value());
    CHECK((*b)->uid(0) == 2147480003u);
    auto c = UidClaims::claim(2147480000, 4, 1, dir);
    REQUIRE_FALSE(c.has_value());
    CHECK(c.error().find("4 are claimed by other pillbox runs") != std::string::npos);
  }
  auto d = UidClaims::claim(2147480000, 4, 4, dir);
  REQUIRE(d.has_value());
  CHECK((*d)->size() == 4);
}

TEST_CASE("uid claims: a uid whose dead processes are not reaped yet is taken last") {
  // Zombies count against RLIMIT_NPROC of their uid until reaped: a fork
  // bomb's, left to a lazy init, made the next run's first exec fail (EAGAIN).
  if (::geteuid() != 0) {
    MESSAGE("skipped: without root no process can take another uid");
    return;
  }
  test::ScratchDir scratch{"uidpool"};
  const std::string& dir = scratch.path;
  const std::uint32_t first = 2147480010;
  const pid_t zombie = ::fork();
  REQUIRE(zombie >= 0);
  if (zombie == 0) {
    if (::setresuid(first, first, first) != 0) _exit(1);
    _exit(0);
  }
  // Dead once waitid says so, and left unreaped (WNOWAIT) for the claims.
  siginfo_t info{};
  REQUIRE(::waitid(P_PID, static_cast<id_t>(zombie), &info, WEXITED | WNOWAIT) == 0);
  REQUIRE(info.si_status == 0);
  {
    auto a = UidClaims::claim(first, 2, 1, dir);
    REQUIRE(a.has_value());
    CHECK((*a)->uid(0) == first + 1);
  }
  {
    // With no clear uid left it is still taken: a few zombies rarely matter.
    auto both = UidClaims::claim(first, 2, 2, dir);
    REQUIRE(both.has_value());
    CHECK((*both)->uid(0) == first + 1);
    CHECK((*both)->uid(1) == first);
  }
  ::waitpid(zombie, nullptr, 0);
  auto after = UidClaims::claim(first, 2, 1, dir);
  REQUIRE(after.has_value());
  CHECK((*after)->uid(0) == first);
}

}  // namespace
}  // namespace pillbox
