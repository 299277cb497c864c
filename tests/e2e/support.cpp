#include "tests/e2e/support.h"

#include "shared/base64.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "supervisor/exec/cgroups.h"

extern char** environ;

namespace e2e {
namespace {

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

std::string read_small_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

// ---- RunResult -------------------------------------------------------------

std::vector<std::string> RunResult::err_lines() const {
  std::vector<std::string> lines;
  std::istringstream in(err);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

const nlohmann::json& RunResult::record(const std::string& key) const {
  for (const auto& r : records) {
    if (r.value("key", std::string()) == key) return r;
  }
  FAIL("no record with key '" << key << "'; " << describe());
  static const nlohmann::json none;  // not reached: FAIL throws
  return none;
}

std::size_t RunResult::count_kind(const std::string& kind) const {
  std::size_t n = 0;
  for (const auto& r : records) n += r.value("kind", std::string()) == kind;
  return n;
}

const nlohmann::json& RunResult::only_record() const {
  REQUIRE(records.size() == 1);
  return records[0];
}

std::string RunResult::describe() const {
  std::ostringstream os;
  os << "pillbox exit code " << exit_code;
  if (term_signal) os << " (killed by signal " << term_signal << ")";
  os << "\n--- stderr ---\n" << err.substr(0, 4000) << "\n--- stdout (start) ---\n" << out.substr(0, 4000);
  return os.str();
}

// ---- running pillbox -------------------------------------------------------

std::string pillbox_binary() { return PILLBOX_BUILD_DIR "/pillbox"; }

namespace {

// PILLBOX_BUILD_DIR's `name` where tasks can reach it (fixture()).
std::string reachable_build_path(const std::string& name) {
  const std::string built = std::string(PILLBOX_BUILD_DIR) + "/" + name;
  if (!is_root() || every_uid_may_enter(built)) return built;
  // One copy per process: files are copied as they are asked for, a
  // directory whole (the fixtures, with the plugins beside them).
  static TempDir copies(0755, host_dir_tasks_see());
  const std::string top = name.substr(0, name.find('/'));
  const std::string copy = copies.path() + "/" + top;
  std::error_code ec;
  if (!std::filesystem::exists(copy, ec)) {
    std::filesystem::copy(std::string(PILLBOX_BUILD_DIR) + "/" + top, copy,
                          std::filesystem::copy_options::recursive | std::filesystem::copy_options::copy_symlinks, ec);
    REQUIRE_MESSAGE(!ec, "cannot copy " << top << " of the build tree where tasks can reach it: " << ec.message());
  }
  return copies.path() + "/" + name;
}

}  // namespace

std::string fixture(const std::string& name) { return reachable_build_path("fixtures/" + name); }

std::string built_for_tasks(const std::string& name) { return reachable_build_path(name); }

std::string pillbox_for_any_uid() {
  for (const char* helper : {"pillbox-sandbox", "libpillbox-crash.so", "libpillbox-pdf-text.so"}) {
    reachable_build_path(helper);
  }
  return reachable_build_path("pillbox");
}

bool every_uid_may_enter(const std::string& path) {
  std::error_code ec;
  std::filesystem::path dir = std::filesystem::absolute(path, ec).lexically_normal();
  for (dir = dir.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) return false;
    if (dir == dir.root_path()) break;
  }
  return true;
}

const std::string& host_dir_tasks_see() {
  static const std::string chosen = [] {
    std::vector<std::string> candidates;
    if (is_root()) {
      candidates = {"/var/lib", "/srv", "/opt", "/var/cache"};
    } else if (const char* home = std::getenv("HOME")) {
      candidates = {home};
    }
    for (const std::string& dir : candidates) {
      bool private_dir = false;
      for (const char* p : {"/tmp", "/var/tmp", "/dev/shm"}) {
        private_dir = private_dir || dir == p || dir.rfind(std::string(p) + "/", 0) == 0;
      }
      struct statvfs fs {};
      if (private_dir || ::access(dir.c_str(), W_OK) != 0 || ::statvfs(dir.c_str(), &fs) != 0 ||
          (fs.f_flag & ST_NOEXEC) != 0 || (is_root() && !every_uid_may_enter(dir + "/x"))) {
        continue;
      }
      return dir;
    }
    FAIL("no directory outside /tmp, /var/tmp and /dev/shm that tasks can see and run programs from: looked at "
         << candidates.size() << " candidates (/var/lib, /srv, /opt, /var/cache as root; $HOME otherwise)");
    return std::string();
  }();
  return chosen;
}

// Tests written for the executor (one attempt, one outcome per task) run
// `pillbox run` without the store, retries or the breaker unless they ask for
// them: otherwise every run would share the user's store, and skip tasks an
// earlier test finished. Tests of the store pass --store or --no-store.
void with_executor_defaults(std::vector<std::string>& argv) {
  for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
    // build/pillbox, or its copy for any uid (pillbox_for_any_uid).
    if (std::filesystem::path(argv[i]).filename() != "pillbox" || argv[i + 1] != "run") continue;
    const auto options_end = std::find(argv.begin() + static_cast<long>(i), argv.end(), "--");
    const bool chooses = std::any_of(argv.begin() + static_cast<long>(i), options_end, [](const std::string& a) {
      return a == "--store" || a.rfind("--store=", 0) == 0 || a == "--no-store";
    });
    if (!chooses) argv.insert(argv.begin() + static_cast<long>(i) + 2, {"--no-store", "--max-attempts", "1", "--no-breaker"});
    return;
  }
}

RunResult run_pillbox(const std::vector<std::string>& args, const std::string& stdin_data,
                      const std::map<std::string, std::string>& extra_env, const LineCallback& on_stdout_line,
                      int deadline_s) {
  return run_command(pillbox_binary(), args, stdin_data, extra_env, on_stdout_line, deadline_s);
}

bool have_python3() {
  if (::access(kPython3, X_OK) == 0) return true;
  MESSAGE("skipped: no " << kPython3 << " (tools/setup.sh installs python3)");
  return false;
}

Project::Project()
    : dir(0755, host_dir_tasks_see()),
      parent(dir.path().substr(0, dir.path().rfind('/'))),
      name(dir.path().substr(parent.size() + 1)) {}

RunResult pillbox_in(const std::string& cwd, const std::vector<std::string>& args) {
  std::vector<std::string> sh = {"-c", "cd \"$1\" && shift && exec \"$@\"", "sh", cwd, pillbox_binary()};
  sh.insert(sh.end(), args.begin(), args.end());
  return run_command("/bin/sh", sh);
}

std::string terminal_unsafe(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool c1 = c == 0xc2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                    static_cast<unsigned char>(text[i + 1]) <= 0x9f;
    if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f || c1) {
      std::ostringstream out;
      out << "offset " << i << ": 0x" << std::hex << static_cast<int>(c) << " in ..."
          << text.substr(i >= 60 ? i - 60 : 0, 120);
      return out.str();
    }
  }
  return "";
}

RunResult check_usage_error(const std::vector<std::string>& args, const std::string& says) {
  auto r = run_pillbox(args);
  INFO(r.describe());
  CHECK(r.exit_code == 2);
  CHECK(r.err.find(says) != std::string::npos);
  return r;
}

RunResult run_command(const std::string& program, const std::vector<std::string>& args,
                      const std::string& stdin_data, const std::map<std::string, std::string>& extra_env,
                      const LineCallback& on_stdout_line, int deadline_s) {
  ::signal(SIGPIPE, SIG_IGN);  // pillbox may stop reading stdin early

  // Everything the child needs is built before fork: no allocation after it.
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  with_executor_defaults(argv_s);
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);

  std::map<std::string, std::string> env_map;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env_map[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : extra_env) env_map[k] = v;
  std::vector<std::string> env_s;
  for (const auto& [k, v] : env_map) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int in_pipe[2], out_pipe[2], err_pipe[2];
  REQUIRE(::pipe2(in_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out_pipe, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(err_pipe, O_CLOEXEC) == 0);

  const pid_t parent = ::getpid();
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::dup2(in_pipe[0], 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  int in_fd = in_pipe[1], out_fd = out_pipe[0], err_fd = err_pipe[0];
  set_nonblocking(in_fd);
  set_nonblocking(out_fd);
  set_nonblocking(err_fd);

  RunResult result;
  std::size_t written = 0;
  std::size_t line_start = 0;  // start of the first incomplete stdout line
  std::size_t line_no = 0;
  if (stdin_data.empty()) {
    ::close(in_fd);
    in_fd = -1;
  }
  const auto deadline = started + std::chrono::seconds(deadline_s);
  auto next_store_check = started;
  bool timed_out = false;
  char buf[65536];
  while (out_fd >= 0 || err_fd >= 0) {
    pollfd fds[3];
    int n = 0;
    int idx_in = -1, idx_out = -1, idx_err = -1;
    if (in_fd >= 0) { idx_in = n; fds[n++] = {in_fd, POLLOUT, 0}; }
    if (out_fd >= 0) { idx_out = n; fds[n++] = {out_fd, POLLIN, 0}; }
    if (err_fd >= 0) { idx_err = n; fds[n++] = {err_fd, POLLIN, 0}; }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (const auto now = std::chrono::steady_clock::now(); now >= next_store_check) {
      check_no_deleted_store_files(pid);  // not reaped yet: its /proc entry is there
      next_store_check = now + std::chrono::milliseconds(200);
    }
    const int rc = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(std::min<long long>(left, 200)));
    if (rc < 0 && errno == EINTR) continue;
    REQUIRE(rc >= 0);
    if (idx_in >= 0 && fds[idx_in].revents) {
      const ssize_t w = ::write(in_fd, stdin_data.data() + written, std::min<std::size_t>(stdin_data.size() - written, 1 << 16));
      if (w > 0) written += static_cast<std::size_t>(w);
      if ((w < 0 && errno != EAGAIN && errno != EINTR) || written == stdin_data.size()) {
        ::close(in_fd);
        in_fd = -1;
      }
    }
    if (idx_out >= 0 && fds[idx_out].revents) {
      const ssize_t r = ::read(out_fd, buf, sizeof buf);
      if (r > 0) {
        result.out.append(buf, static_cast<std::size_t>(r));
        for (std::size_t nl; (nl = result.out.find('\n', line_start)) != std::string::npos; line_start = nl + 1) {
          ++line_no;
          if (on_stdout_line) on_stdout_line(pid, line_no, std::string_view(result.out).substr(line_start, nl - line_start));
        }
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        ::close(out_fd);
        out_fd = -1;
      }
    }
    if (idx_err >= 0 && fds[idx_err].revents) {
      const ssize_t r = ::read(err_fd, buf, sizeof buf);
      if (r > 0) {
        result.err.append(buf, static_cast<std::size_t>(r));
      } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
        ::close(err_fd);
        err_fd = -1;
      }
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);
  for (int fd : {in_fd, out_fd, err_fd}) {
    if (fd >= 0) ::close(fd);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.term_signal = WTERMSIG(status);
    result.exit_code = 128 + result.term_signal;
  }
  if (timed_out) FAIL("pillbox still running after " << deadline_s << " s, killed; " << result.describe());

  bool json = false;
  for (const auto& a : args) {
    if (a == "--") break;
    json |= a == "--json";
  }
  if (json) {
    std::istringstream in(result.out);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      try {
        result.records.push_back(nlohmann::json::parse(line));
      } catch (const nlohmann::json::exception& e) {
        FAIL_CHECK("stdout line is not JSON (" << std::string(e.what()) << "): " << line.substr(0, 300));
      }
    }
  }
  return result;
}

// ---- files -------------------------------------------------------------------

TempDir::TempDir(unsigned mode, const std::string& parent) {
  std::string tmpl = parent + "/pillbox-e2e-XXXXXX";
  REQUIRE_MESSAGE(::mkdtemp(tmpl.data()) != nullptr, "cannot make a directory in " << parent);
  path_ = tmpl;
  ::chmod(path_.c_str(), mode);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string TempDir::write(const std::string& name, std::string_view bytes) const {
  const std::string p = file(name);
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  REQUIRE_MESSAGE(fd >= 0, "cannot create " << p);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    REQUIRE_MESSAGE(w > 0, "cannot write " << p);
    done += static_cast<std::size_t>(w);
  }
  ::fchmod(fd, 0644);
  ::close(fd);
  return p;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// ---- host features -------------------------------------------------------

bool is_root() { return ::geteuid() == 0; }

bool kernel_runs_ia32_syscalls() {
#if defined(__x86_64__)
  static const bool runs = [] {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      long rc = 20;  // getpid in the i386 table
      __asm__ volatile("int $0x80" : "+a"(rc) : : "memory");
      ::_exit(rc > 0 ? 0 : 1);
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }();
  return runs;
#else
  return false;
#endif
}

bool have_memory_cgroup() {
  static const bool have = !pillbox::probe_cgroups().memory_parent.empty();
  return have;
}

void check_with_promtool(const std::string& text) {
  if (::access("/usr/bin/promtool", X_OK) != 0) {
    MESSAGE("skipped: promtool check (no /usr/bin/promtool: Debian's prometheus package is not installed)");
    return;
  }
  const auto check = run_command("/usr/bin/promtool", {"check", "metrics"}, text);
  INFO(check.describe());
  CHECK(check.exit_code == 0);
}

// ---- process table ---------------------------------------------------------

std::vector<ProcInfo> list_processes() {
  std::vector<ProcInfo> procs;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return procs;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    const std::string stat = read_small_file(dir + "/stat");
    const auto open = stat.find('(');
    const auto close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 > stat.size()) continue;  // gone
    ProcInfo p;
    p.pid = static_cast<pid_t>(pid);
    p.comm = stat.substr(open + 1, close - open - 1);
    std::istringstream rest(stat.substr(close + 2));
    rest >> p.state >> p.ppid;
    char target[4096];
    const ssize_t n = ::readlink((dir + "/exe").c_str(), target, sizeof target - 1);
    if (n > 0) p.exe.assign(target, static_cast<std::size_t>(n));
    const std::string cmdline = read_small_file(dir + "/cmdline");
    std::size_t start = 0;
    while (start < cmdline.size()) {
      const auto nul = cmdline.find('\0', start);
      p.cmdline.push_back(cmdline.substr(start, nul == std::string::npos ? std::string::npos : nul - start));
      if (nul == std::string::npos) break;
      start = nul + 1;
    }
    procs.push_back(std::move(p));
  }
  ::closedir(d);
  return procs;
}

std::vector<ProcInfo> processes_of(const std::string& path) {
  const std::string base = std::filesystem::path(path).filename().string().substr(0, 15);
  std::vector<ProcInfo> found;
  for (auto& p : list_processes()) {
    if (p.pid == ::getpid()) continue;
    const bool exe = p.exe == path || p.exe == path + " (deleted)";
    const bool argv0 = !p.cmdline.empty() && p.cmdline[0] == path;
    const bool zombie = p.state == 'Z' && p.comm == base;
    if (exe || argv0 || zombie) found.push_back(std::move(p));
  }
  return found;
}

std::string describe(const std::vector<ProcInfo>& procs) {
  std::ostringstream os;
  for (const auto& p : procs) {
    os << "  pid " << p.pid << " ppid " << p.ppid << " state " << p.state << " comm " << p.comm << " exe "
       << (p.exe.empty() ? "?" : p.exe) << "\n";
  }
  return os.str();
}

int open_fd_count(pid_t pid) {
  DIR* d = ::opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

std::vector<std::string> deleted_store_files(pid_t pid) {
  std::vector<std::string> found;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return found;
  static constexpr std::string_view kDeleted = " (deleted)";
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[4096];
    const ssize_t n = ::readlinkat(::dirfd(d), e->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string link(target, static_cast<std::size_t>(n));
    if (!link.ends_with(kDeleted)) continue;
    const std::string path = link.substr(0, link.size() - kDeleted.size());
    const bool wal = path.ends_with("/pillbox.db-wal"), shm = path.ends_with("/pillbox.db-shm");
    if (!wal && !shm) continue;
    // A store removed or moved away as a whole (a test of that) is not this:
    // the database itself must still be where the process opened it.
    struct stat st {};
    if (::stat(path.substr(0, path.size() - 4).c_str(), &st) == 0) found.push_back(link);
  }
  ::closedir(d);
  return found;
}

void check_no_deleted_store_files(pid_t pid) {
  auto deleted = deleted_store_files(pid);
  if (!deleted.empty()) {
    // The process's own last connection unlinks the -shm and -wal a moment
    // before it closes them (SQLite's close, at the end of a command): seen
    // in that moment, they are no loss. Still held a second later, with the
    // process alive, they are: another process deleted them under it. The
    // wait ends when the process does (its pidfd), not on a timer alone.
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (pidfd >= 0) {
      pollfd p{pidfd, POLLIN, 0};
      while (::poll(&p, 1, 1000) < 0 && errno == EINTR) {
      }
      ::close(pidfd);
    }
    deleted = deleted_store_files(pid);  // empty once it has exited: its fds are gone
  }
  std::string list;
  for (const auto& f : deleted) list += "\n  " + f;
  CHECK_MESSAGE(deleted.empty(), "pillbox (pid " << pid << ") holds store files that were deleted under it: its "
                                 "commits go where no reader sees them and are lost when it ends:" << list);
}

long vm_rss_kb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

}  // namespace e2e

namespace e2e {

namespace {

std::vector<std::vector<std::string>> sql_query(const std::string& db_path, const std::string& sql, int flags) {
  sqlite3* db = nullptr;
  REQUIRE(::sqlite3_open_v2(db_path.c_str(), &db, flags, nullptr) == SQLITE_OK);
  ::sqlite3_busy_timeout(db, 10'000);
  sqlite3_stmt* stmt = nullptr;
  INFO(sql);
  const int prepared = ::sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr);
  INFO(::sqlite3_errmsg(db));
  REQUIRE(prepared == SQLITE_OK);
  std::vector<std::vector<std::string>> rows;
  int rc;
  while ((rc = ::sqlite3_step(stmt)) == SQLITE_ROW) {
    std::vector<std::string> row;
    for (int c = 0; c < ::sqlite3_column_count(stmt); ++c) {
      const unsigned char* text = ::sqlite3_column_text(stmt, c);
      row.push_back(text != nullptr ? reinterpret_cast<const char*>(text) : "NULL");
    }
    rows.push_back(std::move(row));
  }
  CHECK(rc == SQLITE_DONE);
  ::sqlite3_finalize(stmt);
  ::sqlite3_close(db);
  return rows;
}

}  // namespace

std::string poison_plugin() { return "plugin:" + fixture("poison_plugin.so"); }

std::string task_line(const std::string& key, const std::string& payload) {
  return nlohmann::json{{"key", key}, {"payload_b64", pillbox::base64_encode(payload)}}.dump() + "\n";
}

std::vector<std::vector<std::string>> sql_rows(const std::string& db_path, const std::string& sql) {
  return sql_query(db_path, sql, SQLITE_OPEN_READONLY);
}

void sql_write(const std::string& db_path, const std::string& sql) { sql_query(db_path, sql, SQLITE_OPEN_READWRITE); }

long long sql_int(const std::string& db_path, const std::string& sql) {
  const auto rows = sql_rows(db_path, sql);
  REQUIRE(!rows.empty());
  REQUIRE(!rows[0].empty());
  return std::stoll(rows[0][0]);
}

}  // namespace e2e

namespace e2e {

bool has_file_starting(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) return true;
  }
  return false;
}

std::size_t count_files_starting(const std::string& dir, const std::string& prefix) {
  std::error_code ec;
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  }
  return n;
}

bool wait_for_file(const std::string& dir, const std::string& prefix, int stop_fd) {
  return wait_in_dir(dir, [&] { return has_file_starting(dir, prefix); }, stop_fd);
}

bool wait_in_dir(const std::string& dir, const std::function<bool()>& done, int stop_fd) {
  const int in = ::inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  if (in < 0) return false;
  ::inotify_add_watch(in, dir.c_str(), IN_CREATE | IN_MOVED_TO | IN_CLOSE_WRITE);
  bool found = false;
  while (!(found = done())) {
    pollfd p[2] = {{in, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0 && errno != EINTR) break;
    if (p[1].revents) break;
    char buf[4096];
    while (::read(in, buf, sizeof buf) > 0) {
    }
  }
  ::close(in);
  return found;
}

std::string shipped_policy_with(const std::string& name, const std::string& from, const std::string& to) {
  const auto shown = run_pillbox({"policy", "show", name});
  REQUIRE(shown.exit_code == 0);
  std::string text = shown.out;
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  text.replace(at, from.size(), to);
  return text;
}

std::string exec_policy_with(const TempDir& dir, const std::string& from, const std::string& to) {
  return dir.write("exec-edited.policy", shipped_policy_with("exec", from, to));
}

pid_t pillbox_naming(const std::string& marker) {
  for (const auto& p : processes_of(pillbox_binary())) {
    if (p.comm != "pillbox") continue;
    for (const auto& a : p.cmdline) {
      if (a.find(marker) != std::string::npos) return p.pid;
    }
  }
  return 0;
}

std::vector<pid_t> still_running_after(const std::vector<pid_t>& pids, std::chrono::milliseconds limit) {
  std::vector<pid_t> left;
  std::vector<std::pair<pid_t, int>> fds;
  for (pid_t pid : pids) {
    const int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    if (fd >= 0) fds.emplace_back(pid, fd);
  }
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (const auto& [pid, fd] : fds) {
    const auto now = std::chrono::steady_clock::now();
    const int ms = now >= deadline ? 0 : static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count());
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, ms) == 0) left.push_back(pid);
    ::close(fd);
  }
  return left;
}

}  // namespace e2e
