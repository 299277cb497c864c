#pragma once
// Linux namespaces for the child side. The zygote enters them once at start
// (its children inherit them: a network namespace per task would cost
// milliseconds each); a spawned child enters them itself. Each one is best
// effort: what the host refuses is reported, never silently skipped.
#include <string>
#include <vector>

#include "shared/policy.h"

namespace pillbox::sandbox {

struct NamespaceOutcome {
  std::vector<std::string> entered;   // "net", "ipc", "uts", "mount(read-only)"
  std::vector<std::string> warnings;  // "network namespace unavailable (EPERM): children share the host network"
};

NamespaceOutcome enter_namespaces(const Isolation& isolation);

}  // namespace pillbox::sandbox
