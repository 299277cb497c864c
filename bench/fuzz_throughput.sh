#!/usr/bin/env bash
# bench/fuzz_throughput.sh — executions per second of `pillbox fuzz` against `pillbox run`.
#
# usage: bench/fuzz_throughput.sh [BUILD_DIR] [SECONDS]   (defaults: build, 10: fuzz time per round)
#   env: ROUNDS (default 3), JOBS (default 2), TASKS (default 2000), SIZE (default 64), KEEP=1 keeps the temp dir
#
# Both sides run the echo handler on SIZE-byte inputs, JOBS at a time, so the
# handler costs almost nothing and what shows is the cost per execution: one
# confined child each, plus, for fuzz, mutating, hashing and judging every
# candidate; for run, reading the inputs and writing the results. Two
# variants, interleaved in each round, the order alternating from round to round:
#
#   fuzz   pillbox fuzz SEED --handler echo --jobs N --max-time SECONDS --max-len SIZE
#                 --seed 1 --json --store FRESH
#          (SEED: one SIZE-byte file; FRESH: a new store every round; --max-len
#          keeps every candidate at SIZE bytes or less, like the run's inputs)
#          -> executions/s: "runs_per_second" of the final {"type":"summary"} line
#             (runs over the session's own elapsed time, zygote start included)
#   run    pillbox run --handler echo --jobs N --no-store --quiet DIR
#          (DIR: TASKS distinct SIZE-byte files)
#          -> tasks/s: TASKS / wall time of the whole process
#
# The ratio fuzz/run is taken per round (two runs seconds apart, same noise),
# then its median. CPU per execution (the pillbox process and every
# descendant it reaped, from getrusage(RUSAGE_CHILDREN)) is printed too: it
# moves less with other load than wall time does.
# Nothing is written into the repository; results are printed only.
set -euo pipefail

BENCH=fuzz_throughput
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_help "$@"

BUILD_DIR=${1:-build}
FUZZ_SECONDS=${2:-10}
ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-2}
TASKS=${TASKS:-2000}
SIZE=${SIZE:-64}

bench_build_dir "$BUILD_DIR" pillbox pillbox-sandbox
bench_positive_ints FUZZ_SECONDS ROUNDS JOBS TASKS SIZE
(( SIZE >= 16 )) || bench_die "SIZE must be at least 16 (the inputs carry a distinct number)"
bench_need python3 awk
bench_workdir corpus seed log stores
bench_snapshot_build

# COUNT distinct text files of exactly SIZE bytes each, deterministic.
make_corpus() {  # DIR COUNT
  awk -v dir="$1" -v n="$2" -v size="$SIZE" 'BEGIN {
    text = "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs; "
    while (length(text) < 2 * size) text = text text
    for (i = 0; i < n; i++) {
      f = sprintf("%s/task-%06d.txt", dir, i)
      head = sprintf("task %06d: ", i)
      printf "%s%s\n", head, substr(text, 1 + i % 40, size - length(head) - 1) > f
      close(f)
    }
  }'
}
make_corpus "$WORK/corpus" "$TASKS"
make_corpus "$WORK/seed" 1
mkdir -p "$WORK/warm" && make_corpus "$WORK/warm" $((JOBS * 20))
[[ $(wc -c <"$WORK/corpus/task-000000.txt") -eq $SIZE ]] ||
  { echo "fuzz_throughput: the corpus files are not $SIZE bytes" >&2; exit 1; }
SEED_FILE="$WORK/seed/task-000000.txt"

fuzz_cmd() {  # STORE MAX_TIME
  FUZZ=("$PB" fuzz "$SEED_FILE" --handler echo --jobs "$JOBS" --max-time "$2" --max-len "$SIZE" --seed 1 --json --store "$1")
}
run_cmd() {  # DIR
  RUN=("$PB" run --handler echo --jobs "$JOBS" --no-store --quiet "$1")
}

# timed OUT LOG CMD...: runs CMD (stdout to OUT, stderr to LOG) and prints,
# tab-separated: wall ns; CPU ms of the process and of every descendant it
# reaped (zygote, fork server, children); exit code.
timed() {
  python3 - "$@" <<'PY'
import os, resource, subprocess, sys, time
out, log, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
before = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(out, "w") as o, open(log, "w") as e:
    t0 = time.monotonic_ns()
    rc = subprocess.call(cmd, stdout=o, stderr=e)
    t1 = time.monotonic_ns()
after = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(f"{t1 - t0}\t{cpu * 1000:.0f}\t{rc}")
PY
}

# Sanity: run echoes every input; a short fuzz session ends with a summary,
# runs ok only, and finds nothing (echo never fails).
rc=0; out=$("$PB" run --handler echo --jobs "$JOBS" --no-store --json "$SEED_FILE" 2>"$WORK/log/check.run") || rc=$?
[[ $rc == 0 ]] || bench_fail_run "sanity check (run)" "$rc" "$WORK/log/check.run"
python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r["kind"]=="ok" and r["output"]==open(sys.argv[2]).read() else 1)' \
  "$out" "$SEED_FILE" || { echo "fuzz_throughput: run did not echo the payload: $out" >&2; exit 1; }
fuzz_cmd "$WORK/stores/check" 1s
rc=0; "${FUZZ[@]}" >"$WORK/log/check.fuzz.out" 2>"$WORK/log/check.fuzz" || rc=$?
[[ $rc == 0 ]] || bench_fail_run "sanity check (fuzz)" "$rc" "$WORK/log/check.fuzz"
python3 -c 'import json,sys; s=json.loads(open(sys.argv[1]).read().splitlines()[-1]); sys.exit(0 if s["type"]=="summary" and s["runs"]>0 and set(s["by_kind"])=={"ok"} else 1)' \
  "$WORK/log/check.fuzz.out" || { echo "fuzz_throughput: unexpected fuzz output: $(tail -n 1 "$WORK/log/check.fuzz.out")" >&2; exit 1; }
rm -rf "$WORK/stores/check"

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "pillbox fuzz throughput: echo, $SIZE-byte inputs, $JOBS jobs, fuzz ${FUZZ_SECONDS}s and $TASKS run tasks per round, $ROUNDS rounds; load average before: $load_before (cores: $(nproc))" >&2

# Warm-up: page cache, binaries, dynamic loader caches, SQLite's first open.
run_cmd "$WORK/warm"
rc=0; "${RUN[@]}" >/dev/null 2>"$WORK/log/warm.run" || rc=$?
[[ $rc == 0 ]] || bench_fail_run "warm-up (run)" "$rc" "$WORK/log/warm.run"
fuzz_cmd "$WORK/stores/warm" 1s
rc=0; "${FUZZ[@]}" >/dev/null 2>"$WORK/log/warm.fuzz" || rc=$?
[[ $rc == 0 ]] || bench_fail_run "warm-up (fuzz)" "$rc" "$WORK/log/warm.fuzz"
rm -rf "$WORK/stores/warm"

VARIANTS=(fuzz run)
: >"$WORK/times.tsv"; : >"$WORK/loads.tsv"; : >"$WORK/failed_runs.tsv"
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < 2; k++)); do  # odd rounds: fuzz then run; even rounds: run then fuzz
    v=${VARIANTS[$(((k + r - 1) % 2))]}
    if [[ $v == fuzz ]]; then
      fuzz_cmd "$WORK/stores/round-$r" "${FUZZ_SECONDS}s"   # does not exist yet: pillbox creates it
      res=$(timed "$WORK/log/fuzz.$r.out" "$WORK/log/fuzz.$r" "${FUZZ[@]}")
    else
      run_cmd "$WORK/corpus"
      res=$(timed /dev/null "$WORK/log/run.$r" "${RUN[@]}")
    fi
    IFS=$'\t' read -r ns cpu_ms rc <<<"$res"
    # exit 1 (fuzz: failures found; run: tasks failed) is a result, listed in
    # the report: echo should never fail. Anything else stops the benchmark.
    case "$rc" in
      0) ;;
      1) echo "  WARNING: $v (round $r): failures (exit 1)" >&2; printf '%s\t%d\n' "$v" "$r" >>"$WORK/failed_runs.tsv" ;;
      *) bench_fail_run "$v (round $r)" "$rc" "$WORK/log/$v.$r" ;;
    esac
    printf '%s\t%d\t%d\t%d\n' "$v" "$r" "$ns" "$cpu_ms" >>"$WORK/times.tsv"
    printf '  round %d  %-5s %7.2f s  (cpu %d ms)\n' "$r" "$v" "$(awk -v ns="$ns" 'BEGIN{print ns/1e9}')" "$cpu_ms" >&2
  done
  rm -rf "$WORK/stores/round-$r"
  load=$(cut -d' ' -f1 /proc/loadavg)
  printf '%d\t%s\n' "$r" "$load" >>"$WORK/loads.tsv"
  echo "  round $r done; load average: $load" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report ----------------------------------------------------------------
python3 - "$WORK" "$TASKS" "$JOBS" "$ROUNDS" "$SIZE" "$FUZZ_SECONDS" "$load_before" "$load_after" "$(nproc)" <<'EOF'
import json, statistics, sys

work, tasks, jobs, rounds, size, fuzz_s, load_before, load_after, cores = sys.argv[1:10]
tasks, jobs, rounds, size, fuzz_s, cores = int(tasks), int(jobs), int(rounds), int(size), int(fuzz_s), int(cores)

secs, cpu = {"fuzz": {}, "run": {}}, {"fuzz": {}, "run": {}}
for line in open(f"{work}/times.tsv"):
    v, r, ns, cpu_ms = line.split("\t")
    secs[v][int(r)] = int(ns) / 1e9
    cpu[v][int(r)] = int(cpu_ms)
rs = sorted(secs["run"])
summary = {}
for r in rs:
    lines = [l for l in open(f"{work}/log/fuzz.{r}.out").read().splitlines() if l.strip()]
    summary[r] = json.loads(lines[-1])
    assert summary[r]["type"] == "summary", lines[-1]

fuzz_rate = [summary[r]["runs_per_second"] for r in rs]                 # its own elapsed time
fuzz_rate_wall = [summary[r]["runs"] / secs["fuzz"][r] for r in rs]     # the whole process
run_rate = [tasks / secs["run"][r] for r in rs]
ratio = [f / t for f, t in zip(fuzz_rate, run_rate)]
ratio_wall = [f / t for f, t in zip(fuzz_rate_wall, run_rate)]
cpu_fuzz = [cpu["fuzz"][r] / summary[r]["runs"] for r in rs]            # ms per execution
cpu_run = [cpu["run"][r] / tasks for r in rs]
med = statistics.median

print(f"\npillbox fuzz throughput — echo handler, {size}-byte inputs, {jobs} jobs, {rounds} rounds (median)")
print(f"{'variant':<44}{'per second':>12}{'cpu ms each':>13}")
print(f"{'pillbox fuzz (executions, --max-time ' + str(fuzz_s) + 's)':<44}{med(fuzz_rate):>12.0f}{med(cpu_fuzz):>13.2f}")
print(f"{'pillbox run --no-store (' + str(tasks) + ' tasks)':<44}{med(run_rate):>12.0f}{med(cpu_run):>13.2f}")
print(f"{'fuzz / run':<44}{med(ratio):>11.2f}x")

print("\nper round (fuzz: runs_per_second of its summary; run: tasks / wall time; ratio in the same round):")
for i, r in enumerate(rs):
    first = "fuzz first" if r % 2 == 1 else "run first "
    s = summary[r]
    print(f"  round {r} ({first})  fuzz {fuzz_rate[i]:6.0f}/s ({s['runs']} runs, corpus {s['corpus']}, "
          f"{s['duplicates_skipped']} duplicates skipped)  run {run_rate[i]:6.0f}/s  ratio {ratio[i]:.2f}")
for label, xs in (("fuzz", fuzz_rate), ("run", run_rate)):
    print(f"  spread of {label}: {(max(xs) - min(xs)) / med(xs) * 100:.0f}% of median")
print(f"  fuzz over its process's wall time (store open, seed read, exit included): "
      + "  ".join(f"{x:.0f}/s" for x in fuzz_rate_wall) + f"; ratio {med(ratio_wall):.2f} (median)")
print("  cpu ms per execution (process and reaped descendants), fuzz: "
      + "  ".join(f"{x:.2f}" for x in cpu_fuzz) + ";  run: " + "  ".join(f"{x:.2f}" for x in cpu_run))
loads = [l.split("\t")[1].strip() for l in open(f"{work}/loads.tsv") if l.strip()]
print("  load average (1 min) at the end of each round: " + "  ".join(loads))
kinds = {}
for s in summary.values():
    for k, n in s["by_kind"].items():
        kinds[k] = kinds.get(k, 0) + n
if set(kinds) != {"ok"}:
    print(f"  WARNING: not every fuzz execution ended ok: {kinds}")
failed = [l.split("\t") for l in open(f"{work}/failed_runs.tsv") if l.strip()]
if failed:
    print("  runs that ended with exit 1 (failures; their times still count): "
          + ", ".join(f"{v} round {r.strip()}" for v, r in failed))

print(f"load average before: {load_before}; after: {load_after}; cores: {cores}"
      + ("  (machine busy: load above core count)" if max(float(load_before.split()[0]), float(load_after.split()[0])) > cores else ""))

raw = {"tasks": tasks, "jobs": jobs, "rounds": rounds, "size": size, "fuzz_seconds": fuzz_s, "cores": cores,
       "load_before": load_before, "load_after": load_after, "load_per_round": loads,
       "fuzz_runs_per_s": [round(x, 1) for x in fuzz_rate], "fuzz_runs_per_s_wall": [round(x, 1) for x in fuzz_rate_wall],
       "run_tasks_per_s": [round(x, 1) for x in run_rate], "ratio_fuzz_run": [round(x, 3) for x in ratio],
       "ratio_fuzz_run_median": round(med(ratio), 3), "cpu_ms_per_exec": {"fuzz": cpu_fuzz, "run": cpu_run},
       "fuzz_summaries": [summary[r] for r in rs], "failed_runs": failed}
print("\nraw: " + json.dumps(raw, sort_keys=True))
EOF
