#include "supervisor/store/actor.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace pillbox {
namespace {

// PILLBOX_ACTOR when it is usable (see actor.h), else "".
std::string actor_from_environment() {
  const char* given = std::getenv("PILLBOX_ACTOR");
  if (given == nullptr) return "";
  const std::size_t n = std::strlen(given);
  if (n == 0 || n > kMaxActorEnvBytes) return "";
  const bool printable = std::all_of(given, given + n, [](char c) { return c >= 0x20 && c < 0x7F; });
  return printable ? std::string(given, n) : "";
}

}  // namespace

std::string actor_name(const std::string& command) {
  std::string user = actor_from_environment();
  if (user.empty()) {
    if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr) {
      user = pw->pw_name;
    } else {
      user = "uid " + std::to_string(::geteuid());
    }
    if (const char* sudo = std::getenv("SUDO_USER"); sudo != nullptr && *sudo != '\0' && ::geteuid() == 0) {
      user += " (sudo by " + std::string(sudo) + ")";
    }
  }
  return user + " via pillbox " + command + " (pid " + std::to_string(::getpid()) + ")";
}

}  // namespace pillbox
