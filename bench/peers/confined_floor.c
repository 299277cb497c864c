/* bench/peers/confined_floor.c — the floor of one CONFINED process per task.
 *
 * usage: confined_floor MODE PROCS DIR CAT1 POLICY
 *   MODE   exec    each task's child confines itself, then execve CAT1 FILE
 *                  (stdout /dev/null): what the exec rows of compare.sh run
 *          inproc  the same confinement, then read FILE, write it to
 *                  /dev/null and _exit(0): the floor of an in-process handler
 *          probe   only the setup (cgroups, filter) and the notes on skipped
 *                  steps, on stderr; no task runs
 *          check   one task per worker that shows its confinement on stdout
 *                  (uid, cgroup membership, rlimits), then calls socket(),
 *                  which the filter forbids: it must die of SIGSYS
 *   PROCS  worker loops (one per core in bench/compare.sh), each running its
 *          share of the files of DIR, one task per file, one at a time
 *   POLICY policies/exec.policy: its `allow =` lines are the filter's syscalls
 *   env    FLOOR_SKIP=step,...  leaves steps out (the per-step breakdown of
 *          bench/floor_breakdown.sh): session fds cgroup rlimits uid seccomp
 *          FLOOR_SECCOMP=libseccomp  loads the filter with seccomp_load() in
 *          each child instead of the program exported once (see below)
 * Prints the seconds all tasks took, like fork_ceiling.c.
 *
 * What each child does, in plain C and in pillbox's order: the kernel-facing
 * steps that sandbox/child_runtime.cpp's run_child must do before a payload
 * exists (docs/security.md section 3.2 says why each is required):
 *   session  setsid, PR_SET_PDEATHSIG, orphan check, signal mask reset
 *   fds      /dev/null on 0, 1, 2 (opened in the child, as arrange_fds does),
 *            every other fd closed (close_range)
 *   cgroup   write "0" to the cgroup.procs of the worker's memory and pids
 *            groups (supervisor/exec/cgroups.cpp makes one group per slot
 *            under its own; so does this, removed at the end)
 *   rlimits  sandbox/rlimits.cpp's: CPU, core, stack, open files, processes,
 *            address space (from /proc/self/statm), file size last
 *   uid      setgroups(0), setresgid, setresuid to 60000 + worker, the check
 *            that setuid(0) fails, PR_SET_PDEATHSIG again (a credential change
 *            clears it), kill(-1, SIGKILL) as that uid (uid_pool's sweep)
 *   seccomp  PR_SET_NO_NEW_PRIVS and the exec policy's filter (its allow list
 *            plus sandbox/seccomp_filter.cpp's runtime set, clone without
 *            namespace flags, clone3 ENOSYS, default and bad arch: trap)
 *
 * This is a LOWER bound of what a pillbox task must cost, not a model of it:
 * no supervisor, no wire (no socket, no handshake, no frames), no zygote or
 * fork server, no crash pipe or seccomp listener, no private /tmp (pillbox
 * joins the slot's mount namespace and empties it per task), no payload
 * memory file, no access() check, no namespaces at all. The filter is
 * compiled and exported as BPF once, before any fork, and each child loads
 * the ready program with one seccomp() call: pillbox does that too (its
 * compile_filter runs in prepare_child), but loads a notifying filter with a
 * listener. seccomp_load() would generate the BPF again in every child
 * (FLOOR_SECCOMP=libseccomp measures that). Values are those pillbox sets for
 * compare.sh's exec row: policies/exec.policy's limits with that row's
 * --cpu 5s --memory 512M. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <dirent.h>
#include <seccomp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 256
#define MEMORY_BYTES (512ULL << 20) /* compare.sh's exec row: --memory 512M */
#define CPU_SECONDS 5               /* --cpu 5s */
#define STACK_BYTES (8ULL << 20)    /* policies/exec.policy */
#define OPEN_FILES 256
#define PROCESSES 64
#define FILE_SIZE_BYTES (64ULL << 20)
#define UID_BASE 60000
#define CHECK_FD 3 /* check mode: where a child reports (a copy of stdout) */

enum { S_SESSION, S_FDS, S_CGROUP, S_RLIMITS, S_UID, S_SECCOMP, S_COUNT };
static const char* const kStepNames[S_COUNT] = {"session", "fds", "cgroup", "rlimits", "uid", "seccomp"};
static int step_on[S_COUNT];

/* Per worker: the cgroup.procs files its children join (memory, pids). */
static char procs_file[MAX_PROCS][2][1024];
static int procs_count;               /* 0, 1 or 2 files per worker */
static char created[2 * MAX_PROCS + 2][1024]; /* groups made here, removed in reverse at the end */
static int created_count;

static struct sock_fprog filter;      /* exported once, loaded by each child */
static scmp_filter_ctx filter_ctx;    /* kept for FLOOR_SECCOMP=libseccomp */
static int use_seccomp_load;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void skip(int step, const char* why) {
  if (step_on[step]) fprintf(stderr, "confined_floor: step %s skipped: %s\n", kStepNames[step], why);
  step_on[step] = 0;
}

static int write_file(const char* path, const char* value) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, value, strlen(value));
  int err = errno;
  close(fd);
  errno = err;
  return n == (ssize_t)strlen(value) ? 0 : -1;
}

static int exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Our own group in a controller's hierarchy from /proc/self/cgroup, as
 * supervisor/exec/cgroups.cpp's own_path reads it ("" names v2's "0::" line).
 * Without a trailing slash; the root group is "". */
static int own_path(const char* controller, char* out, size_t size) {
  FILE* f = fopen("/proc/self/cgroup", "re");
  if (!f) return -1;
  char line[1024];
  int found = -1;
  while (found < 0 && fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    char* c1 = strchr(line, ':');
    char* c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) continue;
    *c2 = 0;
    char* controllers = c1 + 1;
    if (*controller == 0 ? *controllers == 0 : 0) found = 0;
    for (char* save = NULL, *name = strtok_r(controllers, ",", &save); found < 0 && name;
         name = strtok_r(NULL, ",", &save)) {
      if (strcmp(name, controller) == 0) found = 0;
    }
    if (found == 0) snprintf(out, size, "%s", strcmp(c2 + 1, "/") == 0 ? "" : c2 + 1);
  }
  fclose(f);
  return found;
}

static int make_group(const char* path) {
  if (mkdir(path, 0755) != 0 && errno != EEXIST) return -1;
  snprintf(created[created_count++], sizeof created[0], "%s", path);
  return 0;
}

/* One memory group (and pids group) per worker, the way CgroupSlots::create
 * makes one per slot: under our own group, with the row's memory limit and
 * the policy's process limit. Any failure: the step is skipped, saying why. */
static void setup_cgroups(int procs) {
  char own[512], base[700], dir[800], why[1200];
  pid_t me = getpid();
  if (exists("/sys/fs/cgroup/cgroup.controllers")) {
    if (own_path("", own, sizeof own) != 0) return skip(S_CGROUP, "no v2 line in /proc/self/cgroup");
    snprintf(base, sizeof base, "/sys/fs/cgroup%s/floor-%d", own, (int)me);
    if (make_group(base) != 0) {
      snprintf(why, sizeof why, "cannot create %s: %s", base, strerror(errno));
      return skip(S_CGROUP, why);
    }
    if (write_file(strcat(strcpy(dir, base), "/cgroup.subtree_control"), "+memory +pids") != 0) {
      snprintf(why, sizeof why, "cgroup v2: cannot enable memory and pids below %s: %s", base, strerror(errno));
      return skip(S_CGROUP, why);
    }
    for (int w = 0; w < procs; ++w) {
      snprintf(dir, sizeof dir, "%s/slot-%d", base, w);
      char file[900];
      if (make_group(dir) != 0 ||
          write_file((snprintf(file, sizeof file, "%s/memory.max", dir), file), "536870912") != 0 ||
          write_file((snprintf(file, sizeof file, "%s/pids.max", dir), file), "64") != 0) {
        snprintf(why, sizeof why, "cgroup v2: cannot set up %s: %s", dir, strerror(errno));
        return skip(S_CGROUP, why);
      }
      snprintf(procs_file[w][0], sizeof procs_file[0][0], "%s/cgroup.procs", dir);
    }
    procs_count = 1; /* v2: memory and pids are the same group */
    return;
  }
  if (!exists("/sys/fs/cgroup/memory")) return skip(S_CGROUP, "no cgroup v1 memory or v2 hierarchy at /sys/fs/cgroup");
  const char* controllers[2] = {"memory", "pids"};
  for (int c = 0; c < 2; ++c) {
    char root[64];
    snprintf(root, sizeof root, "/sys/fs/cgroup/%s", controllers[c]);
    if (c == 1 && !exists(root)) {
      fprintf(stderr, "confined_floor: cgroup v1 without a pids controller: memory group only\n");
      break;
    }
    if (own_path(controllers[c], own, sizeof own) != 0) {
      snprintf(why, sizeof why, "no %s line in /proc/self/cgroup", controllers[c]);
      return skip(S_CGROUP, why);
    }
    snprintf(base, sizeof base, "%s%s/floor-%d", root, own, (int)me);
    if (make_group(base) != 0) {
      snprintf(why, sizeof why, "cannot create %s: %s", base, strerror(errno));
      return skip(S_CGROUP, why);
    }
    for (int w = 0; w < procs; ++w) {
      snprintf(dir, sizeof dir, "%s/slot-%d", base, w);
      char file[900];
      const char* limit_file = c == 0 ? "memory.limit_in_bytes" : "pids.max";
      const char* limit = c == 0 ? "536870912" : "64";
      if (make_group(dir) != 0 || write_file((snprintf(file, sizeof file, "%s/%s", dir, limit_file), file), limit) != 0) {
        snprintf(why, sizeof why, "cgroup v1: cannot set up %s: %s", dir, strerror(errno));
        return skip(S_CGROUP, why);
      }
      snprintf(procs_file[w][c], sizeof procs_file[0][0], "%s/cgroup.procs", dir);
    }
    procs_count = c + 1;
  }
}

/* The groups are empty by now (every task was reaped, and no task forks). */
static void remove_cgroups(void) {
  for (int i = created_count - 1; i >= 0; --i) {
    if (rmdir(created[i]) != 0) fprintf(stderr, "confined_floor: cannot remove %s: %s\n", created[i], strerror(errno));
  }
}

/* The exec policy's syscalls: every name on its `allow =` lines (up to a
 * '#'), plus the runtime set sandbox/seccomp_filter.cpp adds in exec mode,
 * with clone only without namespace flags and clone3 answering ENOSYS, as
 * there. Default and bad arch: SCMP_ACT_TRAP (SIGSYS), what pillbox falls
 * back to where notification is unavailable. */
static int add_allow(const char* name) {
  if (strcmp(name, "clone3") == 0) return 0; /* ENOSYS below */
  int nr = seccomp_syscall_resolve_name(name);
  if (nr == __NR_SCMP_ERROR) {
    fprintf(stderr, "confined_floor: unknown syscall '%s'\n", name);
    return -1;
  }
  int rc;
  if (strcmp(name, "clone") == 0 || strcmp(name, "unshare") == 0) {
    const unsigned long long ns = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                  CLONE_NEWPID | CLONE_NEWNET;
    rc = seccomp_rule_add(filter_ctx, SCMP_ACT_ALLOW, nr, 1, SCMP_A0(SCMP_CMP_MASKED_EQ, ns, 0));
  } else {
    rc = seccomp_rule_add(filter_ctx, SCMP_ACT_ALLOW, nr, 0);
  }
  if (rc != 0 && rc != -EEXIST) {
    fprintf(stderr, "confined_floor: seccomp_rule_add(%s): %s\n", name, strerror(-rc));
    return -1;
  }
  return 0;
}

static int build_filter(const char* policy) {
  static const char* const runtime[] = {
      "read", "write", "readv", "writev", "close", "poll", "ppoll", "sendto", "recvfrom", "sendmsg", "recvmsg",
      "futex", "mmap", "munmap", "mremap", "madvise", "brk", "mprotect", "exit", "exit_group", "rt_sigreturn",
      "rt_sigaction", "rt_sigprocmask", "sigaltstack", "getpid", "gettid", "tgkill", "clock_gettime",
      "clock_nanosleep", "nanosleep", "gettimeofday", "sched_yield", "restart_syscall", "getrandom", "fstat",
      "newfstatat", "lseek", "execve", "dup2", "dup3", "fcntl", "prlimit64", "setrlimit"};
  filter_ctx = seccomp_init(SCMP_ACT_TRAP);
  if (!filter_ctx) return -1;
  seccomp_attr_set(filter_ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_TRAP);
  /* The binary tree sandbox/seccomp_filter.cpp asks for: cheaper to load. */
  seccomp_attr_set(filter_ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  for (size_t i = 0; i < sizeof runtime / sizeof runtime[0]; ++i) {
    if (add_allow(runtime[i]) != 0) return -1;
  }
  FILE* f = fopen(policy, "re");
  if (!f) {
    perror(policy);
    return -1;
  }
  char line[1024];
  int names = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "#\n")] = 0;
    char* eq = strchr(line, '=');
    if (!eq || strncmp(line, "allow", 5) != 0 || strspn(line + 5, " \t") != (size_t)(eq - line - 5)) continue;
    for (char* save = NULL, *name = strtok_r(eq + 1, " \t", &save); name; name = strtok_r(NULL, " \t", &save)) {
      if (add_allow(name) != 0) return fclose(f), -1;
      ++names;
    }
  }
  fclose(f);
  if (names == 0) {
    fprintf(stderr, "confined_floor: no `allow =` line in %s\n", policy);
    return -1;
  }
  if (seccomp_rule_add(filter_ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) != 0) return -1;
  /* Exported once, as sandbox/seccomp_filter.cpp's export_program does. */
  int mem = memfd_create("confined-floor-bpf", MFD_CLOEXEC);
  if (mem < 0 || seccomp_export_bpf(filter_ctx, mem) != 0) return -1;
  off_t size = lseek(mem, 0, SEEK_END);
  if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0) return -1;
  filter.len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
  filter.filter = malloc((size_t)size);
  if (!filter.filter || pread(mem, filter.filter, (size_t)size, 0) != size) return -1;
  close(mem);
  return 0;
}

static void set_limit(int resource, rlim_t cur, rlim_t max) {
  struct rlimit rl = {cur, max};
  if (setrlimit(resource, &rl) != 0) _exit(120);
}

/* The address space in use, as sandbox/rlimits.cpp's current_address_space_bytes reads it. */
static rlim_t address_space(void) {
  char buf[128];
  int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  return (rlim_t)strtoull(buf, NULL, 10) * (rlim_t)sysconf(_SC_PAGESIZE);
}

/* One task's child: the steps in run_child's order, then the task. Exit
 * codes 120-127: a step failed (the parent stops the benchmark). */
static void child(int worker, pid_t parent, int devnull, const char* mode, const char* file, const char* cat1) {
  if (step_on[S_SESSION]) {
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(121);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
  }
  if (step_on[S_FDS]) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(122);
    syscall(SYS_close_range, strcmp(mode, "check") == 0 ? CHECK_FD + 1U : 3U, ~0U, 0U);
  } else if (dup2(devnull, 1) < 0) { /* stdout is /dev/null in every variant: the task's definition */
    _exit(122);
  }
  if (step_on[S_CGROUP]) {
    for (int i = 0; i < procs_count; ++i) {
      int fd = open(procs_file[worker][i], O_WRONLY | O_CLOEXEC);
      if (fd < 0 || write(fd, "0", 1) != 1) _exit(123);
      close(fd);
    }
  }
  if (step_on[S_RLIMITS]) {
    set_limit(RLIMIT_CPU, CPU_SECONDS, CPU_SECONDS + 1);
    set_limit(RLIMIT_CORE, 0, 0);
    set_limit(RLIMIT_STACK, STACK_BYTES, STACK_BYTES);
    set_limit(RLIMIT_NOFILE, OPEN_FILES, OPEN_FILES);
    set_limit(RLIMIT_NPROC, PROCESSES, PROCESSES);
    /* Twice the memory limit with a memory cgroup, as apply_rlimits sets it. */
    rlim_t as = address_space() + (step_on[S_CGROUP] ? 2 : 1) * MEMORY_BYTES;
    set_limit(RLIMIT_AS, as, as);
  }
  if (step_on[S_UID]) {
    uid_t id = UID_BASE + (uid_t)worker;
    if (setgroups(0, NULL) != 0 || setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0) _exit(124);
    if (setuid(0) == 0) _exit(124);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(121);
    kill(-1, SIGKILL);
  }
  if (step_on[S_SECCOMP]) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(125);
    if (use_seccomp_load ? seccomp_load(filter_ctx) != 0
                         : syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &filter) != 0) {
      _exit(125);
    }
  }
  if (strcmp(mode, "check") == 0) {
    /* What the task sees, then a forbidden call: SIGSYS ends it. */
    char line[1024];
    struct rlimit as, np;
    getrlimit(RLIMIT_AS, &as);
    getrlimit(RLIMIT_NPROC, &np);
    int n = snprintf(line, sizeof line, "check worker %d: pid %d uid %d gid %d sid %d RLIMIT_AS %llu RLIMIT_NPROC %llu\n",
                     worker, (int)getpid(), (int)getuid(), (int)getgid(), (int)getsid(0),
                     (unsigned long long)as.rlim_cur, (unsigned long long)np.rlim_cur);
    if (write(CHECK_FD, line, (size_t)n) < 0) _exit(126);
    for (int i = 0; i < procs_count; ++i) {
      int fd = open(procs_file[worker][i], O_RDONLY | O_CLOEXEC);
      ssize_t got = fd >= 0 ? read(fd, line, sizeof line - 1) : -1;
      if (got < 0) got = 0;
      line[got] = 0;
      for (char* p = line; *p; ++p) if (*p == '\n') *p = ' ';
      char msg[1700];
      n = snprintf(msg, sizeof msg, "check worker %d: %s lists: %s\n", worker, procs_file[worker][i], line);
      if (write(CHECK_FD, msg, (size_t)n) < 0) _exit(126);
    }
    n = snprintf(line, sizeof line, "check worker %d: calling socket(), which the filter forbids\n", worker);
    if (write(CHECK_FD, line, (size_t)n) < 0) _exit(126);
    socket(AF_INET, SOCK_STREAM, 0);
    _exit(127); /* reached only without the filter */
  }
  if (step_on[S_RLIMITS] && strcmp(mode, "inproc") == 0) set_limit(RLIMIT_FSIZE, FILE_SIZE_BYTES, FILE_SIZE_BYTES);
  if (strcmp(mode, "inproc") == 0) {
    char buf[65536];
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) _exit(1);
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) != 0;) {
      if (n < 0 || write(1, buf, (size_t)n) != n) _exit(1);
    }
    _exit(0);
  }
  /* exec: RLIMIT_FSIZE last, as exec_program sets it; the environment
   * pillbox gives a program. */
  if (step_on[S_RLIMITS]) set_limit(RLIMIT_FSIZE, FILE_SIZE_BYTES, FILE_SIZE_BYTES);
  char* argv[] = {(char*)cat1, (char*)file, NULL};
  char* env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "HOME=/", "TMPDIR=/tmp", NULL};
  execve(cat1, argv, env);
  _exit(127);
}

static int by_name(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: confined_floor exec|inproc|probe|check PROCS DIR CAT1 POLICY\n");
    return 2;
  }
  const char* mode = argv[1];
  int procs = atoi(argv[2]);
  const char *dir = argv[3], *cat1 = argv[4];
  int check = strcmp(mode, "check") == 0;
  if (strcmp(mode, "exec") != 0 && strcmp(mode, "inproc") != 0 && strcmp(mode, "probe") != 0 && !check) {
    fprintf(stderr, "confined_floor: MODE must be exec, inproc, probe or check\n");
    return 2;
  }
  if (procs < 1 || procs > MAX_PROCS) {
    fprintf(stderr, "confined_floor: PROCS must be 1 to %d\n", MAX_PROCS);
    return 2;
  }
  for (int s = 0; s < S_COUNT; ++s) step_on[s] = 1;
  const char* skip_list = getenv("FLOOR_SKIP");
  if (skip_list && *skip_list) {
    char list[256];
    snprintf(list, sizeof list, "%s", skip_list);
    for (char* save = NULL, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
      int s = 0;
      while (s < S_COUNT && strcmp(kStepNames[s], name) != 0) ++s;
      if (s == S_COUNT) {
        fprintf(stderr, "confined_floor: unknown step '%s' in FLOOR_SKIP (session fds cgroup rlimits uid seccomp)\n", name);
        return 2;
      }
      step_on[s] = 0;
    }
  }
  use_seccomp_load = getenv("FLOOR_SECCOMP") && strcmp(getenv("FLOOR_SECCOMP"), "libseccomp") == 0;

  /* The files, in name order; worker w runs those whose index is w modulo PROCS. */
  char** files = NULL;
  size_t count = 0, cap = 0;
  DIR* d = opendir(dir);
  if (!d) {
    perror(dir);
    return 2;
  }
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    if (count == cap) {
      cap = cap ? 2 * cap : 1024;
      files = realloc(files, cap * sizeof *files);
      if (!files) return 1;
    }
    if (asprintf(&files[count++], "%s/%s", dir, e->d_name) < 0) return 1;
  }
  closedir(d);
  if (count < (size_t)procs && !check && strcmp(mode, "probe") != 0) {
    fprintf(stderr, "confined_floor: fewer files in %s than PROCS\n", dir);
    return 2;
  }
  qsort(files, count, sizeof *files, by_name);

  if (step_on[S_UID] && geteuid() != 0) skip(S_UID, "not root: no uid to change to");
  if (step_on[S_CGROUP]) setup_cgroups(procs);
  if (step_on[S_SECCOMP] && build_filter(argv[5]) != 0) {
    fprintf(stderr, "confined_floor: cannot build the seccomp filter from %s\n", argv[5]);
    remove_cgroups();
    return 1;
  }
  if (strcmp(mode, "probe") == 0) {
    remove_cgroups();
    return 0;
  }
  /* Check mode: the children report on fd 3, a copy of our stdout, which
   * their fds step keeps open (every other run closes it). */
  if (check && dup2(1, CHECK_FD) != CHECK_FD) return 1;
  int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return 1;
  fflush(NULL);

  double t0 = now();
  int failed = 0;
  for (int w = 0; w < procs; ++w) {
    pid_t loop = fork();
    if (loop < 0) {
      perror("fork");
      failed = 1;
      break;
    }
    if (loop == 0) {
      pid_t me = getpid();
      size_t tasks = check ? 1 : count;
      for (size_t i = check ? 0 : (size_t)w; i < tasks; i += check ? 1 : (size_t)procs) {
        pid_t c = fork();
        if (c < 0) _exit(1);
        if (c == 0) child(w, me, devnull, mode, count ? files[i] : "/dev/null", cat1);
        int status;
        if (waitpid(c, &status, 0) != c) _exit(1);
        if (check) {
          int sigsys = WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS;
          printf("check worker %d: the task %s\n", w,
                 sigsys ? "died of SIGSYS (confined)" : "did NOT die of SIGSYS");
          fflush(stdout);
          if (!sigsys) _exit(1);
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          fprintf(stderr, "confined_floor: task %s: %s %d\n", files[i], WIFEXITED(status) ? "exit" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
          _exit(1);
        }
      }
      _exit(0);
    }
  }
  int status;
  while (wait(&status) > 0) failed |= status != 0;
  double seconds = now() - t0;
  remove_cgroups();
  if (!check) printf("%.6f\n", seconds);
  return failed;
}
