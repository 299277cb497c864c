#include "supervisor/store/process_claim.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "supervisor/io/regular_file.h"

namespace pillbox::store {
namespace {

// Field 22 of /proc/PID/stat (start time, ticks since boot); "" when there
// is no such process.
std::string start_time_of(long pid) {
  auto read = read_regular_file_at(AT_FDCWD, "/proc/" + std::to_string(pid) + "/stat", 0, 64 << 10);
  const std::string stat = read ? std::move(*read) : std::string();
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return "";
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return field;
  }
  return "";
}

// The kernel's per-boot random id; "" when unreadable. Read once: a run
// may check many claims.
const std::string& boot_id() {
  static const std::string id = [] {
    auto read = read_regular_file_at(AT_FDCWD, "/proc/sys/kernel/random/boot_id", 0, 4096);
    std::string text = read ? std::move(*read) : std::string();
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return text;
  }();
  return id;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  std::size_t from = 0;
  while (true) {
    const auto at = text.find(sep, from);
    parts.push_back(text.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from));
    if (at == std::string_view::npos) return parts;
    from = at + 1;
  }
}

}  // namespace

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

std::string claim_token_of(long pid) {
  return host_name() + ":" + std::to_string(pid) + ":" + start_time_of(pid) + ":" + boot_id();
}

const std::string& process_claim_token() {
  static const std::string token = claim_token_of(::getpid());
  return token;
}

ClaimHolder claim_holder(std::string_view token) {
  const auto parts = split(token, ':');
  if (parts.size() != 3 && parts.size() != 4) return ClaimHolder::kGone;
  const std::string pid_text(parts[1]);
  char* end = nullptr;
  errno = 0;
  const long pid = std::strtol(pid_text.c_str(), &end, 10);
  if (parts[0].empty() || pid_text.empty() || *end != '\0' || pid <= 0 || errno != 0 || parts[2].empty()) {
    return ClaimHolder::kGone;
  }
  if (parts[0] != host_name()) return ClaimHolder::kOtherHost;
  if (parts.size() == 4 && parts[3] != boot_id()) return ClaimHolder::kGone;
  const std::string started = start_time_of(pid);
  return !started.empty() && started == parts[2] ? ClaimHolder::kLive : ClaimHolder::kGone;
}

}  // namespace pillbox::store
