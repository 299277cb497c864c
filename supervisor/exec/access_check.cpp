#include "supervisor/exec/access_check.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include "shared/control.h"
#include "shared/task_input.h"
#include "shared/unique_fd.h"

namespace pillbox {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxInterpreterDepth = 4;     // Linux follows at most 4 levels of #! itself
constexpr std::size_t kScriptScanBytes = 64 * 1024;
constexpr int kMissing = 0;  // an AccessNeed that no uid can meet: the path does not exist

// The type bits (S_IFMT) of what `path` names, symlinks followed; 0 when nothing does.
mode_t file_type(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

// The first kScriptScanBytes of a regular file, else "". Anything else is
// only looked at through O_PATH: opening a device is an action (a tape
// rewinds, a watchdog starts, a terminal may become ours).
std::string head_of(const std::string& path) {
  UniqueFd where(::open(path.c_str(), O_PATH | O_CLOEXEC));
  if (!where.valid()) return {};
  struct stat st {};
  if (::fstat(where.get(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  const std::string same = "/proc/self/fd/" + std::to_string(where.get());  // this inode, not the path again
  UniqueFd fd(::open(same.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (!fd.valid()) return {};
  std::string text(kScriptScanBytes, '\0');
  const ssize_t n = ::read(fd.get(), text.data(), text.size());
  text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
  return text;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string unquote(std::string w) {
  if (w.size() >= 2 && (w.front() == '"' || w.front() == '\'') && w.back() == w.front()) return w.substr(1, w.size() - 2);
  return w;
}

// NAME looked up in `path_list` as execvp would (the first executable file).
std::string look_up(const std::string& name, const std::string& path_list) {
  std::istringstream dirs(path_list);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0 && file_type(candidate) != S_IFDIR) return candidate;
  }
  return {};
}

void add(std::vector<AccessNeed>& needs, std::set<std::string>& seen, std::string path, int mode, std::string what) {
  if (!seen.insert(path).second) return;
  needs.push_back({std::move(path), mode, std::move(what)});
}

// A path an argument names must be readable (and enterable). A FIFO is
// refused: every task opening it would wait for a writer until its wall
// limit, and be charged.
void add_path_argument(std::vector<AccessNeed>& needs, std::set<std::string>& seen, const std::string& path,
                       const std::string& what) {
  if (path.empty() || file_type(path) == 0) return;
  if (file_type(path) == S_IFIFO) {
    add(needs, seen, path, kMissing, what + ", is a FIFO: every task that opens it would wait for a writer");
    return;
  }
  add(needs, seen, path, file_type(path) == S_IFDIR ? (R_OK | X_OK) : R_OK, what);
}

// A program and, when it is a script, its interpreter chain and what its
// `exec` lines run.
void add_program(std::vector<AccessNeed>& needs, std::set<std::string>& seen, const std::string& program,
                 const std::string& what, const std::string& task_path, int depth) {
  // Each program once: scripts naming themselves or each other would
  // otherwise be scanned exponentially, and the check never end.
  if (seen.count(program) != 0) return;
  // execve runs regular files only: a FIFO or a device named as an
  // interpreter fails in every task (EACCES, whatever its mode bits say).
  struct stat st {};
  if (::stat(program.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    add(needs, seen, program, kMissing, what + ": it is not a regular file, so it cannot be executed");
    return;
  }
  const std::string text = head_of(program);
  const bool script = text.starts_with("#!");
  add(needs, seen, program, script ? (R_OK | X_OK) : X_OK, what);
  if (!script || depth >= kMaxInterpreterDepth) return;

  const std::vector<std::string> shebang = words(text.substr(2, text.find('\n') - 2));
  if (!shebang.empty()) {
    std::string interpreter = shebang[0];
    std::string how = "the interpreter of " + program;
    if (fs::path(interpreter).filename() == "env") {
      add_program(needs, seen, interpreter, how, task_path, depth + 1);
      for (std::size_t i = 1; i < shebang.size(); ++i) {
        if (shebang[i].starts_with("-")) continue;  // env -S, -i, ...
        if (shebang[i].find('=') != std::string::npos) continue;  // NAME=VALUE
        const std::string found = shebang[i].find('/') == std::string::npos ? look_up(shebang[i], task_path) : shebang[i];
        if (found.empty()) {
          add(needs, seen, shebang[i], kMissing, how + ", run through env: it is not in the task's PATH (" + task_path +
                                                     "; exec programs get no other)");
        } else {
          add_program(needs, seen, found, how + " (via env, in the task's PATH " + task_path + ")", task_path,
                      depth + 1);
        }
        break;
      }
    } else if (file_type(interpreter) == 0) {
      add(needs, seen, interpreter, kMissing, how + ": it does not exist");
    } else {
      add_program(needs, seen, interpreter, how, task_path, depth + 1);
    }
  }
  // Version-manager shims (pyenv, rbenv, asdf) end in a line such as
  //   exec "/root/.pyenv/libexec/pyenv" exec "$program" "$@"
  // which runs on every call: what it names must be executable too.
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const std::vector<std::string> w = words(line);
    if (w.size() < 2 || w[0] != "exec") continue;
    const std::string target = unquote(w[1]);
    if (target.starts_with("/") && file_type(target) != 0) {
      add_program(needs, seen, target, "run by the script " + program + " (its exec line)", task_path, depth + 1);
      // And the files it hands that program (exec /usr/bin/python3
      // /opt/app/main.py "$@"): unreadable, every task would fail on them.
      for (std::size_t i = 2; i < w.size(); ++i) {
        const std::string a = unquote(w[i]);
        if (a.starts_with("/")) add_path_argument(needs, seen, a, "named by the exec line of the script " + program);
      }
    }
  }
}

bool allowed_by_bits(const struct stat& st, int mode, std::uint32_t uid, std::uint32_t gid) {
  int shift = 0;  // others
  if (st.st_uid == uid) shift = 6;
  else if (st.st_gid == gid) shift = 3;
  const unsigned bits = (st.st_mode >> shift) & 7u;
  if ((mode & R_OK) && !(bits & 4u)) return false;
  if ((mode & W_OK) && !(bits & 2u)) return false;
  if ((mode & X_OK) && !(bits & 1u)) return false;
  return true;
}

std::string owner_name(uid_t uid) {
  if (const passwd* pw = ::getpwuid(uid)) return pw->pw_name;
  return "uid " + std::to_string(uid);
}

std::string mode_text(const struct stat& st) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return buf;
}

std::string mode_words(int mode) {
  if ((mode & R_OK) && (mode & X_OK)) return "read and execute";
  if (mode & X_OK) return "execute";
  return "read";
}

}  // namespace

std::vector<AccessNeed> command_access_needs(const std::vector<std::string>& argv, const std::string& task_path) {
  std::vector<AccessNeed> needs;
  std::set<std::string> seen;
  if (argv.empty()) return needs;
  add_program(needs, seen, argv[0], "the command", task_path, 0);
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (has_replacement_string(a)) continue;  // the payload's file, or made from the key
    std::string candidate = a;
    if (a.starts_with("-")) {  // --config=/etc/x.conf
      const auto eq = a.find('=');
      if (eq == std::string::npos) continue;
      candidate = a.substr(eq + 1);
    }
    add_path_argument(needs, seen, candidate, "argument " + std::to_string(i) + " of the command");
  }
  return needs;
}

std::string explain_denial(const std::string& path, int mode, std::uint32_t uid, std::uint32_t gid) {
  std::error_code ec;
  const fs::path full = fs::absolute(path, ec).lexically_normal();
  fs::path prefix;
  for (auto it = full.begin(); it != full.end(); ++it) {
    prefix /= *it;
    const bool last = std::next(it) == full.end();
    struct stat st {};
    if (::stat(prefix.c_str(), &st) != 0) break;
    if (!last) {
      if (!allowed_by_bits(st, X_OK, uid, gid)) {
        return "directory " + prefix.string() + " is mode " + mode_text(st) + ", owner " + owner_name(st.st_uid) +
               ": uid " + std::to_string(uid) + " cannot enter it";
      }
      continue;
    }
    if (!allowed_by_bits(st, mode, uid, gid)) {
      return (S_ISDIR(st.st_mode) ? "directory " : "file ") + prefix.string() + " is mode " + mode_text(st) +
             ", owner " + owner_name(st.st_uid) + ": uid " + std::to_string(uid) + " may not " + mode_words(mode) + " it";
    }
  }
  return "access(2) refuses it (an ACL, a mount option such as noexec, or a security module)";
}

Status check_access_as(const std::vector<AccessNeed>& needs, std::uint32_t uid, std::uint32_t gid) {
  if (needs.empty()) return Status::ok();
  for (const AccessNeed& n : needs) {
    if (n.mode == kMissing) return Status::error("cannot run the command: " + n.path + ", " + n.what);
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::error(std::string("pipe2: ") + std::strerror(errno));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  // The child of a possibly multi-threaded process: raw system calls only,
  // on strings prepared here.
  std::vector<const char*> paths;
  for (const auto& n : needs) paths.push_back(n.path.c_str());
  const pid_t pid = ::fork();
  if (pid < 0) return Status::error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    int answer = -2;  // could not become the uid
    if (::syscall(SYS_setgroups, 0, nullptr) == 0 && ::syscall(SYS_setresgid, gid, gid, gid) == 0 &&
        ::syscall(SYS_setresuid, uid, uid, uid) == 0) {
      answer = -1;  // all allowed
      for (std::size_t i = 0; i < paths.size(); ++i) {
        if (::access(paths[i], needs[i].mode) != 0) {
          answer = static_cast<int>(i);
          break;
        }
      }
    }
    (void)!::write(write_end.get(), &answer, sizeof answer);
    _exit(0);
  }
  write_end.reset();
  int answer = -3;
  while (::read(read_end.get(), &answer, sizeof answer) < 0 && errno == EINTR) {
  }
  while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (answer == -1) return Status::ok();
  if (answer < 0 || static_cast<std::size_t>(answer) >= needs.size()) {
    return Status::error("cannot check what uid " + std::to_string(uid) + " may run (the check itself failed)");
  }
  const AccessNeed& n = needs[static_cast<std::size_t>(answer)];
  return Status::error("tasks run as uid " + std::to_string(uid) +
                       " (as root, pillbox never runs a task as root: each job slot has its own unprivileged uid), "
                       "and that uid may not " + mode_words(n.mode) + " " + n.path + ", " + n.what + ": " +
                       explain_denial(n.path, n.mode, uid, gid) +
                       "; install it where others may " + mode_words(n.mode) + " it, or grant them access");
}

Status check_command_access(const ChildConfig& config, std::uint32_t uid, std::uint32_t gid) {
  if (!config.exec_mode()) return Status::ok();
  std::vector<AccessNeed> needs = command_access_needs(config.exec_argv, kExecTaskPath);
  // The shares must be readable (and enterable); that each exists is
  // check_host_view's (host_view.h).
  for (const std::string& path : config.policy.isolation.shared) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;
    needs.push_back({path, S_ISDIR(st.st_mode) ? (R_OK | X_OK) : R_OK, "shared with tasks (--share or `share =` in the policy)"});
  }
  if (!config.drop_privileges) {
    // Tasks run with our own rights: only what cannot exist at all is checked.
    std::erase_if(needs, [](const AccessNeed& n) { return n.mode != kMissing; });
  }
  return check_access_as(needs, uid, gid);
}

}  // namespace pillbox
