#pragma once
// Per-task cgroups, parent side (the child only writes "0" to the
// cgroup.procs files it is given). One group per job slot, reused from task
// to task (made anew when a task left tmpfs pages charged to it), under
// <own cgroup>/pillbox-<pid>/slot-N:
//   memory: the policy's memory limit; its OOM-kill counter tells `oom` from
//           `killed`;
//   pids:   the policy's process limit (fork bombs), where available.
// cgroup v1 (separate hierarchies) and v2 (unified) are both handled; when
// neither can be used, probe() says why and the run falls back to rlimits.
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
  // SIGKILLs every process still in the slot's groups, waits until they are gone
  // (bounded), so the next task starts in an empty group.
  void kill_all(std::size_t slot);
  // After kill_all: when the slot's memory group still holds tmpfs pages
  // (files a task wrote to /dev/shm and left there: they stay charged to the
  // group that wrote them, and without swap nothing can reclaim them), it is
  // replaced by a fresh one. Otherwise they would count against the next
  // tasks of the slot, and a good payload would be killed as `oom`. True
  // when it was replaced.
  bool renew_if_charged(std::size_t slot);
  const std::string& detail() const { return detail_; }
  CgroupVersion version() const { return version_; }

 private:
  CgroupSlots() = default;
  Status set_memory_limits(const std::string& memory_dir) const;
  // The control files read per task, kept open per slot and read with
  // pread at offset 0: they are seq_files, and a read at offset 0 makes the
  // kernel show their current values again. Per task this spares an open,
  // fstat and close of the OOM counter (twice) and memory.stat, and in v2
  // of cgroup.procs. Not v1's cgroup.procs: v1 keeps the pid list it built
  // for an open file and shows it again for about a second (the kernel's
  // CGROUP_PIDLIST_DESTROY_DELAY), so a kept file would miss a process that
  // joined since; it is opened anew for each read (cgroup_slots_test.cpp
  // hangs on v1 without this). An fd is reopened when reading it fails (its
  // group was made anew), and when it cannot be, the read is what a read
  // by path gives: nothing.
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
