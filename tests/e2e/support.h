#pragma once
// Helpers shared by the end-to-end tests: run the real `pillbox` binary as a
// subprocess, temp directories the sandbox user can read, host feature
// probes, and /proc helpers for leak checks (processes, fds, RSS).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace e2e {

// ---- running pillbox -------------------------------------------------------

struct RunResult {
  int exit_code = -1;       // exit status, or 128 + signal when pillbox itself was killed
  int term_signal = 0;      // the signal that killed pillbox, 0 when it exited
  std::string out;          // all of stdout
  std::string err;          // all of stderr
  std::vector<nlohmann::json> records;  // stdout lines parsed as JSON (only with --json)
  double seconds = 0;       // wall time of the whole run

  // Lines of stderr (without the trailing newline), empty lines dropped.
  std::vector<std::string> err_lines() const;
  // The record whose "key" is `key`; fails the current test when absent.
  const nlohmann::json& record(const std::string& key) const;
  // Count of records whose "kind" is `kind`.
  std::size_t count_kind(const std::string& kind) const;
  // A short description for failure messages (exit code, stderr, first lines of stdout).
  std::string describe() const;
  // The one record of a run of one task; fails the test when there is not exactly one.
  const nlohmann::json& only_record() const;
};

// Called for every complete stdout line while pillbox runs: its pid (still
// alive, not yet reaped), the 1-based line number and the line.
using LineCallback = std::function<void(pid_t pid, std::size_t line_no, std::string_view line)>;

// Runs PILLBOX_BUILD_DIR "/pillbox" with `args`, writes `stdin_data` to its
// stdin (then closes it), captures stdout and stderr concurrently, waits for
// it. The environment is the test's plus `extra_env`. With "--json" among the
// args, stdout lines are parsed into `records` (a line that is not JSON fails
// the test). A run longer than `deadline_s` is killed and fails the test.
// One JSON line of `pillbox run -` input: the key and the payload's exact bytes (base64).
std::string task_line(const std::string& key, const std::string& payload);

RunResult run_pillbox(const std::vector<std::string>& args, const std::string& stdin_data = "",
                      const std::map<std::string, std::string>& extra_env = {},
                      const LineCallback& on_stdout_line = {}, int deadline_s = 480);
// pillbox ARGS run in `cwd`, as a user in that directory would.
RunResult pillbox_in(const std::string& cwd, const std::vector<std::string>& args);

// The interpreter of the tests' real Python scripts (not a version
// manager's shim on PATH).
inline constexpr const char* kPython3 = "/usr/bin/python3";
// True when it is there; otherwise says "skipped: ..." (MESSAGE) for the caller.
bool have_python3();

// Runs pillbox with `args` and checks that it refuses them as a usage error:
// exit code 2, and stderr says `says`. The run, for the caller's own checks.
RunResult check_usage_error(const std::vector<std::string>& args, const std::string& says);

// The first byte of `text` a terminal would act on (a control byte but
// newline and tab, DEL, a C1 control as UTF-8), as "offset N: 0xHH in
// ..." with the text around it; "" when none: what pillbox prints of a
// claim must be "".
std::string terminal_unsafe(const std::string& text);

// The same for any program (e.g. pillbox behind setpriv): `program` is run
// with `args`; "--json" among them still means stdout lines are records.
RunResult run_command(const std::string& program, const std::vector<std::string>& args,
                      const std::string& stdin_data = "", const std::map<std::string, std::string>& extra_env = {},
                      const LineCallback& on_stdout_line = {}, int deadline_s = 480);

// ---- files -------------------------------------------------------------------

std::string pillbox_binary();            // build/pillbox
// build/fixtures/<name>, where tasks can run it: the build tree itself when
// the tasks' uid may enter it (or pillbox is not root: tasks run as us),
// else a copy of build/fixtures/ made once per test process under
// host_dir_tasks_see() (a build under a 0700 home, /root/pillbox/build).
std::string fixture(const std::string& name);
std::string poison_plugin();            // "plugin:" + fixture("poison_plugin.so"), for --handler
// build/<name> (a library pillbox builds, such as the example plugin), where
// tasks can load it: as fixture() decides.
std::string built_for_tasks(const std::string& name);
// build/pillbox where any uid may run it (a test that runs pillbox as
// nobody): the build tree itself, or a copy of pillbox with its helpers
// (pillbox-sandbox, the crash library, the pdf-text module), which it finds
// beside itself, as fixture() decides.
std::string pillbox_for_any_uid();

// ---- places tasks see, and places they do not -----------------------------
//
// Where a test puts a file decides what a task sees of it, so no test puts
// one in the build tree (which may be anywhere: under /tmp, a 0700 home, a
// path with a space). Under /tmp, /var/tmp and /dev/shm each task has its own
// empty directory: a TempDir there (the default) is hidden from tasks, but
// for what the command line names or --share shows them. For a directory
// tasks see as the host's (read-only), use host_dir_tasks_see() as the parent.

// A parent for TempDir whose contents tasks see as the host's: outside
// /tmp, /var/tmp and /dev/shm, on a mount that allows exec, and (as root,
// when tasks run as unprivileged uids) with every directory above it open to
// every uid: the first of /var/lib, /srv, /opt, /var/cache that has all
// three (as root), or $HOME (without root). Fails the test when none has.
const std::string& host_dir_tasks_see();

// True when a process of any uid may enter every directory of `path`'s
// (the mode bits of each: o+x), as a task's unprivileged uid must.
bool every_uid_may_enter(const std::string& path);

// A fresh directory under /tmp (or `parent`: /dev/shm for one on a tmpfs,
// host_dir_tasks_see() for one tasks see), mode 0755 (or `mode`), removed
// with its contents at the end of the scope.
class TempDir {
 public:
  explicit TempDir(unsigned mode = 0755, const std::string& parent = "/tmp");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes `bytes` to <dir>/<name> (mode 0644) and returns its path.
  std::string write(const std::string& name, std::string_view bytes) const;
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A user's project that tasks see (under host_dir_tasks_see()): its path
// (dir), its parent and its name there, to run pillbox from the parent
// with paths like NAME/script.py, as a user would.
struct Project {
  TempDir dir;
  std::string parent;
  std::string name;
  Project();
};

std::string read_file(const std::string& path);

// True when `dir` holds an entry whose name starts with `prefix`.
bool has_file_starting(const std::string& dir, const std::string& prefix);
// How many entries of `dir` have a name that starts with `prefix`.
std::size_t count_files_starting(const std::string& dir, const std::string& prefix);
// Blocks (inotify, no polling) until `done()` holds, looking again whenever
// an entry appears in `dir`, or until `stop_fd` becomes readable; true when
// `done()` held.
bool wait_in_dir(const std::string& dir, const std::function<bool()>& done, int stop_fd);
// wait_in_dir until `dir` holds an entry whose name starts with `prefix`.
bool wait_for_file(const std::string& dir, const std::string& prefix, int stop_fd);

// ---- policies ---------------------------------------------------------------

// The text of a shipped policy (`pillbox policy show NAME`) with the first
// `from` replaced by `to`; fails the test when `from` is not in it.
std::string shipped_policy_with(const std::string& name, const std::string& from, const std::string& to);
// The shipped exec policy edited that way, written into `dir`; its path.
std::string exec_policy_with(const TempDir& dir, const std::string& from, const std::string& to);

// ---- the store's database (read-only queries) -----------------------------------

// Rows of `sql` on the SQLite database at `db_path`, every column as text
// (NULL as "NULL"). Fails the test on an SQL error.
std::vector<std::vector<std::string>> sql_rows(const std::string& db_path, const std::string& sql);
// The first column of the first row as an integer.
long long sql_int(const std::string& db_path, const std::string& sql);
// One statement that changes the database (tests that tamper with a store).
void sql_write(const std::string& db_path, const std::string& sql);

// ---- host features -------------------------------------------------------

bool is_root();
bool have_memory_cgroup();  // pillbox::probe_cgroups() found a usable memory controller
// This kernel runs 32-bit syscalls (int 0x80) from a 64-bit process: IA32
// emulation built in and not turned off (ia32_emulation=0). Asked of the
// kernel itself: a child without any filter makes the call (getpid), and
// either gets its answer or dies of SIGSEGV. False off x86_64.
bool kernel_runs_ia32_syscalls();

// `promtool check metrics` accepts `text` (a failed check otherwise); when
// /usr/bin/promtool (Debian's prometheus package) is absent, says "skipped:".
void check_with_promtool(const std::string& text);

// ---- process table ---------------------------------------------------------

struct ProcInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  char state = '?';         // R, S, D, Z, T, ...
  std::string comm;         // /proc/PID/comm (15 characters at most)
  std::string exe;          // readlink /proc/PID/exe ("" for zombies or when unreadable)
  std::vector<std::string> cmdline;
};

std::vector<ProcInfo> list_processes();
// The pillbox (not its guardian, a fork of it named pillbox-guard) whose
// command line has an argument containing `marker`; 0 when none.
pid_t pillbox_naming(const std::string& marker);
// Waits (pidfds, no polling) until each of `pids` has exited, at most
// `limit` in all; returns those still running then.
std::vector<pid_t> still_running_after(const std::vector<pid_t>& pids, std::chrono::milliseconds limit);
// Live processes and zombies running `path`: exe or argv[0] equal to it, or a
// zombie whose comm is the file name (zombies have neither exe nor cmdline).
std::vector<ProcInfo> processes_of(const std::string& path);
std::string describe(const std::vector<ProcInfo>& procs);

int open_fd_count(pid_t pid);     // entries of /proc/PID/fd, -1 when unreadable

// The store's WAL or shared-memory file (pillbox.db-wal, pillbox.db-shm)
// that `pid` holds open although it was deleted while the database beside
// it is still there: that process commits into a WAL no other process
// sees any more, and loses those commits when it ends (issue 25). As
// /proc/PID/fd shows them; empty when there is none.
std::vector<std::string> deleted_store_files(pid_t pid);
// Fails the current test (a CHECK) when `pid` holds one, and still does a
// second later while it runs (its own last close unlinks them first). Called by
// run_pillbox while pillbox runs, and by Background and LiveRun before they
// signal, wait for or kill their process: every e2e test checks it.
void check_no_deleted_store_files(pid_t pid);
long vm_rss_kb(pid_t pid);        // VmRSS from /proc/PID/status, -1 when unreadable

}  // namespace e2e
