#include "supervisor/exec/record_policy.h"

#include <algorithm>

#include "shared/embedded_policies.h"
#include "shared/policy_parser.h"

namespace pillbox {
namespace {

std::string joined(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + item;
  return out;
}

// `local` with what the command line of `pillbox run` may change taken from
// `claim`: the candidate a record's text must be identical to.
Policy with_run_flags_of(Policy local, const Policy& claim) {
  local.limits.wall_ms = claim.limits.wall_ms;
  local.limits.cpu_ms = claim.limits.cpu_ms;
  local.limits.memory_bytes = claim.limits.memory_bytes;
  local.limits.output_bytes = claim.limits.output_bytes;
  local.isolation.writable = claim.isolation.writable;
  local.isolation.shared = claim.isolation.shared;
  return local;
}

// What `claim` asks for beyond `shipped` that `allowed` does not cover, each
// as "what it asks (the flag that allows it)".
std::vector<std::string> beyond_allowance(const Policy& shipped, const Policy& claim, const RecordAllowance& allowed) {
  std::vector<std::string> out;
  struct LimitRow {
    const char* key;
    const char* flag;
    std::uint64_t shipped, claimed, allowed;
    const char* unit;
  };
  const LimitRow limits[] = {
      {"wall", "--timeout", shipped.limits.wall_ms, claim.limits.wall_ms, allowed.wall_ms, "ms"},
      {"cpu", "--cpu", shipped.limits.cpu_ms, claim.limits.cpu_ms, allowed.cpu_ms, "ms"},
      {"memory", "--memory", shipped.limits.memory_bytes, claim.limits.memory_bytes, allowed.memory_bytes, ""},
      {"output", "--max-output", shipped.limits.output_bytes, claim.limits.output_bytes, allowed.output_bytes, ""},
  };
  for (const LimitRow& l : limits) {
    if (l.claimed <= l.shipped || l.claimed <= l.allowed) continue;
    const std::string value = std::to_string(l.claimed) + l.unit;
    out.push_back(std::string(l.key) + " = " + value + ", above the shipped " + std::to_string(l.shipped) + l.unit +
                  " (" + l.flag + " " + value + ")");
  }
  auto paths = [&](const char* key, const char* flag, const std::vector<std::string>& claimed,
                   const std::vector<std::string>& given) {
    for (const auto& path : claimed) {
      if (std::find(given.begin(), given.end(), path) != given.end()) continue;
      out.push_back(std::string(key) + " = " + path + " (" + flag + " " + path + ")");
    }
  };
  paths("writable", "--writable", claim.isolation.writable, allowed.writable);
  paths("share", "--share", claim.isolation.shared, allowed.shared);
  return out;
}

const char* const kHowToChoose =
    "run it under a policy of yours instead: --policy NAME (shipped: exec, strict) or --policy FILE";

}  // namespace

std::vector<std::string> settings_no_record_makes(const Policy& claim) {
  std::vector<std::string> out;
  if (claim.allow_unsafe) out.push_back("allow_unsafe = yes");
  if (names_root(claim.isolation.user)) out.push_back("user = " + claim.isolation.user);
  if (!claim.seccomp.enabled) out.push_back("seccomp enabled = no");
  if (claim.isolation.filesystem == FilesystemMode::kHost) out.push_back("filesystem = host");
  if (claim.isolation.network) out.push_back("network = on");
  return out;
}

Expected<Policy> policy_for_record(const std::string& claim_text, const std::string& claim_identity,
                                   const RecordAllowance& allowed) {
  const std::string named = "the record's policy " + (claim_identity.empty() ? std::string("(no identity)") : claim_identity);
  auto claim = parse_claimed_policy(claim_text, named);
  if (!claim) return Error{named + " cannot be read (" + claim.error() + "); " + kHowToChoose, ErrorCode::kUsage};
  if (const auto unsafe = settings_no_record_makes(*claim); !unsafe.empty()) {
    return Error{named + " asks for " + joined(unsafe, ", ") +
                 ": a record never takes confinement away, only a policy file you name does (--policy FILE); " +
                 kHowToChoose,
                 ErrorCode::kUsage};
  }
  const std::string identity = policy_identity(*claim);
  std::vector<std::string> ours;
  for (const EmbeddedPolicy& shipped : embedded_policies()) {
    auto local = parse_policy(shipped.text, "builtin:" + std::string(shipped.name), "");
    if (!local) return Error{local.error()};  // never: the shipped policies are parsed by the tests
    Policy candidate = with_run_flags_of(*local, *claim);
    if (policy_identity(candidate) != identity) {
      ours.push_back(std::string(shipped.name) + " (" + policy_identity(*local) + ")");
      continue;
    }
    if (const auto beyond = beyond_allowance(*local, *claim, allowed); !beyond.empty()) {
      return Error{named + " is the shipped " + std::string(shipped.name) + " policy but asks for " +
                       joined(beyond, ", ") +
                       ": a record never raises a limit or chooses a host path; say so on this command line (the "
                       "flags in parentheses) to run it with them, or run it under --policy NAME or --policy FILE",
                   ErrorCode::kUsage};
    }
    return candidate;
  }
  return Error{named + " is none of this machine's shipped policies " + joined(ours, ", ") +
               ", whatever its limits and --writable/--share paths (it may be a policy file of yours, or another "
               "pillbox version's); a record never chooses its own policy: " + kHowToChoose,
               ErrorCode::kUsage};
}

std::vector<std::string> run_flags_for(const Policy& shipped, const Policy& policy) {
  std::vector<std::string> flags;
  auto limit = [&](const char* flag, std::uint64_t have, std::uint64_t want, const char* unit) {
    if (have != want) flags.insert(flags.end(), {flag, std::to_string(want) + unit});
  };
  limit("--timeout", shipped.limits.wall_ms, policy.limits.wall_ms, "ms");
  limit("--cpu", shipped.limits.cpu_ms, policy.limits.cpu_ms, "ms");
  limit("--memory", shipped.limits.memory_bytes, policy.limits.memory_bytes, "");
  limit("--max-output", shipped.limits.output_bytes, policy.limits.output_bytes, "");
  // The run adds these to the shipped policy's own paths (none are shipped).
  auto paths = [&](const char* flag, const std::vector<std::string>& have, const std::vector<std::string>& want) {
    for (const auto& path : want) {
      if (std::find(have.begin(), have.end(), path) == have.end()) flags.insert(flags.end(), {flag, path});
    }
  };
  paths("--writable", shipped.isolation.writable, policy.isolation.writable);
  paths("--share", shipped.isolation.shared, policy.isolation.shared);
  return flags;
}

}  // namespace pillbox
