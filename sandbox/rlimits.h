#pragma once
// Resource limits of one child (child side). Soft == hard so a child cannot
// raise them back; the CPU hard limit is one second above the soft one so
// SIGXCPU (catchable, reported as cpu-limit) comes first and SIGKILL backs it up.
#include <cstdint>

#include "shared/policy.h"
#include "shared/status.h"

namespace pillbox::sandbox {

// Address space mapped by this process now, from /proc/self/statm. The
// RLIMIT_AS budget is this baseline plus the policy's memory, so the limit is
// about what the task allocates, not about the libraries already mapped.
std::uint64_t current_address_space_bytes();

// Sets CPU, AS, NOFILE, NPROC, CORE=0, STACK. RLIMIT_FSIZE separately (exec
// mode sets it only right before exec, after writing the payload file).
// With a memory cgroup in force, the cgroup is the memory limit (it counts
// what is really used, and its OOM kill is reported as `oom`) and RLIMIT_AS
// is only a backstop at twice the limit; without one, RLIMIT_AS is the limit.
Status apply_rlimits(const Limits& limits, std::uint64_t baseline_address_space, bool memory_cgroup);
Status apply_file_size_limit(std::uint64_t bytes);

// False under AddressSanitizer, whose shadow memory reserves terabytes of
// address space: RLIMIT_AS is skipped and only the cgroup limits memory.
bool address_space_limit_supported();

}  // namespace pillbox::sandbox
