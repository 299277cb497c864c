#pragma once
// Per-slot cgroups, parent side (the child only writes "0" to the
// cgroup.procs files it is given): <own cgroup>/pillbox-<pid>/slot-N, reused
// from task to task. memory: the policy's limit, and the OOM-kill counter
// that tells `oom` from `killed`; pids: the process limit, where available.
// v1 and v2; when neither is usable, probe_cgroups() says why and the run
// falls back to rlimits.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/policy.h"
#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox {

enum class CgroupVersion { kNone, kV1, kV2 };

struct CgroupProbe {
  CgroupVersion version = CgroupVersion::kNone;
  std::string memory_parent;  // directory where we may create groups ("" = unusable)
  std::string pids_parent;    // same for the pids controller ("" = unusable)
  std::string detail;         // why something is unusable, or what will be used
};

// Looks at /proc/self/cgroup and the mounted hierarchies; creates and removes
// a probe group to prove we may.
CgroupProbe probe_cgroups();

class CgroupSlots {
 public:
  // Creates `slots` groups with the policy's limits. Fails only when nothing
  // could be created; missing pids support is a warning in `detail()`.
  static Expected<std::unique_ptr<CgroupSlots>> create(const CgroupProbe& probe, std::size_t slots,
                                                       const Limits& limits);
  ~CgroupSlots();  // kills what is left, removes the groups

  std::vector<std::string> procs_files(std::size_t slot) const;
  std::uint64_t oom_kills(std::size_t slot);  // monotonic counter of the memory group
  // SIGKILLs every process in the slot's groups and waits (bounded) until
  // they are gone.
  void kill_all(std::size_t slot);
  // After kill_all: replaces the slot's memory group when it still holds
  // tmpfs pages (files left in /dev/shm stay charged to it, unreclaimable
  // without swap, and would get a good payload killed as `oom`). True when
  // replaced.
  bool renew_if_charged(std::size_t slot);
  const std::string& detail() const { return detail_; }
  CgroupVersion version() const { return version_; }

 private:
  CgroupSlots() = default;
  Status set_memory_limits(const std::string& memory_dir) const;
  // Control files read per task, kept open and pread at offset 0 (a
  // seq_file then shows current values), sparing opens per task. Not v1's
  // cgroup.procs: v1 caches an open file's pid list for about a second
  // (CGROUP_PIDLIST_DESTROY_DELAY) and would miss a process that joined
  // since (cgroup_slots_test.cpp hangs without this). A failed read reopens.
  struct SlotFiles {
    UniqueFd oom_counter;    // memory.events (v2) or memory.oom_control (v1)
    UniqueFd memory_procs;   // cgroup.procs of the memory group (v2 only)
    UniqueFd memory_stat;
  };
  void open_slot_files(std::size_t slot);
  CgroupVersion version_ = CgroupVersion::kNone;
  Limits limits_;
  bool pids_in_memory_group_ = false;          // v2 with the pids controller
  std::vector<std::string> created_;           // directories to remove, deepest last
  std::vector<std::string> memory_dirs_;       // per slot
  std::vector<std::string> pids_dirs_;         // per slot ("" when unavailable)
  std::vector<SlotFiles> files_;               // per slot
  std::string detail_;
};

std::string_view to_string(CgroupVersion v);

}  // namespace pillbox
