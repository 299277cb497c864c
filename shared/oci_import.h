#pragma once
// Imports the allowlist of an OCI runtime-spec or Docker seccomp profile, so
// a policy can start from a profile people already trust
// (`import_oci = docker-default.json`, docs/policy-format.md).
#include <string>
#include <string_view>
#include <vector>

#include "shared/status.h"

namespace pillbox {

// Returns, sorted and without duplicates, the syscalls the profile allows
// unconditionally on this machine's architecture: entries whose action is
// SCMP_ACT_ALLOW, with no argument conditions, not restricted to other
// architectures and not requiring capabilities. Names libseccomp does not
// know for this architecture are skipped (Docker's profile lists syscalls of
// every arch). Accepts a bare profile or an OCI config.json (linux.seccomp).
// Errors (malformed JSON, a denylist profile, wrong field types) are one line
// starting with `origin: `.
Expected<std::vector<std::string>> import_oci_seccomp(std::string_view json_text,
                                                      std::string_view origin);

}  // namespace pillbox
