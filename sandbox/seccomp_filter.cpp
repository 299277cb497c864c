#include "sandbox/seccomp_filter.h"

#include <linux/sched.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "shared/unique_fd.h"

namespace pillbox::sandbox {
namespace {

std::string errno_text(const char* what, int err) { return std::string(what) + ": " + std::strerror(err); }

// `notify`: a denied syscall is reported to the listener rather than raised
// as SIGSYS in the task (shared/seccomp_notify.h says why).
std::uint32_t default_action(SeccompDefault d, bool notify) {
  switch (d) {
    case SeccompDefault::kTrap: return notify ? SCMP_ACT_NOTIFY : SCMP_ACT_TRAP;
    case SeccompDefault::kKill: return SCMP_ACT_KILL_PROCESS;
    case SeccompDefault::kErrno: return SCMP_ACT_ERRNO(EPERM);
  }
  return SCMP_ACT_KILL_PROCESS;
}

// Flags that create namespaces. A task in a new user namespace holds every
// capability inside it, which opens kernel code (mounts, netfilter, ...) an
// unprivileged process never reaches; no task needs that. CLONE_NEWTIME is
// left out: in clone(2) its bit is part of the exit signal (clone3 and
// unshare only).
constexpr std::uint64_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                          CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET;

// Syscalls that are allowed by name only with some of their arguments.
//   clone, unshare: only without namespace flags (the flags are argument 0
//     of both on every architecture pillbox builds for; a call with them
//     meets the policy's default action, like any denied syscall).
//   clone3: its flags are in memory, where seccomp cannot look: it fails
//     with ENOSYS, and libc (glibc >= 2.34: fork, posix_spawn, threads) falls
//     back to clone, whose flags the filter does see.
Status add_conditional(scmp_filter_ctx ctx, const std::string& name, bool& handled) {
  handled = true;
  if (name == "clone" || name == "unshare") {
    const int rc = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, seccomp_syscall_resolve_name(name.c_str()), 1,
                                    SCMP_A0(SCMP_CMP_MASKED_EQ, kNamespaceFlags, 0));
    if (rc != 0 && rc != -EEXIST) return Status::error(errno_text(("seccomp_rule_add(" + name + ")").c_str(), -rc));
    return Status::ok();
  }
  if (name == "clone3") return Status::ok();  // always ENOSYS (compile_filter)
  handled = false;
  return Status::ok();
}

// The filter in `ctx` as a BPF program.
Expected<std::vector<sock_filter>> export_program(scmp_filter_ctx ctx);

}  // namespace

const std::vector<std::string>& runtime_syscalls(bool exec_mode) {
  // In-process: the wire (one connected unix socket, blocking I/O with
  // poll), memory management, the crash handler, exit. The child is
  // single-threaded; nothing else of pillbox runs after the filter.
  static const std::vector<std::string> base = {
      "read",          "write",           "readv",        "writev",       "close",
      "poll",          "ppoll",           "sendto",       "recvfrom",     "sendmsg",
      "recvmsg",       "futex",           "mmap",         "munmap",       "mremap",
      "madvise",       "brk",             "mprotect",     "exit",         "exit_group",
      "rt_sigreturn",  "rt_sigaction",    "rt_sigprocmask", "sigaltstack", "getpid",
      "gettid",        "tgkill",          "clock_gettime", "clock_nanosleep", "nanosleep",
      "gettimeofday",  "sched_yield",     "restart_syscall", "getrandom", "fstat",
      "newfstatat",    "lseek",
  };
  // Exec mode adds what happens between the TASK frame and execve: putting
  // the payload file in place and the last rlimit.
  static const std::vector<std::string> exec = [] {
    std::vector<std::string> v = base;
    for (const char* s : {"execve", "dup2", "dup3", "fcntl", "prlimit64", "setrlimit"}) v.emplace_back(s);
    return v;
  }();
  return exec_mode ? exec : base;
}

namespace {

Expected<std::vector<sock_filter>> compile_program(const SeccompRules& rules, bool exec_mode, bool notify) {
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(default_action(rules.default_action, notify)),
                                                      seccomp_release);
  if (!ctx) return Error{"seccomp_init failed"};
  // A syscall of another ABI (int 0x80 from a 64-bit process, x32 numbers)
  // meets the same default: named by the kernel's notification (its arch
  // says which table), instead of a SIGSYS kill that nothing names and that
  // would look like a SIGSYS the task raised itself.
  if (const int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, default_action(rules.default_action, notify));
      rc != 0) {
    return Error{errno_text("seccomp_attr_set(SCMP_FLTATR_ACT_BADARCH)", -rc)};
  }
  // The syscall numbers as a binary tree, not a list: the same rules, but the
  // kernel checks each syscall number against the filter when a child loads
  // it (its action cache), so every load paid for the list's length. Measured
  // for a 168-instruction allowlist: 0.2 ms per load as a list, 0.1 as a tree.
  if (const int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2); rc != 0) {
    return Error{errno_text("seccomp_attr_set(SCMP_FLTATR_CTL_OPTIMIZE)", -rc)};
  }
  auto allow = [&](const std::string& name) -> Status {
    bool conditional = false;
    if (auto s = add_conditional(ctx.get(), name, conditional); !s || conditional) return s;
    const int nr = seccomp_syscall_resolve_name(name.c_str());
    if (nr == __NR_SCMP_ERROR) return Status::error("unknown syscall '" + name + "'");
    const int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, nr, 0);
    if (rc != 0 && rc != -EEXIST) return Status::error(errno_text(("seccomp_rule_add(" + name + ")").c_str(), -rc));
    return Status::ok();
  };
  for (const auto& name : runtime_syscalls(exec_mode)) {
    if (auto s = allow(name); !s) return Error{s.message()};
  }
  for (const auto& name : rules.allow) {
    if (auto s = allow(name); !s) return Error{s.message()};
  }
  if (const int rc = seccomp_rule_add(ctx.get(), SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0); rc != 0) {
    return Error{errno_text("seccomp_rule_add(clone3)", -rc)};
  }
  return export_program(ctx.get());
}

Expected<std::vector<sock_filter>> export_program(scmp_filter_ctx ctx) {
  UniqueFd mem(::memfd_create("pillbox-bpf", MFD_CLOEXEC));
  if (!mem.valid()) return Error{errno_text("memfd_create", errno)};
  if (const int rc = seccomp_export_bpf(ctx, mem.get()); rc != 0) {
    return Error{errno_text("seccomp_export_bpf", -rc)};
  }
  const off_t size = ::lseek(mem.get(), 0, SEEK_END);
  if (size <= 0 || size % static_cast<off_t>(sizeof(sock_filter)) != 0) return Error{"seccomp_export_bpf produced no program"};
  std::vector<sock_filter> program(static_cast<std::size_t>(size) / sizeof(sock_filter));
  if (::pread(mem.get(), program.data(), static_cast<std::size_t>(size), 0) != size) {
    return Error{errno_text("reading the BPF program", errno)};
  }
  return program;
}

}  // namespace

Expected<CompiledFilter> compile_filter(const SeccompRules& rules, bool exec_mode) {
  CompiledFilter out;
  if (!rules.enabled) return out;
  auto trap = compile_program(rules, exec_mode, /*notify=*/false);
  if (!trap) return Error{trap.error()};
  if (rules.default_action != SeccompDefault::kTrap) {
    out.program = std::move(*trap);
    return out;
  }
  auto notify = compile_program(rules, exec_mode, /*notify=*/true);
  if (!notify) {  // a libseccomp that cannot express it: SIGSYS, named by the task's report
    out.program = std::move(*trap);
    return out;
  }
  out.program = std::move(*notify);
  out.fallback = std::move(*trap);
  out.notifies = true;
  return out;
}

Expected<CompiledFilter> compile_namespace_filter() {
  std::unique_ptr<void, void (*)(scmp_filter_ctx)> ctx(seccomp_init(SCMP_ACT_ALLOW), seccomp_release);
  if (!ctx) return Error{"seccomp_init failed"};
  auto deny = [&](int nr, std::uint32_t action, unsigned argc, const scmp_arg_cmp* arg) -> Status {
    const int rc = argc == 0 ? seccomp_rule_add(ctx.get(), action, nr, 0) : seccomp_rule_add(ctx.get(), action, nr, 1, *arg);
    if (rc != 0 && rc != -EEXIST) return Status::error(errno_text("seccomp_rule_add", -rc));
    return Status::ok();
  };
  // Rules for one syscall are OR'ed: one per namespace flag ("this bit set").
  for (int nr : {SCMP_SYS(clone), SCMP_SYS(unshare)}) {
    for (std::uint64_t bit = 1; bit != 0; bit <<= 1) {
      if ((kNamespaceFlags & bit) == 0) continue;
      const scmp_arg_cmp set = SCMP_A0(SCMP_CMP_MASKED_EQ, bit, bit);
      if (auto s = deny(nr, SCMP_ACT_ERRNO(EPERM), 1, &set); !s) return Error{s.message()};
    }
  }
  if (auto s = deny(SCMP_SYS(setns), SCMP_ACT_ERRNO(EPERM), 0, nullptr); !s) return Error{s.message()};
  if (auto s = deny(SCMP_SYS(clone3), SCMP_ACT_ERRNO(ENOSYS), 0, nullptr); !s) return Error{s.message()};
  auto program = export_program(ctx.get());
  if (!program) return Error{program.error()};
  CompiledFilter out;
  out.program = std::move(*program);
  return out;
}

namespace {

long load_program(const std::vector<sock_filter>& program, unsigned long flags) {
  sock_fprog prog{};
  prog.len = static_cast<unsigned short>(program.size());
  prog.filter = const_cast<sock_filter*>(program.data());
  return ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
}

}  // namespace

Expected<int> load_filter(const CompiledFilter& filter) {
  if (filter.program.empty()) return -1;
  if (filter.notifies) {
    // A listener cannot be combined with plain TSYNC; the child runtime is
    // single-threaded here, and TSYNC_ESRCH still refuses a second thread.
    const long listener = load_program(filter.program, SECCOMP_FILTER_FLAG_NEW_LISTENER | SECCOMP_FILTER_FLAG_TSYNC_ESRCH);
    if (listener >= 0) return static_cast<int>(listener);
    if (errno != EINVAL) return Error{errno_text("seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER)", errno)};
    // An older kernel: no listeners (before 5.0) or no TSYNC_ESRCH (before 5.7).
    const long rc = load_program(filter.program, SECCOMP_FILTER_FLAG_NEW_LISTENER);
    if (rc >= 0) return static_cast<int>(rc);
    if (errno != EINVAL) return Error{errno_text("seccomp(SECCOMP_SET_MODE_FILTER, NEW_LISTENER)", errno)};
  }
  const auto& program = filter.notifies ? filter.fallback : filter.program;
  const long rc = load_program(program, SECCOMP_FILTER_FLAG_TSYNC);
  if (rc != 0) {
    if (rc > 0) return Error{"seccomp TSYNC failed: thread " + std::to_string(rc) + " could not be synchronized"};
    return Error{errno_text("seccomp(SECCOMP_SET_MODE_FILTER)", errno)};
  }
  return -1;
}

}  // namespace pillbox::sandbox
