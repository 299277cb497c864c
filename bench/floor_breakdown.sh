#!/usr/bin/env bash
# bench/floor_breakdown.sh — what each required step of a confined child costs, one step left out at a time.
#
# usage: bench/floor_breakdown.sh [TASKS]   (default 3000)
#   env: ROUNDS (default 5), JOBS (default: nproc), KEEP=1 keeps the temp dir
#
# Runs bench/peers/confined_floor.c (the floor of compare.sh's "confined floor"
# rows) in both modes over TASKS small files: with every step, without each
# step in turn (FLOOR_SKIP), with none, and with the filter loaded by
# seccomp_load() in each child (FLOOR_SECCOMP=libseccomp); the fork ceiling
# as the reference. All variants interleave round by round (the order
# rotates). inproc runs with policies/strict.policy (echo's), exec with
# policies/exec.policy. Per variant: tasks/s and CPU ms per task (the run and all it
# reaped), median and lowest over rounds; per step: what leaving it out
# saves, CPU µs per task, as the difference of the medians and of the lowest
# rounds (the lowest round is the least disturbed by others on a shared host).
# Then each step's own CPU in the child (FLOOR_TIMES=1), ROUNDS runs per mode.
# Needs root for the uid and cgroup steps (skipped otherwise, saying why).
set -euo pipefail

BENCH=floor_breakdown
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_help "$@"

ROUNDS=${ROUNDS:-5}
JOBS=${JOBS:-$(nproc)}
TASKS=${1:-3000}
bench_positive_ints TASKS JOBS ROUNDS
bench_need cc python3
echo '#include <seccomp.h>' | cc -E - >/dev/null 2>&1 || bench_die "needs libseccomp's headers (Debian: apt-get install libseccomp-dev)"
unset FLOOR_SKIP FLOOR_SECCOMP
bench_workdir clean
cc -O2 -o "$WORK/fork_ceiling" "$REPO_ROOT/bench/peers/fork_ceiling.c"
cc -O2 -o "$WORK/cat1" "$REPO_ROOT/bench/peers/cat1.c"
cc -O2 -Wall -Wextra -o "$WORK/confined_floor" "$REPO_ROOT/bench/peers/confined_floor.c" -lseccomp
bench_text_corpus "$WORK/clean" "$TASKS"
chmod -R a+rX "$WORK"
"$WORK/confined_floor" probe "$JOBS" "$WORK/clean" "$WORK/cat1" "$REPO_ROOT/policies/exec.policy"
"$WORK/confined_floor" probe "$JOBS" "$WORK/clean" "$WORK/cat1" "$REPO_ROOT/policies/strict.policy"

python3 - "$WORK" "$REPO_ROOT/policies" "$TASKS" "$ROUNDS" "$JOBS" <<'PY'
import os, resource, statistics, subprocess, sys, time

work, policies = sys.argv[1], sys.argv[2]
tasks, rounds, jobs = (int(a) for a in sys.argv[3:6])
floor = os.path.join(work, "confined_floor")
steps = ["session", "fds", "cgroup", "tmp", "rlimits", "uid", "seccomp"]
policy = {"inproc": "strict.policy", "exec": "exec.policy"}  # echo's policy, and exec's


def run(argv, env):
    """Seconds and CPU seconds (all it reaped) of one run; stops at a failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    seconds = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit("floor_breakdown: %s failed: %s" % (" ".join(argv), proc.stderr.decode(errors="replace")[-2000:]))
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


variants = [("fork ceiling", None, [os.path.join(work, "fork_ceiling"), str(jobs), str(tasks)], {})]
for mode in ("inproc", "exec"):
    argv = [floor, mode, str(jobs), os.path.join(work, "clean"), os.path.join(work, "cat1"),
            os.path.join(policies, policy[mode])]
    variants.append(((mode, "all steps"), mode, argv, {}))
    for s in steps:
        if s == "tmp" and mode == "inproc":
            continue  # strict has no private /tmp
        variants.append(((mode, "without " + s), mode, argv, {"FLOOR_SKIP": s}))
    variants.append(((mode, "no step"), mode, argv, {"FLOOR_SKIP": ",".join(steps)}))
    variants.append(((mode, "seccomp_load() per child"), mode, argv, {"FLOOR_SECCOMP": "libseccomp"}))

seconds = {v[0]: [] for v in variants}
cpu = {v[0]: [] for v in variants}
for _, _, argv, extra in variants:  # warm-up, not counted
    run(argv, dict(os.environ, **extra))
for r in range(rounds):
    for name, _, argv, extra in variants[r % len(variants):] + variants[:r % len(variants)]:
        s, c = run(argv, dict(os.environ, **extra))
        seconds[name].append(s)
        cpu[name].append(c)

print("floor_breakdown: %d tasks, %d rounds, %d jobs, %d cores, load %s" %
      (tasks, rounds, jobs, os.cpu_count(), open("/proc/loadavg").read().split()[0]))
c = cpu["fork ceiling"]
print("fork ceiling: %.0f tasks/s, %.3f ms CPU/task" %
      (statistics.median(tasks / s for s in seconds["fork ceiling"]), 1000 * statistics.median(c) / tasks))
print("(per task: CPU median over rounds, and the lowest round: on a shared host the other")
print(" processes inflate some rounds; a step's cost: the variant without it against all steps,")
print(" as the difference of the medians and of the lowest rounds; the two agree when the noise is low)")
for mode in ("inproc", "exec"):
    print()
    print("%s mode, policies/%s" % (mode, policy[mode]))
    print("  %-26s %9s %12s %12s %22s" % ("variant", "tasks/s", "CPU us, med", "CPU us, low", "step: us med / low"))
    med = lambda name: 1e6 * statistics.median(cpu[name]) / tasks
    low = lambda name: 1e6 * min(cpu[name]) / tasks
    full = (mode, "all steps")
    for name, m, _, _ in variants:
        if m != mode:
            continue
        rate = statistics.median(tasks / s for s in seconds[name])
        if name[1].startswith("without ") or name[1] == "no step":
            step = "%.0f / %.0f" % (med(full) - med(name), low(full) - low(name))
        elif name[1].startswith("seccomp_load"):
            step = "%+.0f / %+.0f" % (med(name) - med(full), low(name) - low(full))
        else:
            step = ""
        print("  %-26s %9.0f %12.0f %12.0f %22s" % (name[1], rate, med(name), low(name), step))

# The steps' own CPU in the child (FLOOR_TIMES=1), which others' load does
# not inflate; without what a step costs at exit (see confined_floor.c).
print()
print("CPU per task in the child's steps, us (FLOOR_TIMES=1, all steps, median of %d runs):" % rounds)
for mode in ("inproc", "exec"):
    argv = [floor, mode, str(jobs), os.path.join(work, "clean"), os.path.join(work, "cat1"),
            os.path.join(policies, policy[mode])]
    runs = []
    for _ in range(rounds):
        proc = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ, FLOOR_TIMES="1"))
        line = [l for l in proc.stderr.decode().splitlines() if "steps (us):" in l]
        if proc.returncode != 0 or not line:
            sys.exit("floor_breakdown: FLOOR_TIMES run failed: " + proc.stderr.decode(errors="replace")[-2000:])
        words = line[0].split("(us):")[1].split()
        runs.append({words[i]: float(words[i + 1]) for i in range(0, len(words), 2)})
    names = list(runs[0])
    med = {n: statistics.median(r[n] for r in runs) for n in names}
    print("  %-7s %s   total %.0f" % (mode, "  ".join("%s %.0f" % (n, med[n]) for n in names), sum(med.values())))
PY
