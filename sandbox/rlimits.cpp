#include "sandbox/rlimits.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

namespace pillbox::sandbox {
namespace {

Status set(int resource, const char* name, std::uint64_t value) {
  rlimit rl{};
  rl.rlim_cur = value;
  rl.rlim_max = value;
  if (::setrlimit(resource, &rl) != 0) {
    return Status::error(std::string("setrlimit(") + name + ", " + std::to_string(value) +
                         "): " + std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace

bool address_space_limit_supported() {
#if defined(PILLBOX_SANITIZED)
  return false;
#else
  return true;
#endif
}

std::uint64_t current_address_space_bytes() {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const unsigned long long pages = std::strtoull(buf, nullptr, 10);
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

Status apply_rlimits(const Limits& limits, std::uint64_t baseline_address_space, bool memory_cgroup) {
  const std::uint64_t cpu_s = (limits.cpu_ms + 999) / 1000;
  rlimit cpu{};
  cpu.rlim_cur = cpu_s;
  cpu.rlim_max = cpu_s + 1;
  if (::setrlimit(RLIMIT_CPU, &cpu) != 0) {
    return Status::error(std::string("setrlimit(RLIMIT_CPU): ") + std::strerror(errno));
  }
  if (auto s = set(RLIMIT_CORE, "RLIMIT_CORE", 0); !s) return s;
  if (auto s = set(RLIMIT_STACK, "RLIMIT_STACK", limits.stack_bytes); !s) return s;
  if (auto s = set(RLIMIT_NOFILE, "RLIMIT_NOFILE", limits.open_files); !s) return s;
  if (auto s = set(RLIMIT_NPROC, "RLIMIT_NPROC", limits.processes); !s) return s;
  if (address_space_limit_supported()) {
    const std::uint64_t budget = memory_cgroup ? 2 * limits.memory_bytes : limits.memory_bytes;
    if (auto s = set(RLIMIT_AS, "RLIMIT_AS", baseline_address_space + budget); !s) return s;
  }
  return Status::ok();
}

Status apply_file_size_limit(std::uint64_t bytes) { return set(RLIMIT_FSIZE, "RLIMIT_FSIZE", bytes); }

}  // namespace pillbox::sandbox
