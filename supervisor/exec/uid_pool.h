#pragma once
// Claims one uid per job slot from a policy's uid_pool for a run: an flock
// on /run/pillbox/uids/<uid>.lock, so concurrent runs never share a uid and
// a killed run's claims vanish with it. A claimed uid's leftover processes
// are killed first; a uid with unreaped zombies is taken last.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shared/status.h"
#include "shared/unique_fd.h"

namespace pillbox {

class UidClaims {
 public:
  // Claims `count` uids from [first, first + size). Fails with a message
  // saying how many are in use when the pool cannot provide them.
  static Expected<std::unique_ptr<UidClaims>> claim(std::uint32_t first, std::uint32_t size, std::size_t count,
                                                    const std::string& lock_dir = "/run/pillbox/uids");
  std::uint32_t uid(std::size_t slot) const { return uids_.at(slot); }
  std::size_t size() const { return uids_.size(); }
  // The claims' lock fds: a process holding copies keeps the uids claimed.
  std::vector<int> lock_fds() const {
    std::vector<int> fds;
    for (const auto& fd : locks_) fds.push_back(fd.get());
    return fds;
  }

 private:
  UidClaims() = default;
  std::vector<std::uint32_t> uids_;
  std::vector<UniqueFd> locks_;
};

// SIGKILLs, as root, every process whose real, effective or saved uid is
// `uid` until none is left (shared/uid_sweep.h). Returns the signals sent.
int kill_processes_of_uid(std::uint32_t uid);

}  // namespace pillbox
