#include "supervisor/store/actor.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>

namespace pillbox {

std::string actor_name(const std::string& command) {
  std::string user;
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr) {
    user = pw->pw_name;
  } else {
    user = "uid " + std::to_string(::geteuid());
  }
  if (const char* sudo = std::getenv("SUDO_USER"); sudo != nullptr && *sudo != '\0' && ::geteuid() == 0) {
    user += " (sudo by " + std::string(sudo) + ")";
  }
  return user + " via pillbox " + command + " (pid " + std::to_string(::getpid()) + ")";
}

}  // namespace pillbox
