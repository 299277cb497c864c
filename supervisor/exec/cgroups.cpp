#include "supervisor/exec/cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>
#include <utility>

#include "supervisor/io/regular_file.h"

namespace pillbox {
namespace {

// More than any cgroup or /proc file read here holds: cgroup.procs of a
// cgroup with every pid the kernel allows (4M, 8 bytes each) is 32 MiB.
constexpr std::uint64_t kMaxControlFileBytes = 64ull << 20;

// The whole file, "" when it cannot be read (the cgroup or the process is gone).
std::string read_file(const std::string& path) {
  auto text = read_regular_file_at(AT_FDCWD, path, 0, kMaxControlFileBytes);
  return text ? std::move(*text) : std::string();
}

UniqueFd open_control(const std::string& path) {
  return UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
}

// A control file kept open at `fd`, reopened at `path` once if reading
// fails; "" when the group is gone.
std::string read_control(UniqueFd& fd, const std::string& path) {
  for (int tries = 0; tries < 2; ++tries) {
    if (!fd.valid() || tries > 0) fd = open_control(path);
    if (!fd.valid()) return {};
    std::string text;
    char buf[4096];
    bool failed = false;
    while (text.size() < kMaxControlFileBytes) {
      const ssize_t n = ::pread(fd.get(), buf, sizeof buf, static_cast<off_t>(text.size()));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        failed = true;
        break;
      }
      if (n == 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    if (!failed) return text;
  }
  return {};
}

Status write_file(const std::string& path, const std::string& value) {
  std::FILE* f = std::fopen(path.c_str(), "we");
  if (!f) return Status::error("cannot open " + path + ": " + std::strerror(errno));
  const bool ok = std::fwrite(value.data(), 1, value.size(), f) == value.size();
  const int close_rc = std::fclose(f);  // cgroup writes report errors at close (flush)
  if (!ok || close_rc != 0) return Status::error("cannot write '" + value + "' to " + path + ": " + std::strerror(errno));
  return Status::ok();
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

Status make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return Status::ok();
  return Status::error("cannot create " + path + ": " + std::strerror(errno));
}

// Our own group path in a controller's hierarchy, from /proc/self/cgroup
// ("4:memory:/a/b" for v1, "0::/a/b" for v2).
std::string own_path(const std::string& controller) {
  std::istringstream in(read_file("/proc/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    const auto c1 = line.find(':');
    const auto c2 = line.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    const std::string controllers = line.substr(c1 + 1, c2 - c1 - 1);
    std::istringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ',')) {
      if (name == controller) return line.substr(c2 + 1);
    }
    if (controller.empty() && controllers.empty()) return line.substr(c2 + 1);
  }
  return {};
}

// Proves we may create a group under `parent` by making and removing one.
Status can_create_under(const std::string& parent) {
  const std::string probe = parent + "/pillbox-probe-" + std::to_string(::getpid());
  if (::mkdir(probe.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::error("cannot create a group under " + parent + " (" + std::strerror(errno) + ")");
  }
  ::rmdir(probe.c_str());
  return Status::ok();
}

std::uint64_t counter_in(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  std::uint64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

bool has_word(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

void kill_listed(const std::string& procs) {
  std::istringstream in(procs);
  pid_t pid;
  while (in >> pid) ::kill(pid, SIGKILL);
}

bool lists_a_process(const std::string& procs) {
  std::istringstream in(procs);
  pid_t pid;
  return static_cast<bool>(in >> pid);
}

void kill_members(const std::string& dir) { kill_listed(read_file(dir + "/cgroup.procs")); }

// Removes the groups of earlier runs whose supervisor died without cleaning
// up (SIGKILL): "pillbox-<pid>" directories whose pid is gone.
void remove_stale_groups(const std::string& parent) {
  DIR* dir = ::opendir(parent.c_str());
  if (dir == nullptr) return;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.rfind("pillbox-", 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + 8, &end, 10);
    if (end == name.c_str() + 8 || *end != '\0' || pid <= 0) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM) continue;  // still running
    const std::string base = parent + "/" + name;
    if (DIR* slots = ::opendir(base.c_str())) {
      while (const dirent* s = ::readdir(slots)) {
        if (std::string(s->d_name).rfind("slot-", 0) == 0) {
          kill_members(base + "/" + s->d_name);
          ::rmdir((base + "/" + s->d_name).c_str());
        }
      }
      ::closedir(slots);
    }
    ::rmdir(base.c_str());
  }
  ::closedir(dir);
}

}  // namespace

std::string_view to_string(CgroupVersion v) {
  switch (v) {
    case CgroupVersion::kNone: return "none";
    case CgroupVersion::kV1: return "v1";
    case CgroupVersion::kV2: return "v2";
  }
  return "?";
}

CgroupProbe probe_cgroups() {
  CgroupProbe p;
  if (exists("/sys/fs/cgroup/cgroup.controllers")) {
    p.version = CgroupVersion::kV2;
    const std::string own = "/sys/fs/cgroup" + own_path("");
    const std::string own_norm = own.back() == '/' ? own.substr(0, own.size() - 1) : own;
    const std::string available = read_file(own_norm + "/cgroup.controllers");
    if (!has_word(available, "memory")) {
      p.detail = "cgroup v2: the memory controller is not delegated to " + own_norm;
      return p;
    }
    // v2's "no internal processes" rule: controllers can only be enabled for
    // children of a group that has no processes of its own.
    const std::string enabled = read_file(own_norm + "/cgroup.subtree_control");
    if (!has_word(enabled, "memory")) {
      if (auto s = write_file(own_norm + "/cgroup.subtree_control", "+memory"); !s) {
        p.detail = "cgroup v2: cannot enable the memory controller below " + own_norm +
                   " (it has processes of its own; start pillbox in a delegated cgroup, e.g. "
                   "systemd-run --scope -p Delegate=yes pillbox ...): " + s.message();
        return p;
      }
    }
    if (auto s = can_create_under(own_norm); !s) {
      p.detail = "cgroup v2: " + s.message();
      return p;
    }
    p.memory_parent = own_norm;
    if (has_word(available, "pids")) {
      if (has_word(enabled, "pids") || write_file(own_norm + "/cgroup.subtree_control", "+pids")) {
        p.pids_parent = own_norm;
      }
    }
    p.detail = "cgroup v2 under " + own_norm + (p.pids_parent.empty() ? " (memory only)" : " (memory, pids)");
    return p;
  }
  if (exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") || exists("/sys/fs/cgroup/memory")) {
    p.version = CgroupVersion::kV1;
    const std::string mem = "/sys/fs/cgroup/memory" + own_path("memory");
    const std::string mem_norm = mem.back() == '/' ? mem.substr(0, mem.size() - 1) : mem;
    if (auto s = can_create_under(mem_norm); !s) {
      p.detail = "cgroup v1: " + s.message();
      return p;
    }
    p.memory_parent = mem_norm;
    const std::string pids = "/sys/fs/cgroup/pids" + own_path("pids");
    const std::string pids_norm = pids.back() == '/' ? pids.substr(0, pids.size() - 1) : pids;
    if (exists(pids_norm + "/cgroup.procs") && can_create_under(pids_norm)) p.pids_parent = pids_norm;
    p.detail = "cgroup v1: memory under " + mem_norm +
               (p.pids_parent.empty() ? " (no pids controller)" : ", pids under " + pids_norm);
    return p;
  }
  p.detail = "no cgroup file system mounted at /sys/fs/cgroup";
  return p;
}

Expected<std::unique_ptr<CgroupSlots>> CgroupSlots::create(const CgroupProbe& probe, std::size_t slots,
                                                           const Limits& limits) {
  if (probe.memory_parent.empty()) return Error{probe.detail};
  remove_stale_groups(probe.memory_parent);
  if (!probe.pids_parent.empty() && probe.pids_parent != probe.memory_parent) remove_stale_groups(probe.pids_parent);
  std::unique_ptr<CgroupSlots> cg(new CgroupSlots());
  cg->version_ = probe.version;
  const std::string name = "/pillbox-" + std::to_string(::getpid());
  const bool v2 = probe.version == CgroupVersion::kV2;

  const std::string mem_base = probe.memory_parent + name;
  if (auto s = make_dir(mem_base); !s) return Error{s.message()};
  cg->created_.push_back(mem_base);
  if (v2) {
    const std::string controllers = probe.pids_parent.empty() ? "+memory" : "+memory +pids";
    if (auto s = write_file(mem_base + "/cgroup.subtree_control", controllers); !s) return Error{s.message()};
  }
  std::string pids_base;
  if (!v2 && !probe.pids_parent.empty()) {
    pids_base = probe.pids_parent + name;
    if (make_dir(pids_base)) cg->created_.push_back(pids_base);
    else pids_base.clear();
  }
  cg->limits_ = limits;
  cg->pids_in_memory_group_ = v2 && !probe.pids_parent.empty();
  for (std::size_t i = 0; i < slots; ++i) {
    const std::string slot = "/slot-" + std::to_string(i);
    const std::string mem = mem_base + slot;
    if (auto s = make_dir(mem); !s) return Error{s.message()};
    cg->created_.push_back(mem);
    if (auto s = cg->set_memory_limits(mem); !s) return Error{s.message()};
    if (v2) {
      cg->pids_dirs_.push_back("");  // same directory as memory in v2
    } else {
      std::string pids_dir;
      if (!pids_base.empty()) {
        pids_dir = pids_base + slot;
        if (make_dir(pids_dir) && write_file(pids_dir + "/pids.max", std::to_string(limits.processes))) {
          cg->created_.push_back(pids_dir);
        } else {
          pids_dir.clear();
        }
      }
      cg->pids_dirs_.push_back(pids_dir);
    }
    cg->memory_dirs_.push_back(mem);
    cg->files_.emplace_back();
    cg->open_slot_files(i);
  }
  cg->detail_ = std::string(v2 ? "cgroup v2" : "cgroup v1") + " memory limit per task under " + mem_base +
                (pids_base.empty() && !(v2 && !probe.pids_parent.empty()) ? " (no pids limit)" : " with a pids limit");
  return cg;
}

Status CgroupSlots::set_memory_limits(const std::string& mem) const {
  const std::string bytes = std::to_string(limits_.memory_bytes);
  if (version_ == CgroupVersion::kV2) {
    if (auto s = write_file(mem + "/memory.max", bytes); !s) return s;
    write_file(mem + "/memory.swap.max", "0");  // absent without swap accounting: fine
    if (pids_in_memory_group_) write_file(mem + "/pids.max", std::to_string(limits_.processes));
    return Status::ok();
  }
  if (auto s = write_file(mem + "/memory.limit_in_bytes", bytes); !s) return s;
  if (exists(mem + "/memory.memsw.limit_in_bytes")) write_file(mem + "/memory.memsw.limit_in_bytes", bytes);
  return Status::ok();
}

void CgroupSlots::open_slot_files(std::size_t slot) {
  const std::string& mem = memory_dirs_[slot];
  SlotFiles& f = files_[slot];
  f.oom_counter = open_control(mem + (version_ == CgroupVersion::kV2 ? "/memory.events" : "/memory.oom_control"));
  if (version_ == CgroupVersion::kV2) f.memory_procs = open_control(mem + "/cgroup.procs");
  f.memory_stat = open_control(mem + "/memory.stat");
}

bool CgroupSlots::renew_if_charged(std::size_t slot) {
  if (slot >= memory_dirs_.size()) return false;
  const std::string& mem = memory_dirs_[slot];
  if (counter_in(read_control(files_[slot].memory_stat, mem + "/memory.stat"), "shmem") == 0) return false;
  // Empty after kill_all, so it can go; the same path made again is a fresh
  // group. The pages stay charged to the old one until their files go.
  if (::rmdir(mem.c_str()) != 0) return false;
  files_[slot].oom_counter.reset();
  files_[slot].memory_procs.reset();
  files_[slot].memory_stat.reset();
  if (!make_dir(mem) || !set_memory_limits(mem)) {
    // The slot's tasks then fail to join it (sandbox-error, never charged)
    // rather than run without a memory limit.
    return false;
  }
  open_slot_files(slot);
  return true;
}

CgroupSlots::~CgroupSlots() {
  for (std::size_t i = 0; i < memory_dirs_.size(); ++i) kill_all(i);
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) ::rmdir(it->c_str());
}

std::vector<std::string> CgroupSlots::procs_files(std::size_t slot) const {
  std::vector<std::string> files;
  if (slot >= memory_dirs_.size()) return files;
  files.push_back(memory_dirs_[slot] + "/cgroup.procs");
  if (!pids_dirs_[slot].empty()) files.push_back(pids_dirs_[slot] + "/cgroup.procs");
  return files;
}

std::uint64_t CgroupSlots::oom_kills(std::size_t slot) {
  if (slot >= memory_dirs_.size()) return 0;
  const char* file = version_ == CgroupVersion::kV2 ? "/memory.events" : "/memory.oom_control";
  return counter_in(read_control(files_[slot].oom_counter, memory_dirs_[slot] + file), "oom_kill");
}

void CgroupSlots::kill_all(std::size_t slot) {
  if (slot >= memory_dirs_.size()) return;
  struct Group {
    UniqueFd* procs;  // kept open (v2), or null: opened for each read (v1, see SlotFiles)
    std::string path;
  };
  UniqueFd* kept = version_ == CgroupVersion::kV2 ? &files_[slot].memory_procs : nullptr;
  std::vector<Group> groups = {{kept, memory_dirs_[slot] + "/cgroup.procs"}};
  if (!pids_dirs_[slot].empty()) groups.push_back({nullptr, pids_dirs_[slot] + "/cgroup.procs"});
  // cgroup.procs lists a process until it has exited; SIGKILL is final, so
  // this converges within a few rounds unless something is stuck in the kernel.
  for (int round = 0; round < 200; ++round) {
    bool all_empty = true;
    for (Group& g : groups) {
      const std::string procs = g.procs != nullptr ? read_control(*g.procs, g.path) : read_file(g.path);
      if (lists_a_process(procs)) {
        all_empty = false;
        kill_listed(procs);
      }
    }
    if (all_empty) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace pillbox
