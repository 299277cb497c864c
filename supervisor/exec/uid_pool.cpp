#include "supervisor/exec/uid_pool.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "shared/uid_sweep.h"

namespace pillbox {

Expected<std::unique_ptr<UidClaims>> UidClaims::claim(std::uint32_t first, std::uint32_t size, std::size_t count,
                                                      const std::string& lock_dir) {
  std::error_code ec;
  std::filesystem::create_directories(lock_dir, ec);
  if (ec) return Error{"cannot create " + lock_dir + " for uid pool claims: " + ec.message()};
  ::chmod(lock_dir.c_str(), 0700);
  std::unique_ptr<UidClaims> claims(new UidClaims());
  std::size_t busy = 0;
  // Uids whose killed leftovers are still zombies (a container's init may
  // reap them in its own time): they count against RLIMIT_NPROC of the uid,
  // so a slot given one could fail its first fork or exec. Claimed only when
  // the pool has no clear uid left.
  struct Unreaped {
    std::uint32_t uid;
    UniqueFd lock;
  };
  std::vector<Unreaped> unreaped;
  for (std::uint64_t uid = first; uid < std::uint64_t{first} + size && claims->uids_.size() < count; ++uid) {
    const std::string path = lock_dir + "/" + std::to_string(uid) + ".lock";
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd.valid()) return Error{"cannot open " + path + ": " + std::strerror(errno)};
    if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) return Error{"cannot lock " + path + ": " + std::strerror(errno)};
      ++busy;
      continue;
    }
    kill_processes_of_uid(static_cast<std::uint32_t>(uid));
    if (count_zombies_of(static_cast<std::uint32_t>(uid)) > 0) {
      unreaped.push_back({static_cast<std::uint32_t>(uid), std::move(fd)});
      continue;
    }
    claims->uids_.push_back(static_cast<std::uint32_t>(uid));
    claims->locks_.push_back(std::move(fd));
  }
  for (auto& u : unreaped) {
    if (claims->uids_.size() >= count) break;
    claims->uids_.push_back(u.uid);
    claims->locks_.push_back(std::move(u.lock));
  }
  if (claims->uids_.size() < count) {
    return Error{"the policy's uid_pool (" + std::to_string(size) + " uids from " + std::to_string(first) +
                 ") cannot give " + std::to_string(count) + " job slots a uid each: " + std::to_string(busy) +
                 " are claimed by other pillbox runs; lower --jobs or widen uid_pool"};
  }
  return claims;
}

int kill_processes_of_uid(std::uint32_t uid) {
  // Until none is left (a leftover of a killed run may still fork), and
  // never through a recycled pid (shared/uid_sweep.h).
  return sweep_uids(&uid, 1, 1000);
}

}  // namespace pillbox
