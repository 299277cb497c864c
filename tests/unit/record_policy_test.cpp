// A record's policy text is a claim (supervisor/exec/record_policy.h): what
// runs is a shipped policy with the record's limits and paths, or nothing.
#include <doctest/doctest.h>

#include <string>

#include "shared/policy_parser.h"
#include "supervisor/exec/record_policy.h"

using namespace pillbox;

namespace {

Policy shipped(const std::string& name) {
  auto p = resolve_policy(name);
  REQUIRE(p.has_value());
  return *p;
}

std::string text_of(const Policy& p) { return format_policy(p); }

}  // namespace

TEST_CASE("record policy: a shipped policy's own text runs as that shipped policy") {
  for (const char* name : {"exec", "strict"}) {
    CAPTURE(name);
    const Policy p = shipped(name);
    auto got = policy_for_record(text_of(p), policy_identity(p));
    REQUIRE(got.has_value());
    CHECK(policy_identity(*got) == policy_identity(p));
    CHECK(got->origin == std::string("builtin:") + name);
  }
}

TEST_CASE("record policy: lower limits are the record's; raised limits and host paths only when the command line says them again") {
  Policy p = shipped("exec");
  p.limits.wall_ms = 45'000;
  p.limits.cpu_ms = 20'000;
  p.limits.memory_bytes = 2ull << 30;
  p.limits.output_bytes = 1ull << 20;  // lower than the shipped 16M: taken as it is
  p.isolation.writable = {"/srv/out"};
  p.isolation.shared = {"/tmp/inputs"};
  auto refused = policy_for_record(text_of(p), policy_identity(p));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error_code() == ErrorCode::kUsage);
  for (const char* flag : {"(--timeout 45000ms)", "(--cpu 20000ms)", "(--memory 2147483648)", "(--writable /srv/out)",
                           "(--share /tmp/inputs)"}) {
    CAPTURE(flag);
    CHECK(refused.error().find(flag) != std::string::npos);
  }
  CHECK(refused.error().find("--max-output") == std::string::npos);
  CHECK(refused.error().find("a record never raises a limit or chooses a host path") != std::string::npos);

  RecordAllowance allowed;
  allowed.wall_ms = 45'000;
  allowed.cpu_ms = 60'000;  // more than asked: enough
  allowed.memory_bytes = 2ull << 30;
  allowed.writable = {"/srv/out"};
  allowed.shared = {"/tmp/inputs"};
  auto got = policy_for_record(text_of(p), policy_identity(p), allowed);
  REQUIRE(got.has_value());
  CHECK(policy_identity(*got) == policy_identity(p));
  // One path short: refused again, naming only it.
  allowed.shared.clear();
  auto short_one = policy_for_record(text_of(p), policy_identity(p), allowed);
  REQUIRE_FALSE(short_one.has_value());
  CHECK(short_one.error().find("share = /tmp/inputs (--share /tmp/inputs)") != std::string::npos);
  CHECK(short_one.error().find("--writable") == std::string::npos);

  // A bundle's script: the record's lower limits as flags (no raised ones,
  // no paths: those records make it stop).
  Policy lower = shipped("exec");
  lower.limits.wall_ms = 5'000;
  lower.limits.output_bytes = 1ull << 20;
  auto taken = policy_for_record(text_of(lower), policy_identity(lower));
  REQUIRE(taken.has_value());
  CHECK(run_flags_for(shipped("exec"), *taken) ==
        std::vector<std::string>{"--timeout", "5000ms", "--max-output", "1048576"});
  CHECK(run_flags_for(shipped("exec"), shipped("exec")).empty());
}

TEST_CASE("record policy: a claim's import_oci is refused, never read") {
  const std::string text = text_of(shipped("exec")) + "import_oci = /etc/passwd\n";
  auto got = policy_for_record(text, "exec@x");
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error().find("import_oci is not taken from this text") != std::string::npos);
}

TEST_CASE("record policy: every setting that takes confinement away is refused and named, even all at once") {
  Policy p = shipped("exec");
  p.allow_unsafe = true;
  p.isolation.user = "root";
  p.isolation.uid_pool_first = p.isolation.uid_pool_size = 0;
  p.seccomp.enabled = false;
  p.isolation.filesystem = FilesystemMode::kHost;
  p.isolation.tmp_bytes = 0;
  p.isolation.network = true;
  CHECK(settings_no_record_makes(p) == std::vector<std::string>{"allow_unsafe = yes", "user = root",
                                                                 "seccomp enabled = no", "filesystem = host",
                                                                 "network = on"});
  auto got = policy_for_record(text_of(p), "exec@forged");
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error_code() == ErrorCode::kUsage);
  CHECK(got.error().find("the record's policy exec@forged asks for allow_unsafe = yes, user = root, seccomp "
                         "enabled = no, filesystem = host, network = on") == 0);
  // One alone is enough.
  Policy net = shipped("exec");
  net.isolation.network = true;
  auto one = policy_for_record(text_of(net), policy_identity(net));
  REQUIRE_FALSE(one.has_value());
  CHECK(one.error().find("asks for network = on:") != std::string::npos);
}

TEST_CASE("record policy: anything else that differs from every shipped policy is refused, naming both identities") {
  Policy p = shipped("exec");
  p.seccomp.allow.push_back("ptrace");
  auto got = policy_for_record(text_of(p), policy_identity(p));
  REQUIRE_FALSE(got.has_value());
  CHECK(got.error().find("the record's policy " + policy_identity(p) + " is none of this machine's shipped policies "
                         "exec (" + policy_identity(shipped("exec")) + "), strict (" +
                         policy_identity(shipped("strict")) + ")") == 0);
  CHECK(got.error().find("--policy NAME (shipped: exec, strict) or --policy FILE") != std::string::npos);
  Policy user = shipped("exec");
  user.isolation.user = "daemon";
  CHECK_FALSE(policy_for_record(text_of(user), policy_identity(user)).has_value());
  Policy procs = shipped("exec");
  procs.limits.processes = 4096;  // not one of run's flags
  CHECK_FALSE(policy_for_record(text_of(procs), policy_identity(procs)).has_value());
  auto garbage = policy_for_record("[policy]\nname = \x01\n", "x");
  REQUIRE_FALSE(garbage.has_value());
  CHECK(garbage.error().find("cannot be read") != std::string::npos);
}
