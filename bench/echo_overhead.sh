#!/usr/bin/env bash
# bench/echo_overhead.sh — per-task overhead of pillbox against a shell peer.
#
# usage: bench/echo_overhead.sh [BUILD_DIR] [TASKS]      (defaults: build, 2000)
#   env: ROUNDS (default 3), JOBS (default: nproc), KEEP=1 keeps the temp dir
#
# Every task is an "echo": the payload (a small file) goes in, the same bytes
# come out. The work is nil, so what is measured is the cost of running one
# task in its own confined process. Variants, run interleaved in each round so
# that they share the same machine noise (the order rotates every round):
#
#   zygote (echo)   pillbox run --handler echo --jobs N --quiet DIR
#   zygote (exec)   pillbox run --jobs N --quiet DIR -- echo_stdin
#                   (zygote fork + execve of a tiny C program per task: the fair
#                   comparison with the peer, which also execs a program)
#   spawn  (echo)   pillbox run --mode spawn --handler echo --jobs N --quiet DIR
#   xargs peer      find DIR | xargs -P N, per file:
#                     timeout 10 prlimit --cpu=5 --as=512M --nofile=64 --fsize=1M \
#                       echo_stdin < file > /dev/null
#
# Throughput: wall time of the whole run -> tasks/s; median over rounds; each
# pillbox variant as a ratio to the peer measured in the same run.
# Per-task overhead: pillbox --json records (wall_ms: launch to reap, as the
# supervisor sees it) and, for the peer, a tiny C timer (launch_one -t) that
# forks the same command line and prints the elapsed microseconds.
# Nothing is written into the repository; results are printed only.
set -euo pipefail

BENCH=echo_overhead
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_help "$@"

BUILD_DIR=${1:-build}
TASKS=${2:-2000}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-$(nproc)}

bench_build_dir "$BUILD_DIR" pillbox pillbox-sandbox
bench_positive_ints TASKS ROUNDS JOBS
bench_need cc python3 xargs timeout prlimit find
bench_workdir corpus lat log
# --- binaries --------------------------------------------------------------
bench_snapshot_build

# The peer's program, also the program pillbox execs in exec mode.
bench_echo_stdin

# launch_one CMD ARGS... FILE     : stdin from FILE, stdout to /dev/null, then exec CMD.
# launch_one -t CMD ARGS... FILE  : same in a forked child; prints the elapsed
#                                   microseconds (fork to reap) as one line.
# This stands in for the shell redirection `CMD < FILE > /dev/null` without
# paying a shell per task (xargs cannot redirect by itself).
cat >"$WORK/launch_one.c" <<'EOF'
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void redirect_and_exec(char** cmd, const char* file) {
  int in = open(file, O_RDONLY | O_CLOEXEC);
  int out = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0) _exit(126);
  execvp(cmd[0], cmd);
  _exit(127);
}

int main(int argc, char** argv) {
  int timed = argc > 1 && strcmp(argv[1], "-t") == 0;
  char** cmd = argv + 1 + timed;
  int ncmd = argc - 1 - timed - 1;
  if (ncmd < 1) { fputs("usage: launch_one [-t] CMD ARGS... FILE\n", stderr); return 2; }
  const char* file = cmd[ncmd];
  cmd[ncmd] = NULL;
  if (!timed) redirect_and_exec(cmd, file);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) redirect_and_exec(cmd, file);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {}
  clock_gettime(CLOCK_MONOTONIC, &t1);
  long long us = (t1.tv_sec - t0.tv_sec) * 1000000LL + (t1.tv_nsec - t0.tv_nsec) / 1000;
  char line[32];
  int n = snprintf(line, sizeof line, "%lld\n", us);
  if (write(1, line, (size_t)n) != n) return 1;  /* one write: atomic under O_APPEND */
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
EOF
cc -O2 -o "$WORK/launch_one" "$WORK/launch_one.c"
chmod 0755 "$WORK/launch_one"

# --- corpus ----------------------------------------------------------------
# TASKS small text files, 60-250 bytes, deterministic.
make_corpus() {  # DIR COUNT
  awk -v dir="$1" -v n="$2" 'BEGIN {
    text = "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs; "
    for (i = 0; i < n; i++) {
      f = sprintf("%s/task-%06d.txt", dir, i)
      printf "task %06d: %s\n", i, substr(text text, 1 + i % 40, 40 + (i * 37) % 160) > f
      close(f)
    }
  }'
}
make_corpus "$WORK/corpus" "$TASKS"
mkdir -p "$WORK/warm" && make_corpus "$WORK/warm" $((JOBS * 20))

# --- peer limits: the same numbers as policies/strict.policy ---------------
#   cpu = 5s, wall = 10s, memory = 512M, file_size = 1M, open_files = 64
PEER_LIMITS=(timeout 10 prlimit --cpu=5 --as=$((512 * 1024 * 1024)) --nofile=64 --fsize=$((1024 * 1024)))

# --- variants --------------------------------------------------------------
VARIANTS=(zygote_echo zygote_exec spawn_echo xargs_peer)

# A pillbox variant with an output flag (--quiet for throughput, --json for records).
# --no-store: what is measured is the isolation, like the peer's, which keeps
# no ledger (ledger_overhead.sh measures that). With a store, every run after
# the first would skip the corpus as "already ok", and the user's default
# store would fill with benchmark tasks.
pillbox_run() {  # VARIANT FLAG DIR
  case "$1" in
    zygote_echo) "$PB" run --no-store --handler echo --jobs "$JOBS" "$2" "$3" ;;
    # Exec mode defaults to policies/exec.policy; --timeout/--cpu/--memory give it
    # the peer's limits (wall 10s, cpu 5s, memory 512M).
    zygote_exec) "$PB" run --no-store --jobs "$JOBS" "$2" --timeout 10s --cpu 5s --memory 512M "$3" -- "$WORK/echo_stdin" ;;
    spawn_echo)  "$PB" run --no-store --mode spawn --handler echo --jobs "$JOBS" "$2" "$3" ;;
  esac
}

peer_run() {  # DIR [-t]
  find "$1" -type f -print0 | xargs -0 -n1 -P"$JOBS" "$WORK/launch_one" ${2:+"$2"} "${PEER_LIMITS[@]}" "$WORK/echo_stdin"
}

run_variant() {  # VARIANT DIR
  if [[ $1 == xargs_peer ]]; then peer_run "$2"; else pillbox_run "$1" --quiet "$2"; fi
}

# Latency runs (after the throughput runs of the round): one number per task.
run_latency() {  # VARIANT ROUND
  case "$1" in
    xargs_peer) peer_run "$WORK/corpus" -t >>"$WORK/lat/xargs_peer.$2.txt" ;;
    *)          pillbox_run "$1" --json "$WORK/corpus" >"$WORK/lat/$1.$2.jsonl" ;;
  esac
}

# In a measured run, "some tasks failed" (pillbox exit 1, xargs exit 123) is a
# result, not a broken benchmark: keep the time, count the run as "had failed
# tasks" in the report. Anything else (usage, setup error) stops the benchmark.
check_rc() {  # VARIANT RC WHAT LOG
  case "$2" in
    0) return 0 ;;
    1|123) echo "  WARNING: $3: some tasks did not end ok (exit $2)" >&2
           printf '%s\t%s\n' "$1" "$3" >>"$WORK/failed_runs.tsv" ;;
    *) bench_fail_run "$3" "$2" "$4" ;;
  esac
}

# Sanity: every variant gives back exactly the payload.
sample="$WORK/corpus/task-000007.txt"
mkdir -p "$WORK/check" && cp "$sample" "$WORK/check/"
peer_run "$WORK/check" || { echo "echo_overhead: the peer command does not run" >&2; exit 1; }
[[ "$("$WORK/echo_stdin" <"$sample")" == "$(cat "$sample")" ]] || { echo "echo_overhead: echo_stdin is broken" >&2; exit 1; }
for v in zygote_echo zygote_exec spawn_echo; do
  rc=0; out=$(pillbox_run "$v" --json "$WORK/check" 2>"$WORK/log/check.$v") || rc=$?
  [[ $rc == 0 ]] || bench_fail_run "sanity check ($v)" "$rc" "$WORK/log/check.$v"
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r["kind"]=="ok" and r["output"]==open(sys.argv[2]).read() else 1)' \
    "$out" "$sample" || { echo "echo_overhead: $v did not echo the payload: $out" >&2; exit 1; }
done

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "pillbox echo benchmark: $TASKS tasks, $JOBS jobs, $ROUNDS rounds; load average before: $load_before (cores: $(nproc))" >&2

# Warm-up: page cache, binaries, dynamic loader caches.
for v in "${VARIANTS[@]}"; do
  rc=0; run_variant "$v" "$WORK/warm" >/dev/null 2>"$WORK/log/warm.$v" || rc=$?
  [[ $rc == 0 ]] || bench_fail_run "warm-up ($v)" "$rc" "$WORK/log/warm.$v"
done

: >"$WORK/times.tsv"; : >"$WORK/failed_runs.tsv"; : >"$WORK/loads.tsv"
now_ns() { date +%s%N; }
for ((r = 1; r <= ROUNDS; r++)); do
  n=${#VARIANTS[@]}
  for ((k = 0; k < n; k++)); do  # rotate the order each round
    v=${VARIANTS[$(((k + r - 1) % n))]}
    rc=0; t0=$(now_ns)
    run_variant "$v" "$WORK/corpus" >/dev/null 2>"$WORK/log/$v.$r" || rc=$?
    t1=$(now_ns)
    check_rc "$v" "$rc" "$v (round $r)" "$WORK/log/$v.$r"
    printf '%s\t%d\t%d\n' "$v" "$r" $((t1 - t0)) >>"$WORK/times.tsv"
    printf '  round %d  %-12s %7.2f s\n' "$r" "$v" "$(awk -v ns=$((t1 - t0)) 'BEGIN{print ns/1e9}')" >&2
  done
  for ((k = 0; k < n; k++)); do
    v=${VARIANTS[$(((k + r - 1) % n))]}
    rc=0; run_latency "$v" "$r" 2>"$WORK/log/lat.$v.$r" || rc=$?
    check_rc "$v" "$rc" "$v latency run (round $r)" "$WORK/log/lat.$v.$r"
  done
  load=$(cut -d' ' -f1 /proc/loadavg)
  printf '%d\t%s\n' "$r" "$load" >>"$WORK/loads.tsv"
  echo "  round $r done; load average: $load" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report ----------------------------------------------------------------
python3 - "$WORK" "$TASKS" "$JOBS" "$ROUNDS" "$load_before" "$load_after" "$(nproc)" <<'EOF'
import glob, json, math, statistics, sys

work, tasks, jobs, rounds, load_before, load_after, cores = sys.argv[1:8]
tasks, jobs, rounds, cores = int(tasks), int(jobs), int(rounds), int(cores)

names = {
    "zygote_echo": "pillbox zygote (echo)",
    "zygote_exec": "pillbox zygote (exec)",
    "spawn_echo":  "pillbox spawn  (echo)",
    "xargs_peer":  "xargs+timeout+prlimit",
}
secs = {v: {} for v in names}
for line in open(f"{work}/times.tsv"):
    v, r, ns = line.split("\t")
    secs[v][int(r)] = int(ns) / 1e9
rate = {v: [tasks / secs[v][r] for r in sorted(secs[v])] for v in names}
med = {v: statistics.median(rate[v]) for v in names}

# Ratio per round (same noise), then the median of those ratios.
def ratios(v):
    return [secs["xargs_peer"][r] / secs[v][r] for r in sorted(secs[v])]

def pct(xs, q):  # nearest rank
    xs = sorted(xs)
    return xs[max(0, math.ceil(q * len(xs)) - 1)]

lat = {}
kinds = {}
for v in names:
    if v == "xargs_peer":
        continue
    xs = []
    kinds[v] = {}
    for f in sorted(glob.glob(f"{work}/lat/{v}.*.jsonl")):
        for line in open(f):
            rec = json.loads(line)
            kinds[v][rec["kind"]] = kinds[v].get(rec["kind"], 0) + 1
            xs.append(float(rec["wall_ms"]))
    lat[v] = xs
failed_runs = [l.rstrip("\n").split("\t") for l in open(f"{work}/failed_runs.tsv") if l.strip()]
peer = []
for f in sorted(glob.glob(f"{work}/lat/xargs_peer.*.txt")):
    peer += [int(x) / 1000.0 for x in open(f) if x.strip()]
lat["xargs_peer"] = peer

print(f"\npillbox echo benchmark — {tasks} tasks, {jobs} jobs, {rounds} rounds (median)")
print(f"{'variant':<24}{'tasks/s':>10}{'vs xargs peer':>16}{'p50 ms':>9}{'p99 ms':>9}")
for v, label in names.items():
    ratio = statistics.median(ratios(v))
    p50 = f"{pct(lat[v], .50):.2f}" if v in lat else "-"
    p99 = f"{pct(lat[v], .99):.2f}" if v in lat else "-"
    print(f"{label:<24}{med[v]:>10.0f}{ratio:>15.2f}x{p50:>9}{p99:>9}")

print("\nper round (tasks/s; ratio to the peer in the same round):")
for v, label in names.items():
    cells = "  ".join(f"{x:7.0f} ({y:.2f}x)" for x, y in zip(rate[v], ratios(v)))
    spread = (max(rate[v]) - min(rate[v])) / med[v] * 100
    print(f"  {label:<24}{cells}   spread {spread:.0f}% of median")

loads = [l.split("\t")[1].strip() for l in open(f"{work}/loads.tsv") if l.strip()]
print(f"  {'load average (1 min) at the end of each round:':<24}  " + "  ".join(loads))

print("\nper-task overhead, all rounds pooled:")
for v in lat:
    xs = lat[v]
    print(f"  {names[v]:<24}n={len(xs):<6} min {min(xs):.2f}  p50 {pct(xs,.5):.2f}  p90 {pct(xs,.9):.2f}"
          f"  p99 {pct(xs,.99):.2f}  max {max(xs):.2f} ms")
for v, k in kinds.items():
    if set(k) != {"ok"}:
        print(f"  WARNING: {names[v]}: not every task ended ok in the --json runs: {k}")
print("  pillbox wall_ms: launch to reap, whole milliseconds (truncated: the true value is up to 1 ms more)")
print("  peer: fork of the timer to reap, microseconds: timeout + prlimit + echo_stdin (3 execs)")

if failed_runs:
    print("\nruns in which some tasks did not end ok (their times are still counted):")
    for v, what in failed_runs:
        print(f"  {what}")

aim = 5.0
got = statistics.median(ratios("zygote_echo"))
print(f"\naim: pillbox zygote (echo) >= {aim:.0f}x the peer's tasks/s — measured {got:.2f}x: "
      + ("met" if got >= aim else "NOT met"))
print(f"load average before: {load_before}; after: {load_after}; cores: {cores}"
      + ("  (machine busy: load above core count)" if max(float(load_before.split()[0]), float(load_after.split()[0])) > cores else ""))

raw = {"tasks": tasks, "jobs": jobs, "rounds": rounds, "cores": cores,
       "load_before": load_before, "load_after": load_after, "load_per_round": loads,
       "seconds": {v: [secs[v][r] for r in sorted(secs[v])] for v in names},
       "tasks_per_s_median": {v: round(med[v], 1) for v in names},
       "ratio_to_peer_median": {v: round(statistics.median(ratios(v)), 3) for v in names},
       "kinds": kinds, "failed_runs": [w for _, w in failed_runs],
       "latency_ms": {v: {"n": len(xs), "p50": pct(xs, .5), "p99": pct(xs, .99)} for v, xs in lat.items()}}
print("\nraw: " + json.dumps(raw, sort_keys=True))
EOF
