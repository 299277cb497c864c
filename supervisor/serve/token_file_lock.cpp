#include "supervisor/serve/token_file_lock.h"

#include <fcntl.h>
#include <sys/file.h>

#include <cerrno>
#include <cstring>

namespace pillbox::serve {

Expected<UniqueFd> lock_token_file(const std::string& token_file) {
  const std::string path = token_file + ".lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return Error{"cannot open " + path + ": " + std::strerror(errno)};
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) {
      return Error{"another pillbox serve is running with the token file " + token_file +
                   " (it holds " + path + "); a second would replace its token: stop it, or give --token-file FILE"};
    }
    return Error{"cannot lock " + path + ": " + std::strerror(errno)};
  }
  return fd;
}

}  // namespace pillbox::serve
