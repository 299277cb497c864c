#!/usr/bin/env python3
"""bench/compare.py — the measuring half of bench/compare.sh (which builds the
peers, the corpora and the snapshot of the build, then runs this).

usage: compare.py WORK PILLBOX TASKS ROUNDS JOBS FLAT [BASE_PILLBOX]

Every row of the table of issue 15, measured in one run: the variants are
interleaved round by round (the order rotates), each variant's rate is the
median over rounds, and every ratio is taken between runs of the same round
(median over rounds), so noise that slows the whole machine slows both sides.
Then one long run of FLAT tasks (0: skipped) whose resources are sampled as it
goes. With BASE_PILLBOX (another build), its pillbox rows run in the same
rounds and the ratios new/base are printed too. Nothing is written outside WORK.
"""
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import threading
import time

WORK, PB = sys.argv[1], sys.argv[2]
TASKS, ROUNDS, JOBS, FLAT = (int(a) for a in sys.argv[3:7])
BASE_PB = sys.argv[7] if len(sys.argv) > 7 else None
LAST_CPU = [0.0]  # CPU seconds of the last timed command and everything it reaped
CAT1 = os.path.join(WORK, "cat1")
CLEAN, MIXED = os.path.join(WORK, "clean"), os.path.join(WORK, "mixed")
FLOOR = os.path.join(WORK, "confined_floor")
POLICIES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "policies")
# The limits of the peers are those of policies/exec.policy and the command
# line of the exec rows: cpu 5 s, wall 10 s, memory 512M, files 1M, 64 fds.
LIMITS = ["--timeout", "10s", "--cpu", "5s", "--memory", "512M"]
PRLIMIT = ["prlimit", "--cpu=5", "--as=536870912", "--nofile=64", "--fsize=1048576"]
BWRAP = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--dev", "/dev",
         "--proc", "/proc", "--tmpfs", "/tmp", "--ro-bind", WORK, WORK]


def files(corpus):
    return sorted(os.path.join(corpus, f) for f in os.listdir(corpus))


def timed(argv, stdin=None, expect=(0,), env=None):
    """Seconds one command took; stops the benchmark when it failed."""
    log = os.path.join(WORK, "log")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    with open(log, "wb") as err:
        proc = subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=err, env=env)
    seconds = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    LAST_CPU[0] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode not in expect:
        sys.stderr.write("compare: %s exited %d; its stderr:\n" % (" ".join(argv[:6]), proc.returncode))
        sys.stderr.write(open(log, errors="replace").read()[-3000:])
        sys.exit(1)
    return seconds


def xargs(corpus, runner):
    listing = b"\0".join(f.encode() for f in files(corpus)) + b"\0"
    return lambda: timed(["xargs", "-0", "-n1", "-P%d" % JOBS] + runner + [CAT1], stdin=listing)


def pillbox(*args, store=False, expect=(0,), pb=PB):
    def run():
        argv = [pb, "run", "--quiet", "--jobs", str(JOBS)]
        path = os.path.join(WORK, "store-%d" % random.randrange(1 << 30))
        argv += ["--store", path] if store else ["--no-store"]
        try:
            return timed(argv + list(args), expect=expect)
        finally:
            subprocess.run(["rm", "-rf", path])
    return run


# name, how a run is made, what one run does (tasks; for the crash mix the
# attempts are counted separately), what the row stands for
mixed_poison = sum(1 for f in files(MIXED) if open(f, "rb").read(5) == b"CRASH")
ROWS = [
    ("fork ceiling", lambda: timed([os.path.join(WORK, "fork_ceiling"), str(JOBS), str(TASKS)]),
     "fork + _exit + waitpid in a C loop, one per job slot"),
    ("pillbox echo", pillbox("--handler", "echo", CLEAN),
     "run --handler echo --no-store (zygote, in-process handler)"),
    ("pillbox echo + store", pillbox("--handler", "echo", CLEAN, store=True),
     "the same with a fresh store (ledger, results kept)"),
    ("pillbox exec", pillbox(*LIMITS, CLEAN, "--", CAT1, "{}"),
     "run --no-store -- cat1 {} (zygote, execve per task)"),
    ("pillbox exec, 10% crash", pillbox("--backoff-base", "1ms", *LIMITS, MIXED, "--", CAT1, "{}", expect=(1,)),
     "the same over a corpus with 10% inputs that crash cat1"),
    ("xargs timeout prlimit", xargs(CLEAN, ["timeout", "10"] + PRLIMIT),
     "xargs -P -n1 timeout 10 prlimit ... cat1 (no isolation)"),
    ("xargs bwrap", xargs(CLEAN, BWRAP),
     "xargs -P -n1 bwrap --unshare-all ... cat1 (namespaces only)"),
    ("confined floor, in-process", lambda: timed([FLOOR, "inproc", str(JOBS), CLEAN, CAT1,
                                                             os.path.join(POLICIES, "strict.policy")]),
     "confined_floor.c: echo's (strict) child steps in C, read+write"),
    ("confined floor, exec", lambda: timed([FLOOR, "exec", str(JOBS), CLEAN, CAT1,
                                                       os.path.join(POLICIES, "exec.policy")]),
     "confined_floor.c: the exec policy's steps in C, execve cat1"),
]
BWRAP_SKIP = os.environ.get("BWRAP_SKIP", "")
if BWRAP_SKIP:
    ROWS = [row for row in ROWS if row[0] != "xargs bwrap"]
# bench/peers/confined_floor.c: lower bounds of pillbox's rows (its header says what they leave out).
CONFINED_SKIP = os.environ.get("CONFINED_SKIP", "")
CONFINED_NOTES = os.environ.get("CONFINED_NOTES", "")
if CONFINED_SKIP:
    ROWS = [row for row in ROWS if not row[0].startswith("confined floor")]
if BASE_PB:
    ROWS += [
        ("base: pillbox echo", pillbox("--handler", "echo", CLEAN, pb=BASE_PB), "pillbox echo of the base build"),
        ("base: pillbox echo + store", pillbox("--handler", "echo", CLEAN, store=True, pb=BASE_PB),
         "pillbox echo + store of the base build"),
        ("base: pillbox exec", pillbox(*LIMITS, CLEAN, "--", CAT1, "{}", pb=BASE_PB), "pillbox exec of the base build"),
    ]


def load():
    return open("/proc/loadavg").read().split()[0]


def main():
    if ROUNDS == 0:  # only the resource run
        print("compare: the resource run only, %d jobs, %d cores, load %s" % (JOBS, os.cpu_count(), load()))
        return flat()
    print("compare: %d tasks, %d rounds, %d jobs, %d cores, load %s" % (TASKS, ROUNDS, JOBS, os.cpu_count(), load()))
    for _, run, _ in ROWS:  # warm up caches and page tables; not counted
        run()
    seconds = {name: [] for name, _, _ in ROWS}
    cpu = {name: [] for name, _, _ in ROWS}
    loads = []
    for r in range(ROUNDS):
        order = ROWS[r % len(ROWS):] + ROWS[:r % len(ROWS)]
        for name, run, _ in order:
            seconds[name].append(run())
            cpu[name].append(LAST_CPU[0])
        loads.append(load())
    rate = {name: statistics.median(TASKS / s for s in ts) for name, ts in seconds.items()}
    cpu_ms = {name: 1000 * statistics.median(cs) / TASKS for name, cs in cpu.items()}

    def ratio(a, b, fa=1.0, fb=1.0):
        """Median over rounds of (a's rate x fa) / (b's rate x fb), a and b of the same round."""
        return statistics.median((fa / sa) / (fb / sb) for sa, sb in zip(seconds[a], seconds[b]))

    def cpu_ratio(a, b, fa=1.0, fb=1.0):
        """ratio() with CPU seconds for wall seconds: what the rates would be if CPU were all a task cost.
        Steadier on a shared host, where others' load moves wall time far more than CPU time, and where
        a runner that setsid()s its tasks (pillbox, the floor) gets a scheduling group per task
        (sched_autogroup) and so a larger share of a busy host than xargs does."""
        return statistics.median((fa / ca) / (fb / cb) for ca, cb in zip(cpu[a], cpu[b]))

    attempts = (TASKS + mixed_poison) / TASKS  # ok runs plus the two attempts of each poison
    print()
    print("%-26s %10s %14s %12s  %s" % ("what", "tasks/s", "relative", "CPU ms/task", "how"))
    for name, _, how in ROWS:
        if name.startswith("base: "):
            rel = "%.2fx new" % ratio(name, name[len("base: "):])
        elif name == "fork ceiling":
            rel = "ceiling"
        elif name.startswith("xargs"):
            rel = "peer"
        elif name == "pillbox exec, 10% crash":
            rel = "%.2fx clean" % ratio(name, "pillbox exec")
        elif name.startswith("pillbox exec") or name == "confined floor, exec":
            rel = "%.2fx xargs" % ratio(name, "xargs timeout prlimit")
        else:
            rel = "%.0f%% ceiling" % (100 * ratio(name, "fork ceiling"))
        print("%-26s %10.0f %14s %12.3f  %s" % (name, rate[name], rel, cpu_ms[name], how))
    if BWRAP_SKIP:
        print("%-26s skipped: %s" % ("xargs bwrap", BWRAP_SKIP))
    if CONFINED_SKIP:
        print("%-26s skipped: %s" % ("confined floor rows", CONFINED_SKIP))
    for note in CONFINED_NOTES.splitlines():
        print("%-26s %s" % ("confined floor:", note))
    print("(per round, seconds: %s)" % "; ".join(
        "%s %s" % (n, " ".join("%.2f" % s for s in seconds[n])) for n, _, _ in ROWS))
    print("(load average after each round: %s)" % " ".join(loads))

    # (name, wall-time value, CPU-time value, target, test)
    goals = [
        ("1. zygote echo / fork ceiling", ratio("pillbox echo", "fork ceiling"),
         cpu_ratio("pillbox echo", "fork ceiling"), ">= 0.50", lambda v: v >= 0.5),
        ("2. exec / xargs timeout prlimit", ratio("pillbox exec", "xargs timeout prlimit"),
         cpu_ratio("pillbox exec", "xargs timeout prlimit"), ">= 2.00", lambda v: v >= 2),
        ("3. ledger cost (1 - store/no-store)", 1 - ratio("pillbox echo + store", "pillbox echo"),
         1 - cpu_ratio("pillbox echo + store", "pillbox echo"), "< 0.10", lambda v: v < 0.1),
        ("4. attempts/s with 10% poison / clean", ratio("pillbox exec, 10% crash", "pillbox exec", fa=attempts),
         cpu_ratio("pillbox exec, 10% crash", "pillbox exec", fa=attempts), ">= 0.90", lambda v: v >= 0.9),
        ("   good tasks/s with poison / clean", ratio("pillbox exec, 10% crash", "pillbox exec"),
         cpu_ratio("pillbox exec, 10% crash", "pillbox exec"), "(info; %.2f if" % (1 / attempts) +
         " attempts cost the same)", None),
    ]
    if not CONFINED_SKIP:
        # The most each goal could reach with a supervisor, zygote and wire
        # that cost nothing: the confined floor in the goal's ratio. A lower
        # bound: it leaves out parts pillbox needs (confined_floor.c's header).
        goals += [
            ("1 floor: confined in-process / fork ceiling", ratio("confined floor, in-process", "fork ceiling"),
             cpu_ratio("confined floor, in-process", "fork ceiling"), ">= 0.50", lambda v: v >= 0.5),
            ("2 floor: confined exec / xargs prlimit", ratio("confined floor, exec", "xargs timeout prlimit"),
             cpu_ratio("confined floor, exec", "xargs timeout prlimit"), ">= 2.00", lambda v: v >= 2),
        ]
    print()
    print("%-44s %8s %8s %10s" % ("goal", "wall", "by CPU", "target"))
    for name, value, by_cpu, target, met in goals:
        verdict = "" if met is None else "met" if met(value) else "NOT met"
        if name[1:].startswith(" floor"):
            verdict = "" if met is None else ("not ruled out by the floor" if met(value)
                                              else "out of reach even at the floor")
        print("%-44s %8.2f %8.2f %10s  %s" % (name, value, by_cpu, target, verdict))
    if BASE_PB:
        print()
        print("new build against the base build, same rounds (throughput ratio new/base; CPU per task base -> new)")
        for name in ("pillbox echo", "pillbox echo + store", "pillbox exec"):
            print("  %-22s %6.2fx   %.3f -> %.3f ms" % (name, ratio(name, "base: " + name), cpu_ms["base: " + name],
                                                     cpu_ms[name]))
    if FLAT:
        flat()
    print("raw: " + json.dumps({"tasks": TASKS, "jobs": JOBS, "seconds": seconds, "cpu_seconds": cpu, "loads": loads}))


def sandbox_processes(supervisor):
    """The long-lived processes under the supervisor, by role: the zygote
    (pillbox-sandbox, its child), the zygote inside the pid namespace (the
    zygote's pillbox-sandbox child, when there is one) and the fork server
    (pillbox-forksrv). Tasks are the zygote's other children and are not
    sampled."""
    procs = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                stat = open("/proc/%s/stat" % p).read()
                comm = stat[stat.index("(") + 1:stat.rindex(")")]
                procs[int(p)] = (comm, int(stat.rsplit(")", 1)[1].split()[1]))
            except (OSError, IndexError, ValueError):
                pass
    roles = {}
    for pid, (comm, ppid) in procs.items():
        if comm == "pillbox-sandbox" and ppid == supervisor:
            roles["zygote"] = pid
    for pid, (comm, ppid) in procs.items():
        if comm == "pillbox-sandbox" and ppid == roles.get("zygote") and procs.get(pid) and \
                any(c == "pillbox-forksrv" and pp == pid for c, pp in procs.values()):
            roles["zygote_ns"] = pid
        if comm == "pillbox-forksrv":
            roles["forksrv"] = pid
    return roles


def rss_kb(pid):
    for line in open("/proc/%d/status" % pid):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def flat():
    """FLAT echo tasks from JSON lines on stdin, with a store: the supervisor's
    RSS and open fds, the zygote's and the fork server's RSS, sampled at every
    tenth of the run (counted from the --json lines the run prints)."""
    store = os.path.join(WORK, "flat-store")
    proc = subprocess.Popen([PB, "run", "--json", "--jobs", str(JOBS), "--store", store, "--handler", "echo", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(os.path.join(WORK, "flat.log"), "wb"))

    def feed():
        for i in range(FLAT):
            proc.stdin.write(b'{"key": "k%07d", "payload": "payload %d %s"}\n' % (i, i, b"x" * (40 + i % 160)))
        proc.stdin.close()
    threading.Thread(target=feed, daemon=True).start()
    samples, done, t0 = [], 0, time.monotonic()
    step = max(FLAT // 10, 1)
    for line in proc.stdout:
        done += 1
        if done % step == 0 or done == 1000:
            row = {"done": done, "seconds": time.monotonic() - t0, "supervisor_rss_kb": rss_kb(proc.pid),
                   "supervisor_fds": len(os.listdir("/proc/%d/fd" % proc.pid))}
            for role, pid in sandbox_processes(proc.pid).items():
                try:
                    kb = rss_kb(pid)
                except OSError:
                    continue
                if kb:  # 0: a process already exiting (a zombie has no memory to report)
                    row[role + "_rss_kb"] = kb
            samples.append(row)
    rc = proc.wait()
    db = sum(os.path.getsize(os.path.join(store, f)) for f in os.listdir(store) if f.startswith("pillbox.db"))
    print()
    print("flat: %d echo tasks with a store, exit %d, %.0f tasks/s" % (FLAT, rc, done / (time.monotonic() - t0)))
    keys = ["supervisor_rss_kb", "supervisor_fds", "zygote_rss_kb", "zygote_ns_rss_kb", "forksrv_rss_kb"]
    print("%10s %9s %18s %15s %14s %17s %15s" % ("tasks", "seconds", "supervisor RSS kB", "supervisor fds",
                                                "zygote RSS kB", "zygote-ns RSS kB", "forksrv RSS kB"))
    for s in samples:
        print("%10d %9.1f %18s %15s %14s %17s %15s" % (s["done"], s["seconds"], *(s.get(k, "-") for k in keys)))
    first, last = samples[1] if len(samples) > 1 else samples[0], samples[-1]
    for k in keys:
        if k in first and k in last:
            print("  %-18s %8s -> %8s between %d and %d tasks" % (k, first[k], last[k], first["done"], last["done"]))
    print("  store: %d bytes, %.0f bytes per task" % (db, db / max(done, 1)))


main()
