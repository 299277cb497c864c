#include "supervisor/serve/store_presence.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pillbox::serve {

StorePresence::StorePresence(const std::string& store_dir) : path_(store_dir + "/pillbox.db") {
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) {
    dev_ = st.st_dev;
    ino_ = st.st_ino;
    known_ = true;
  }
}

std::optional<std::string> StorePresence::problem() const {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return "the store's database " + path_ + " is gone (removed or moved away while pillbox serve ran): put it "
             "back to serve it again, or stop pillbox serve";
    }
    return "the store's database " + path_ + " cannot be reached: " + std::strerror(errno) +
           " (check the store directory's permissions)";
  }
  if (!known_ || st.st_dev != dev_ || st.st_ino != ino_) {
    return "the store's database " + path_ + " was replaced while pillbox serve ran (a copy or another store is "
           "there now): restart pillbox serve to show it";
  }
  if (::access(path_.c_str(), R_OK | W_OK) != 0) {
    return "the store's database " + path_ + " cannot be read or written: " + std::strerror(errno) +
           " (its mode was changed while pillbox serve ran; give it back mode 0600 to the store's owner)";
  }
  return std::nullopt;
}

}  // namespace pillbox::serve
