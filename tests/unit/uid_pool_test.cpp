#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

#include "shared/policy_parser.h"
#include "supervisor/uid_pool.h"

namespace pillbox {
namespace {

std::string temp_dir() {
  std::string templ = "/tmp/pillbox-uidpool-XXXXXX";
  REQUIRE(::mkdtemp(templ.data()) != nullptr);
  return templ;
}

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
  const std::string dir = temp_dir();
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
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pillbox
