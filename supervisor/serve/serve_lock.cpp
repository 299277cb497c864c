#include "supervisor/serve/serve_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "supervisor/io/terminal_text.h"  // table_cell: the file may hold anything

namespace pillbox::serve {

std::string serve_lock_path(const std::string& token_file) {
  constexpr std::string_view kSuffix = ".token";
  const std::string_view name(token_file);
  if (name.size() > kSuffix.size() && name.substr(name.size() - kSuffix.size()) == kSuffix) {
    return token_file.substr(0, token_file.size() - kSuffix.size()) + ".lock";
  }
  return token_file + ".lock";
}

Expected<UniqueFd> take_serve_lock(const std::string& token_file, const std::string& url) {
  const std::string path = serve_lock_path(token_file);
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return Error{"cannot open " + path + ": " + std::strerror(errno)};
  // Only a lock file of ours is written into: never another program's file
  // of that name, nor one hard-linked elsewhere.
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != ::geteuid()) {
    return Error{path + " is not a lock file of pillbox serve (a regular file of this user with one link); move it "
                        "away, or give --token-file another name"};
  }
  if ((st.st_mode & 0777) != 0600) (void)::fchmod(fd.get(), 0600);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Error{"cannot lock " + path + ": " + std::strerror(errno)};
    // Who holds it: what it wrote (it may not have yet, just after its lock).
    char held[512] = {};
    const ssize_t n = ::pread(fd.get(), held, sizeof held - 1, 0);
    std::string who(held, n > 0 ? static_cast<std::size_t>(n) : 0);
    if (!who.empty() && who.back() == '\n') who.pop_back();
    const auto space = who.find(' ');
    const std::string holder = space == std::string::npos
                                   ? std::string("its pid not written yet")
                                   : "pid " + who.substr(0, space) + ", " + who.substr(space + 1);
    return Error{"another pillbox serve (" + table_cell(holder, 300) + ") is serving with the token file " + token_file +
                 "; stop it or use its token"};
  }
  const std::string mine = std::to_string(::getpid()) + " " + url + "\n";
  if (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), mine.data(), mine.size(), 0) != static_cast<ssize_t>(mine.size())) {
    return Error{"cannot write " + path + ": " + std::strerror(errno)};
  }
  return fd;
}

}  // namespace pillbox::serve
