/* bench/peers/confined_floor.c — the floor of one CONFINED process per task.
 *
 * usage: confined_floor MODE PROCS DIR CAT1 POLICY
 *   MODE   exec    each task's child confines itself, then execve CAT1 FILE
 *                  (stdout /dev/null): what the exec rows of compare.sh run
 *          inproc  the same confinement, then read FILE, write it to
 *                  /dev/null and _exit(0): the floor of an in-process handler
 *          probe   only the setup (policy, cgroups, private /tmp, filter)
 *                  and the notes on skipped steps, on stderr; no task runs
 *          check   one task per worker that reports its confinement on
 *                  stdout (ids, limits, its cgroups' members, its /tmp),
 *                  then calls socket(), which no policy allows: it must die
 *                  of SIGSYS
 *   PROCS  worker loops (one per core in bench/compare.sh), each running its
 *          share of the files of DIR, one task per file, one at a time
 *   POLICY the policy pillbox would use (compare.sh: policies/exec.policy for
 *          exec, policies/strict.policy, echo's, for inproc): its [limits],
 *          its [isolation] tmp and its `allow =` syscalls
 *   env    FLOOR_SKIP=step,...  leaves steps out (the per-step breakdown of
 *          bench/floor_breakdown.sh): session fds cgroup tmp rlimits uid seccomp
 *          FLOOR_SECCOMP=libseccomp  loads the filter with seccomp_load() in
 *          each child instead of the program exported once (see below)
 *          FLOOR_TIMES=1  prints on stderr the CPU time of each step in the
 *          child, per task (its own clock: what others' load does not touch)
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
 *   tmp      policies with `tmp` (exec): setns into the worker's mount
 *            namespace with its private /tmp, /var/tmp and /dev/shm (made
 *            once per worker, as sandbox/private_tmp.cpp's make_slot_namespace
 *            makes one per slot), chdir /tmp; as the task's uid, the listing
 *            of each that empty_private_dirs makes
 *   rlimits  sandbox/rlimits.cpp's: CPU, core, stack, open files, processes,
 *            address space (from /proc/self/statm), file size (exec: last)
 *   uid      setgroups(0), setresgid, setresuid to 60000 + worker, the check
 *            that setuid(0) fails, PR_SET_PDEATHSIG again (a credential change
 *            clears it), kill(-1, SIGKILL) as that uid (uid_pool's sweep)
 *   seccomp  PR_SET_NO_NEW_PRIVS and the policy's filter (its allow list plus
 *            sandbox/seccomp_filter.cpp's runtime set, clone without
 *            namespace flags, clone3 ENOSYS, default and bad arch: trap)
 * A step the host does not allow (no root, no cgroup, no mount namespace) is
 * skipped, saying so on stderr.
 *
 * This is a LOWER bound of what a pillbox task must cost, not a model of it:
 * no supervisor, no wire (no socket, no handshake, no frames), no zygote or
 * fork server, no crash pipe or seccomp listener, no payload memory file, no
 * access() check, no namespaces made per task, no emptying of /tmp beyond a
 * look at what is there. The filter is compiled and exported as BPF once,
 * before any fork, and each child loads the ready program with one seccomp()
 * call: pillbox does that too (compile_filter runs once, in prepare_child),
 * but loads a notifying filter and hands its listener over. seccomp_load()
 * would generate the BPF again in every child (FLOOR_SECCOMP=libseccomp
 * measures that). The limits' values are the policy's (pillbox's exec row
 * of compare.sh lowers cpu and memory on its command line: the same calls). */
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
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROCS 256
/* The policy's [limits] and [isolation] tmp (read_policy): what pillbox sets. */
static unsigned long long cpu_seconds = 5, memory_bytes = 512ULL << 20, stack_bytes = 8ULL << 20, open_files = 64,
                          processes = 16, file_size_bytes = 1ULL << 20, tmp_bytes = 0;
#define UID_BASE 60000
#define CHECK_FD 3 /* check mode: where a child reports (a copy of stdout) */
#define NS_FD 4    /* the slot's mount namespace until joined (child_runtime.cpp's kMountNsFd) */

enum { S_SESSION, S_FDS, S_CGROUP, S_TMP, S_RLIMITS, S_UID, S_SECCOMP, S_COUNT };
static const char* const kStepNames[S_COUNT] = {"session", "fds", "cgroup", "tmp", "rlimits", "uid", "seccomp"};
static int step_on[S_COUNT];

/* Per worker: the cgroup.procs files its children join (memory, pids). */
static char procs_file[MAX_PROCS][2][1024];
static int procs_count;               /* 0, 1 or 2 files per worker */
static char created[2 * MAX_PROCS + 2][1024]; /* groups made here, removed in reverse at the end */
static int created_count;

static struct sock_fprog filter;      /* exported once, loaded by each child */
static scmp_filter_ctx filter_ctx;    /* kept for FLOOR_SECCOMP=libseccomp */
static int use_seccomp_load;

/* FLOOR_TIMES=1: each child adds the CPU time of each of its steps (its own
 * clock, CLOCK_THREAD_CPUTIME_ID: others' load does not count) here, shared
 * by every process of the run; printed at the end. What a step costs the
 * kernel after the child's last instruction (exit with a cgroup, a filter, a
 * namespace) is not in it: FLOOR_SKIP's whole-run CPU has that. The first
 * step also pays the child's first minor faults on the code it runs (fork
 * copies no page tables of file mappings): ~25-30 us here, which the next
 * step pays when the first is skipped. */
static unsigned long long* step_ns; /* S_COUNT sums, then the count of tasks */
static unsigned long long mark_ns;

static unsigned long long cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
}

/* The CPU time since the last mark goes to `step`. */
static void mark(int step) {
  if (!step_ns) return;
  unsigned long long t = cpu_ns();
  __atomic_fetch_add(&step_ns[step], t - mark_ns, __ATOMIC_RELAXED);
  mark_ns = t;
}

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
    if (*controller == 0 && *controllers == 0) found = 0;
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
  char own[512], base[700], dir[800], why[1200], memory[32], pids[32];
  pid_t me = getpid();
  snprintf(memory, sizeof memory, "%llu", memory_bytes);
  snprintf(pids, sizeof pids, "%llu", processes);
  if (exists("/sys/fs/cgroup/cgroup.controllers")) {
    if (own_path("", own, sizeof own) != 0) return skip(S_CGROUP, "no v2 line in /proc/self/cgroup");
    /* v2's "no internal processes" rule: controllers reach our groups only
     * if our own group hands them down, which it can only without processes
     * of its own (probe_cgroups in supervisor/exec/cgroups.cpp says the same). */
    snprintf(dir, sizeof dir, "/sys/fs/cgroup%s/cgroup.subtree_control", own);
    if (write_file(dir, "+memory +pids") != 0) {
      snprintf(why, sizeof why, "cgroup v2: cannot enable memory and pids below /sys/fs/cgroup%s (processes of its own?): %s",
               own, strerror(errno));
      return skip(S_CGROUP, why);
    }
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
          write_file((snprintf(file, sizeof file, "%s/memory.max", dir), file), memory) != 0 ||
          write_file((snprintf(file, sizeof file, "%s/pids.max", dir), file), pids) != 0) {
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
      const char* limit = c == 0 ? memory : pids;
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

/* The policy's `allow =` names (read_policy), as given. */
static char* allowed[512];
static int allowed_count;

/* A size or time of a policy ("64M", "10s"): bytes or seconds. */
static unsigned long long policy_number(const char* text) {
  char* end;
  unsigned long long v = strtoull(text, &end, 10);
  switch (*end) {
    case 'K': return v << 10;
    case 'M': return v << 20;
    case 'G': return v << 30;
    default: return v; /* plain numbers, and "s" */
  }
}

/* What pillbox takes from the policy here: [limits], [isolation] tmp and
 * the `allow =` lines (each up to a '#'). docs/policy-format.md has the
 * whole format; this reads only the lines policies/ ship. */
static int read_policy(const char* policy) {
  FILE* f = fopen(policy, "re");
  if (!f) {
    perror(policy);
    return -1;
  }
  char line[1024];
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "#\n")] = 0;
    char* eq = strchr(line, '=');
    if (!eq) continue;
    char key[64] = "";
    sscanf(line, "%63[a-z_]", key);
    char* value = eq + 1 + strspn(eq + 1, " \t");
    if (strcmp(key, "allow") == 0) {
      for (char* save = NULL, *name = strtok_r(value, " \t", &save); name; name = strtok_r(NULL, " \t", &save)) {
        if (allowed_count == (int)(sizeof allowed / sizeof allowed[0]) || !(allowed[allowed_count++] = strdup(name))) {
          fclose(f);
          return -1;
        }
      }
    } else if (strcmp(key, "cpu") == 0) {
      cpu_seconds = policy_number(value);
    } else if (strcmp(key, "memory") == 0) {
      memory_bytes = policy_number(value);
    } else if (strcmp(key, "stack") == 0) {
      stack_bytes = policy_number(value);
    } else if (strcmp(key, "open_files") == 0) {
      open_files = policy_number(value);
    } else if (strcmp(key, "processes") == 0) {
      processes = policy_number(value);
    } else if (strcmp(key, "file_size") == 0) {
      file_size_bytes = policy_number(value);
    } else if (strcmp(key, "tmp") == 0) {
      tmp_bytes = policy_number(value);
    }
  }
  fclose(f);
  if (allowed_count == 0) {
    fprintf(stderr, "confined_floor: no `allow =` line in %s\n", policy);
    return -1;
  }
  return 0;
}

/* A syscall the filter allows: clone and unshare only without namespace
 * flags, clone3 never (ENOSYS below), as sandbox/seccomp_filter.cpp does. */
static int add_allow(const char* name) {
  if (strcmp(name, "clone3") == 0) return 0;
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

/* The policy's filter: its allow list plus the runtime set that
 * sandbox/seccomp_filter.cpp's runtime_syscalls adds (the exec additions in
 * exec mode). Default and bad arch: SCMP_ACT_TRAP (SIGSYS), what pillbox
 * falls back to where the kernel cannot notify. */
static int build_filter(int exec_mode) {
  static const char* const runtime[] = {
      "read", "write", "readv", "writev", "close", "poll", "ppoll", "sendto", "recvfrom", "sendmsg", "recvmsg",
      "futex", "mmap", "munmap", "mremap", "madvise", "brk", "mprotect", "exit", "exit_group", "rt_sigreturn",
      "rt_sigaction", "rt_sigprocmask", "sigaltstack", "getpid", "gettid", "tgkill", "clock_gettime",
      "clock_nanosleep", "nanosleep", "gettimeofday", "sched_yield", "restart_syscall", "getrandom", "fstat",
      "newfstatat", "lseek"};
  static const char* const exec_runtime[] = {"execve", "dup2", "dup3", "fcntl", "prlimit64", "setrlimit"};
  filter_ctx = seccomp_init(SCMP_ACT_TRAP);
  if (!filter_ctx) return -1;
  seccomp_attr_set(filter_ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_TRAP);
  /* The binary tree sandbox/seccomp_filter.cpp asks for: cheaper to load. */
  seccomp_attr_set(filter_ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
  for (size_t i = 0; i < sizeof runtime / sizeof runtime[0]; ++i) {
    if (add_allow(runtime[i]) != 0) return -1;
  }
  for (size_t i = 0; exec_mode && i < sizeof exec_runtime / sizeof exec_runtime[0]; ++i) {
    if (add_allow(exec_runtime[i]) != 0) return -1;
  }
  for (int i = 0; i < allowed_count; ++i) {
    if (add_allow(allowed[i]) != 0) return -1;
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

/* The private /tmp of a slot, as sandbox/private_tmp.cpp's
 * make_slot_namespace makes it: a mount namespace with a tmpfs on /tmp,
 * /var/tmp and /dev/shm, the paths the task needs bound back (read-only)
 * where they are under them. Made once per worker, in the worker, which then
 * goes back to its own namespace; each task joins it (setns) and finds it
 * empty. Returns the namespace's fd, or -1 with errno (and `what`). */
static const char* const kPrivateDirs[] = {"/tmp", "/var/tmp", "/dev/shm"};

static int under_private_dir(const char* path) {
  for (size_t i = 0; i < 3; ++i) {
    size_t n = strlen(kPrivateDirs[i]);
    if (strncmp(path, kPrivateDirs[i], n) == 0 && path[n] == '/') return 1;
  }
  return 0;
}

/* mkdir -p of the directories above `path`, and `path` itself: a directory
 * or an empty file to bind onto. */
static int mount_point(const char* path, int directory) {
  char p[4096];
  snprintf(p, sizeof p, "%s", path);
  for (char* slash = strchr(p + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
    *slash = 0;
    if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
    *slash = '/';
  }
  if (directory) return mkdir(p, 0755) == 0 || errno == EEXIST ? 0 : -1;
  int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return -1;
  close(fd);
  return 0;
}

static int make_slot_namespace(const char* const* keep, int keep_count, const char** what) {
  int host = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
  *what = "opening /proc/self/ns/mnt";
  if (host < 0) return -1;
  int kept[4], ns = -1, err = 0;
  *what = "unshare(CLONE_NEWNS)";
  if (unshare(CLONE_NEWNS) != 0) return err = errno, close(host), errno = err, -1;
  char options[128];
  snprintf(options, sizeof options, "size=%llu,nr_inodes=%llu,mode=1777", tmp_bytes,
           tmp_bytes / 4096 > 1024 ? tmp_bytes / 4096 : 1024);
  *what = "making mounts private";
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) goto out;
  for (int i = 0; i < keep_count; ++i) kept[i] = open(keep[i], O_PATH | O_CLOEXEC);
  *what = "mounting the tmpfs";
  for (size_t i = 0; i < 3; ++i) {
    if (exists(kPrivateDirs[i]) && mount("tmpfs", kPrivateDirs[i], "tmpfs", MS_NOSUID | MS_NODEV, options) != 0) goto out;
  }
  *what = "binding a kept path";
  for (int i = 0; i < keep_count; ++i) {
    struct stat st;
    char source[64];
    if (kept[i] < 0 || fstat(kept[i], &st) != 0) goto out;
    snprintf(source, sizeof source, "/proc/self/fd/%d", kept[i]);
    if (mount_point(keep[i], S_ISDIR(st.st_mode)) != 0 || mount(source, keep[i], NULL, MS_BIND | MS_REC, NULL) != 0 ||
        mount(NULL, keep[i], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) != 0) {
      goto out;
    }
    close(kept[i]);
  }
  *what = "opening the namespace";
  ns = open("/proc/self/ns/mnt", O_RDONLY | O_CLOEXEC);
out:
  err = errno;
  *what = ns >= 0 ? NULL : *what;
  if (setns(host, CLONE_NEWNS) != 0) ns = -1, err = errno, *what = "going back to the worker's namespace";
  close(host);
  errno = err;
  return ns;
}

/* The check pillbox's empty_private_dirs makes as the task's uid: each
 * private directory listed until its first name. Something there (the mount
 * points of the kept paths) sends pillbox down its full walk; here the names
 * are only looked at once (fstatat): cheaper, so still a lower bound. */
static void empty_private_dirs(void) {
  for (size_t i = 0; i < 3; ++i) {
    int fd = open(kPrivateDirs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    char buf[4096] __attribute__((aligned(8)));
    for (ssize_t n; (n = getdents64(fd, buf, sizeof buf)) > 0;) {
      for (ssize_t off = 0; off < n;) {
        struct dirent64* e = (struct dirent64*)(buf + off);
        off += e->d_reclen;
        struct stat st;
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW);
      }
    }
    close(fd);
  }
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

/* Check mode: what the task looks like after every step but the filter
 * (ids, limits, its cgroups' members, its working directory), on CHECK_FD. */
static void check_report(int worker) {
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
  char cwd[256] = "?", names[512] = "";
  if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "?");
  DIR* here = opendir(".");
  for (struct dirent* e; here && (e = readdir(here)) != NULL;) {
    if (strlen(names) + strlen(e->d_name) + 2 < sizeof names) strcat(strcat(names, " "), e->d_name);
  }
  if (here) closedir(here);
  n = snprintf(line, sizeof line, "check worker %d: cwd %s holds:%s\n", worker, cwd, names);
  if (write(CHECK_FD, line, (size_t)n) < 0) _exit(126);
}

/* One task's child: the steps in run_child's order, then the task. Exit
 * codes 120-127: a step failed (the parent stops the benchmark). */
static void child(int worker, pid_t parent, int devnull, const char* mode, const char* file,
                  const char* cat1) {
  if (step_ns) {
    __atomic_fetch_add(&step_ns[S_COUNT], 1, __ATOMIC_RELAXED);
    /* The copy-on-write fault of our data page is fork's, not a step's:
     * taken before the clock starts. */
    *(volatile unsigned long long*)&mark_ns = 0;
    mark_ns = cpu_ns();
  }
  if (step_on[S_SESSION]) {
    setsid();
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(121);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    mark(S_SESSION);
  }
  if (step_on[S_FDS]) {
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(122);
    /* All but what the next steps use, as arrange_fds keeps its own range. */
    if (strcmp(mode, "check") != 0) close(CHECK_FD);
    if (!step_on[S_TMP]) close(NS_FD);
    syscall(SYS_close_range, NS_FD + 1U, ~0U, 0U);
    mark(S_FDS);
  } else if (dup2(devnull, 1) < 0) { /* stdout is /dev/null in every variant: the task's definition */
    _exit(122);
  }
  if (step_on[S_CGROUP]) {
    for (int i = 0; i < procs_count; ++i) {
      int fd = open(procs_file[worker][i], O_WRONLY | O_CLOEXEC);
      if (fd < 0 || write(fd, "0", 1) != 1) _exit(123);
      close(fd);
    }
    mark(S_CGROUP);
  }
  if (step_on[S_TMP]) { /* as root, as join_private_tmp */
    if (setns(NS_FD, CLONE_NEWNS) != 0 || chdir("/tmp") != 0) _exit(126);
    close(NS_FD);
    mark(S_TMP);
  }
  if (step_on[S_RLIMITS]) {
    set_limit(RLIMIT_CPU, cpu_seconds, cpu_seconds + 1);
    set_limit(RLIMIT_CORE, 0, 0);
    set_limit(RLIMIT_STACK, stack_bytes, stack_bytes);
    set_limit(RLIMIT_NOFILE, open_files, open_files);
    set_limit(RLIMIT_NPROC, processes, processes);
    /* Twice the memory limit with a memory cgroup, as apply_rlimits sets it. */
    rlim_t as = address_space() + (step_on[S_CGROUP] ? 2 : 1) * memory_bytes;
    set_limit(RLIMIT_AS, as, as);
    /* Exec mode sets the file size last, before execve (below), as pillbox does. */
    if (strcmp(mode, "exec") != 0) set_limit(RLIMIT_FSIZE, file_size_bytes, file_size_bytes);
    mark(S_RLIMITS);
  }
  if (step_on[S_UID]) {
    uid_t id = UID_BASE + (uid_t)worker;
    if (setgroups(0, NULL) != 0 || setresgid(id, id, id) != 0 || setresuid(id, id, id) != 0) _exit(124);
    if (setuid(0) == 0) _exit(124);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(121);
    kill(-1, SIGKILL);
    mark(S_UID);
  }
  if (strcmp(mode, "check") == 0) check_report(worker);
  if (step_on[S_SECCOMP] && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(125);
  mark(S_SECCOMP);
  if (step_on[S_TMP]) empty_private_dirs(); /* as the task's uid */
  mark(S_TMP);
  if (step_on[S_SECCOMP]) {
    if (use_seccomp_load ? seccomp_load(filter_ctx) != 0
                         : syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &filter) != 0) {
      _exit(125);
    }
    mark(S_SECCOMP);
  }
  if (strcmp(mode, "check") == 0) {
    /* The report was written before the filter (the policy may allow none of
     * the calls it needs); now a forbidden call: SIGSYS must end the task. */
    static const char msg[] = "check: calling socket(), which the filter forbids\n";
    if (write(CHECK_FD, msg, sizeof msg - 1) < 0) _exit(126);
    socket(AF_INET, SOCK_STREAM, 0);
    _exit(127); /* reached only without the filter */
  }
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
  if (step_on[S_RLIMITS]) set_limit(RLIMIT_FSIZE, file_size_bytes, file_size_bytes);
  mark(S_RLIMITS);
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
  if (getenv("FLOOR_TIMES") && strcmp(getenv("FLOOR_TIMES"), "1") == 0) {
    step_ns = mmap(NULL, (S_COUNT + 1) * sizeof *step_ns, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (step_ns == MAP_FAILED) return 1;
  }

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

  if (read_policy(argv[5]) != 0) return 2;
  if (step_on[S_UID] && geteuid() != 0) skip(S_UID, "not root: no uid to change to");
  if (tmp_bytes == 0) step_on[S_TMP] = 0; /* the policy has no private /tmp (strict) */
  /* What the task must still see under a private directory: the files
   * (inproc and exec: cat1 opens them by name; pillbox hands the payload over
   * as an fd instead) and the program, as names_under_private_dirs keeps it. */
  const char* keep[2];
  int keep_count = 0;
  if (under_private_dir(dir)) keep[keep_count++] = dir;
  if (strcmp(mode, "exec") == 0 && under_private_dir(cat1)) keep[keep_count++] = cat1;
  if (step_on[S_TMP]) { /* proves it works here, once, before any worker */
    const char* what;
    int ns = make_slot_namespace(keep, keep_count, &what);
    if (ns < 0) {
      char why[300];
      snprintf(why, sizeof why, "no private /tmp here (%s: %s)", what, strerror(errno));
      skip(S_TMP, why);
    }
    close(ns);
  }
  if (step_on[S_CGROUP]) setup_cgroups(procs);
  if (step_on[S_SECCOMP] && build_filter(strcmp(mode, "exec") == 0) != 0) {
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
  int low = open("/dev/null", O_RDWR | O_CLOEXEC);
  int devnull = low < 0 ? -1 : fcntl(low, F_DUPFD_CLOEXEC, NS_FD + 1); /* off CHECK_FD and NS_FD */
  if (devnull < 0) return 1;
  close(low);
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
      const char* what;
      int slot_ns = step_on[S_TMP] ? make_slot_namespace(keep, keep_count, &what) : -1;
      if (step_on[S_TMP] && (slot_ns < 0 || dup2(slot_ns, NS_FD) != NS_FD)) _exit(1);
      if (slot_ns >= 0 && slot_ns != NS_FD) close(slot_ns);
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
  if (step_ns && step_ns[S_COUNT] > 0) {
    fprintf(stderr, "confined_floor: CPU per task in the child's steps (us):");
    for (int s = 0; s < S_COUNT; ++s) {
      if (step_on[s]) fprintf(stderr, " %s %.1f", kStepNames[s], step_ns[s] / 1e3 / (double)step_ns[S_COUNT]);
    }
    fprintf(stderr, "\n");
  }
  return failed;
}
