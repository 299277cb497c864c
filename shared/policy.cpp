#include "shared/policy.h"

#include <algorithm>

#include "shared/sha256.h"

namespace pillbox {
namespace {

// Every field that changes how a child is confined, in a fixed order and
// spelling. The name and origin are left out: the same rules loaded from
// another file or under another name confine a child the same way, and the
// name is shown beside the hash anyway. Bump the version tag when the set of
// fields changes, so old and new identities never collide.
std::string canonical_text(const Policy& p) {
  const Limits& l = p.limits;
  std::string text = "pillbox-policy-v1\n";
  auto field = [&text](std::string_view key, std::string_view value) {
    text.append(key).append("=").append(value).append("\n");
  };
  field("cpu_ms", std::to_string(l.cpu_ms));
  field("wall_ms", std::to_string(l.wall_ms));
  field("memory_bytes", std::to_string(l.memory_bytes));
  field("file_size_bytes", std::to_string(l.file_size_bytes));
  field("open_files", std::to_string(l.open_files));
  field("processes", std::to_string(l.processes));
  field("stack_bytes", std::to_string(l.stack_bytes));
  field("output_bytes", std::to_string(l.output_bytes));
  field("network", p.isolation.network ? "on" : "off");
  field("user", p.isolation.user);
  field("uid_pool", std::to_string(p.isolation.uid_pool_first) + "+" + std::to_string(p.isolation.uid_pool_size));
  field("cgroup", to_string(p.isolation.cgroup));
  field("filesystem", to_string(p.isolation.filesystem));
  // Added after the first identities were recorded: written only when set,
  // so a policy without them keeps the identity it always had.
  if (p.isolation.tmp_bytes != 0) field("tmp_bytes", std::to_string(p.isolation.tmp_bytes));
  for (const std::string& path : p.isolation.writable) field("writable", path);
  for (const std::string& path : p.isolation.shared) field("share", path);
  field("seccomp", p.seccomp.enabled ? "yes" : "no");
  field("seccomp_default", to_string(p.seccomp.default_action));
  // Order and repetition in the allow list do not change the filter.
  std::vector<std::string> allow = p.seccomp.allow;
  std::sort(allow.begin(), allow.end());
  allow.erase(std::unique(allow.begin(), allow.end()), allow.end());
  for (const std::string& name : allow) field("allow", name);
  return text;
}

}  // namespace

bool names_root(std::string_view user) {
  if (user == "root") return true;
  return !user.empty() && user.find_first_not_of('0') == std::string_view::npos;
}

std::vector<std::string> unsafe_settings(const Policy& p) {
  std::vector<std::string> out;
  // With a uid_pool the tasks themselves run as pool uids, but the plugin
  // load check and a run without a pool claim still use `user`: root there
  // is root, pool or not.
  if (names_root(p.isolation.user)) {
    out.push_back("user = " + p.isolation.user +
                  ": tasks (or, with a uid_pool, a plugin's load check) run as root when pillbox does (no "
                  "privilege drop; the seccomp allowlist is all that is left between a payload and the host)");
  }
  if (!p.seccomp.enabled) {
    out.push_back("seccomp enabled = no: no syscall allowlist; a task may call anything its uid may "
                  "(sockets, ptrace, execve of anything)");
  }
  return out;
}

std::string policy_identity(const Policy& policy) {
  return policy.name + "@" + sha256_hex(canonical_text(policy)).substr(0, 12);
}

std::string_view to_string(SeccompDefault action) {
  switch (action) {
    case SeccompDefault::kTrap: return "trap";
    case SeccompDefault::kKill: return "kill";
    case SeccompDefault::kErrno: return "errno";
  }
  return "unknown";
}

std::string_view to_string(CgroupMode mode) {
  switch (mode) {
    case CgroupMode::kAuto: return "auto";
    case CgroupMode::kRequired: return "required";
    case CgroupMode::kOff: return "off";
  }
  return "unknown";
}

std::string_view to_string(FilesystemMode mode) {
  switch (mode) {
    case FilesystemMode::kHost: return "host";
    case FilesystemMode::kReadOnly: return "read-only";
  }
  return "unknown";
}

}  // namespace pillbox
