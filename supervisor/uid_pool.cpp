#include "supervisor/uid_pool.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace pillbox {

Expected<std::unique_ptr<UidClaims>> UidClaims::claim(std::uint32_t first, std::uint32_t size, std::size_t count,
                                                      const std::string& lock_dir) {
  std::error_code ec;
  std::filesystem::create_directories(lock_dir, ec);
  if (ec) return Error{"cannot create " + lock_dir + " for uid pool claims: " + ec.message()};
  ::chmod(lock_dir.c_str(), 0700);
  std::unique_ptr<UidClaims> claims(new UidClaims());
  std::size_t busy = 0;
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
    claims->uids_.push_back(static_cast<std::uint32_t>(uid));
    claims->locks_.push_back(std::move(fd));
  }
  if (claims->uids_.size() < count) {
    return Error{"the policy's uid_pool (" + std::to_string(size) + " uids from " + std::to_string(first) +
                 ") cannot give " + std::to_string(count) + " job slots a uid each: " + std::to_string(busy) +
                 " are claimed by other pillbox runs; lower --jobs or widen uid_pool"};
  }
  return claims;
}

int kill_processes_of_uid(std::uint32_t uid) {
  int killed = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || pid <= 0) continue;
    std::ifstream status(std::string("/proc/") + e->d_name + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("Uid:", 0) != 0) continue;
      std::istringstream fields(line.substr(4));
      std::uint64_t real = 0;
      if (fields >> real && real == uid && ::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
      break;
    }
  }
  ::closedir(proc);
  return killed;
}

}  // namespace pillbox
