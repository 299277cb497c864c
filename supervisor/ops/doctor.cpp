#include "supervisor/ops/doctor.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pwd.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>

#include "shared/embedded_policies.h"
#include "shared/policy_parser.h"
#include "supervisor/exec/cgroups.h"
#include "supervisor/exec/dispatcher.h"
#include "supervisor/exec/install_paths.h"

namespace pillbox {
namespace {

// Runs `probe` in a forked child; returns its exit code (0 = success) or -1.
// Errno values travel as exit codes, so the parent can name the failure.
int in_child(const std::function<int()>& probe) {
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) _exit(probe());
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

DoctorCheck named(std::string name) {
  DoctorCheck c;
  c.name = std::move(name);
  return c;
}

std::string errno_name(int code) { return code == 0 ? "ok" : std::strerror(code); }

// In a child: loads a filter that allows everything, with `flags`; errno or 0.
int load_allow_all_filter(unsigned flags) {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  sock_filter allow_all[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
  sock_fprog prog{1, allow_all};
  return ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog) < 0 ? errno : 0;
}

DoctorCheck check_seccomp() {
  DoctorCheck c = named("seccomp-bpf filter");
  const int rc = in_child([] { return load_allow_all_filter(SECCOMP_FILTER_FLAG_TSYNC); });
  c.ok = rc == 0;
  c.detail = c.ok ? "no_new_privs and a TSYNC filter load work" : "cannot load a filter: " + errno_name(rc);
  if (!c.ok) {
    c.fallback = "none: pillbox refuses to run tasks without seccomp (a policy with [seccomp] enabled = no "
                 "and allow_unsafe = yes runs anyway, unconfined by syscall)";
  }
  return c;
}

// A listener for the filter's denied syscalls (shared/seccomp_notify.h): the
// kernel, not the task, then names a violation.
DoctorCheck check_seccomp_notify() {
  DoctorCheck c = named("seccomp notification");
  const int rc = in_child([] { return load_allow_all_filter(SECCOMP_FILTER_FLAG_NEW_LISTENER); });
  c.ok = rc == 0;
  c.detail = c.ok ? "a listener is handed out: the kernel names each denied syscall"
                  : "no listener for a filter: " + errno_name(rc);
  if (!c.ok) {
    c.fallback = "a denied syscall raises SIGSYS and is named by the task's own crash report (a hostile task "
                 "could forge it; the record says so)";
  }
  return c;
}

// Without root the sandbox first enters a user namespace (sandbox/namespaces.cpp),
// which is what makes the others possible: try them the same way.
DoctorCheck check_namespace(const char* name, int flag, const char* fallback) {
  DoctorCheck c = named(std::string(name) + " namespace");
  const bool via_user = ::geteuid() != 0 && flag != CLONE_NEWUSER;
  const int unshare_flags = via_user ? (flag | CLONE_NEWUSER) : flag;
  const int rc = in_child([unshare_flags] { return ::unshare(unshare_flags) == 0 ? 0 : errno; });
  c.ok = rc == 0;
  c.detail = c.ok ? (via_user ? "unshare works inside a user namespace" : "unshare works")
                  : "unshare refused: " + errno_name(rc);
  if (!c.ok) c.fallback = fallback;
  return c;
}

DoctorCheck check_cgroups() {
  DoctorCheck c = named("memory cgroup per task");
  const CgroupProbe probe = probe_cgroups();
  c.ok = !probe.memory_parent.empty();
  c.detail = probe.detail;
  if (!c.ok) {
    c.fallback = "memory limited by RLIMIT_AS only (oom shows as allocation failure), fork bombs by RLIMIT_NPROC only; "
                 "a policy with cgroup = required refuses to run";
  } else if (probe.pids_parent.empty()) {
    c.detail += "; no pids controller: fork bombs are limited by RLIMIT_NPROC";
  }
  return c;
}

DoctorCheck check_privileges() {
  DoctorCheck c = named("privilege drop");
  if (::geteuid() != 0) {
    c.ok = false;
    c.detail = "not running as root: tasks run as your own uid " + std::to_string(::geteuid());
    c.fallback = "tasks of different slots can signal each other and, in spawn mode, pillbox itself; without a "
                 "cgroup a task's background process can outlive the run: run as root for hostile input";
    return c;
  }
  const passwd* pw = ::getpwnam("nobody");
  c.ok = pw != nullptr;
  c.detail = c.ok ? "running as root: each job slot's children drop to their own uid from the policy's uid_pool "
                    "(policies without one: to their user, e.g. nobody, uid " + std::to_string(pw->pw_uid) + ")"
                  : "running as root but user 'nobody' does not exist";
  if (!c.ok) c.fallback = "set `user = UID` in the policy's [isolation] section to a numeric uid";
  return c;
}

DoctorCheck check_pidfd() {
  DoctorCheck c = named("pidfd (spawn mode)");
  const int fd = static_cast<int>(::syscall(SYS_pidfd_open, ::getpid(), 0));
  c.ok = fd >= 0;
  if (fd >= 0) ::close(fd);
  c.detail = c.ok ? "pidfd_open works" : std::string("pidfd_open: ") + std::strerror(errno);
  if (!c.ok) c.fallback = "spawn mode is unavailable (Linux >= 5.3 needed); zygote mode still works";
  return c;
}

DoctorCheck check_policy(const std::string& name_or_path) {
  DoctorCheck c = named("policy " + name_or_path);
  auto policy = resolve_policy(name_or_path);
  if (!policy) {
    c.detail = policy.error();
    c.fallback = "fix the policy (pillbox policy check " + name_or_path + ")";
    return c;
  }
  const std::vector<std::string> unsafe = unsafe_settings(*policy);
  c.ok = unsafe.empty();
  if (c.ok) {
    c.detail = policy_identity(*policy) + ": seccomp on (" + std::to_string(policy->seccomp.allow.size()) +
               " syscalls), tasks run as " +
               (policy->isolation.uid_pool_size > 0 ? "one uid per job slot" : "user " + policy->isolation.user) +
               " when pillbox is root";
    return c;
  }
  c.detail = "unsafe, allowed by allow_unsafe = yes:";
  for (const auto& u : unsafe) c.detail += " " + u + ";";
  c.detail.pop_back();
  c.fallback = "runs as written: tasks under this policy are not confined as the shipped policies confine them";
  return c;
}

// One echo task through a real zygote: proves the whole chain and reports
// which isolation the zygote actually achieved.
class OneTask final : public TaskSource {
 public:
  Item next() override {
    Item item;
    if (done_) return item;
    done_ = true;
    item.type = Item::Type::kTask;
    item.task = Task{"doctor", "pillbox doctor"};
    return item;
  }

 private:
  bool done_ = false;
};

// One line per helper: where it was found (so an operator can tell which
// install a pillbox uses), or the places looked and what goes without it.
DoctorCheck helper_check(const std::string& name, const HelperLocation& where, const std::string& without) {
  DoctorCheck c = named(name);
  c.ok = !where.path.empty();
  if (c.ok) {
    c.detail = where.path + (where.from_env ? " (from $" + where.env + ")" : "");
  } else {
    c.detail = missing_helper_message(where);
    c.fallback = without;
  }
  return c;
}

void check_helpers(DoctorReport& report) {
  const HelperLocation sandbox = locate_sandbox_binary();
  report.checks.push_back(helper_check("sandbox binary", sandbox, "none: no task can run"));
  report.checks.push_back(helper_check("crash library", locate_crash_library(),
                                       "exec programs run without crash capture: a crash is classified from its "
                                       "signal alone, without the faulting address and stack"));
  report.checks.push_back(helper_check("pdf-text module", locate_pdf_text_module(sandbox.path),
                                       "the pdf-text handler cannot run; every other handler can"));
}

class Capture final : public OutcomeSink {
 public:
  void on_outcome(const Task&, const Outcome& o) override { outcome = o; }
  void on_input_error(const std::string&) override {}
  Outcome outcome;
};

void check_end_to_end(const std::string& sandbox_binary, DoctorReport& report) {
  DoctorCheck c = named("end-to-end task (zygote, strict policy)");
  RunSettings settings;
  settings.sandbox_binary = sandbox_binary;
  auto policy = resolve_policy("strict");
  if (!policy) {
    c.detail = policy.error();
    report.checks.push_back(c);
    return;
  }
  settings.config.policy = *policy;
  settings.config.handler = "echo";
  if (::geteuid() == 0) {
    if (const passwd* pw = ::getpwnam(policy->isolation.user.c_str())) {
      settings.config.drop_privileges = true;
      settings.config.sandbox_uid = pw->pw_uid;
      settings.config.sandbox_gid = pw->pw_gid;
    }
  }
  OneTask source;
  Capture sink;
  auto run = run_tasks(settings, source, sink);
  if (!run) {
    c.detail = "setup error: " + run.error();
    c.fallback = "none: fix the error above";
  } else {
    c.ok = sink.outcome.kind == Kind::kOk && sink.outcome.output == "pillbox doctor";
    std::string isolation;
    for (const auto& ns : run->isolation) isolation += (isolation.empty() ? "" : ", ") + ns;
    c.detail = std::string(to_string(sink.outcome.kind)) + " in " + std::to_string(sink.outcome.wall_ms) +
               " ms; zygote namespaces: " + (isolation.empty() ? "none" : isolation) + "; cgroups: " + run->cgroups;
    if (!c.ok) c.detail += "; " + sink.outcome.message;
    for (const auto& w : run->warnings) c.detail += "; warning: " + w;
  }
  report.checks.push_back(c);
}

}  // namespace

DoctorReport run_doctor(const std::string& sandbox_binary, const std::vector<std::string>& policies) {
  DoctorReport r;
  utsname u{};
  ::uname(&u);
  DoctorCheck kernel = named("kernel");
  kernel.ok = true;
  kernel.detail = std::string(u.sysname) + " " + u.release + " " + u.machine;
  r.checks.push_back(kernel);
  check_helpers(r);
  r.checks.push_back(check_privileges());
  r.checks.push_back(check_seccomp());
  r.checks.push_back(check_seccomp_notify());
  r.checks.push_back(check_namespace("network", CLONE_NEWNET,
                                     "children share the host network; seccomp still denies socket() in the shipped policies"));
  r.checks.push_back(check_namespace("mount", CLONE_NEWNS, "no read-only view of the file system; file permissions and the dropped uid still apply"));
  r.checks.push_back(check_namespace("ipc", CLONE_NEWIPC, "children share System V IPC"));
  r.checks.push_back(check_namespace("uts", CLONE_NEWUTS, "children see the host name"));
  r.checks.push_back(check_namespace("pid", CLONE_NEWPID,
                                     "children see the host's processes; process groups, cgroups and per-slot uids still contain them"));
  if (::geteuid() == 0) {
    DoctorCheck user = named("user namespace");
    user.ok = true;
    user.detail = "not needed as root: each job slot's children drop to their own uid from the policy's uid_pool";
    r.checks.push_back(user);
  } else {
    r.checks.push_back(check_namespace("user", CLONE_NEWUSER,
                                       "children run under your own uid with none of the namespaces above; "
                                       "run as root for full isolation"));
  }
  r.checks.push_back(check_cgroups());
  r.checks.push_back(check_pidfd());
  for (const auto& p : embedded_policies()) r.checks.push_back(check_policy(std::string(p.name)));
  for (const auto& p : policies) r.checks.push_back(check_policy(p));
  check_end_to_end(sandbox_binary, r);
  // Tasks can run when the end-to-end task did (it needs fork, the wire and,
  // with the shipped policies, seccomp).
  r.usable = r.checks.back().ok;
  return r;
}

}  // namespace pillbox
