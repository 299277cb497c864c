#!/usr/bin/env bash
# bench/ledger_overhead.sh — what the task ledger (the SQLite store) costs a run.
#
# usage: bench/ledger_overhead.sh [BUILD_DIR] [TASKS]    (defaults: build, 2000)
#   env: ROUNDS (default 5), JOBS (default: nproc), KEEP=1 keeps the temp dir
#
# Every task is an echo (a small distinct file in, the same bytes out), so the
# task itself costs almost nothing and the ledger's share shows. Two variants,
# run interleaved in each round, the order alternating from round to round:
#
#   ledger off   pillbox run --handler echo --jobs N --quiet --no-store DIR
#   ledger on    pillbox run --handler echo --jobs N --quiet --store FRESH DIR
#                (FRESH: a new, not yet existing store directory every round,
#                so no task is ever skipped as already done)
#
# Throughput: TASKS / wall time of the whole run; median over rounds. The
# ratio on/off is taken per round (two runs seconds apart, same noise), then
# its median; cost = 1 - ratio = (off - on) / off. The issue's target: the
# ledger costs under 10 % of throughput.
# CPU: the supervisor's own CPU time (and that of the processes it reaped) per
# run, read from /proc/PID/stat; the ledger's extra supervisor CPU per task,
# as a share of all the CPU a task takes without the ledger, is a second,
# less noise-sensitive estimate of its cost on a CPU-bound box.
# For the ledger-on runs, the store is read back afterwards with python3's
# sqlite3 module: size of pillbox.db and rows of tasks and attempts; with
# strace, one extra untimed run counts the write transactions.
# Nothing is written into the repository; results are printed only.
set -euo pipefail

BENCH=ledger_overhead
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_help "$@"

BUILD_DIR=${1:-build}
TASKS=${2:-2000}
ROUNDS=${ROUNDS:-5}
JOBS=${JOBS:-$(nproc)}

bench_build_dir "$BUILD_DIR" pillbox pillbox-sandbox
bench_positive_ints TASKS ROUNDS JOBS
bench_need python3 awk
bench_workdir corpus log stores
bench_snapshot_build

# TASKS small text files, 60-250 bytes, all distinct, deterministic (as in echo_overhead.sh).
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

VARIANTS=(ledger_off ledger_on)

# VARIANT OUTPUT_FLAG DIR STORE_DIR
pillbox_run() {
  case "$1" in
    ledger_off) "$PB" run --handler echo --jobs "$JOBS" "$2" --no-store "$3" ;;
    ledger_on)  "$PB" run --handler echo --jobs "$JOBS" "$2" --store "$4" "$3" ;;
  esac
}

# "Some tasks failed" (exit 1) is a result: the time counts, the run is listed.
# Anything else (usage, setup error) stops the benchmark.
check_rc() {  # VARIANT RC WHAT LOG
  case "$2" in
    0) return 0 ;;
    1) echo "  WARNING: $3: some tasks did not end ok (exit $2)" >&2
       printf '%s\t%s\n' "$1" "$3" >>"$WORK/failed_runs.tsv" ;;
    *) bench_fail_run "$3" "$2" "$4" ;;
  esac
}

# Rows of the store's tables and the size of its files, as one JSON object.
store_stats() {  # STORE_DIR
  python3 - "$1" <<'EOF'
import json, os, sqlite3, sys
d = sys.argv[1]
sizes = {f: os.path.getsize(os.path.join(d, f)) for f in os.listdir(d) if f.startswith("pillbox.db")}
c = sqlite3.connect(f"file:{d}/pillbox.db?mode=ro", uri=True)
rows = {t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("runs", "tasks", "attempts")}
states = dict(c.execute("SELECT state, count(*) FROM tasks GROUP BY state").fetchall())
print(json.dumps({"sizes": sizes, "rows": rows, "states": states}, sort_keys=True))
EOF
}

# Sanity: both variants give back exactly the payload, and the ledger-on run
# leaves one task and one finished attempt in the store.
sample="$WORK/corpus/task-000007.txt"
mkdir -p "$WORK/check" && cp "$sample" "$WORK/check/"
for v in "${VARIANTS[@]}"; do
  rc=0; out=$(pillbox_run "$v" --json "$WORK/check" "$WORK/stores/check" 2>"$WORK/log/check.$v") || rc=$?
  [[ $rc == 0 ]] || bench_fail_run "sanity check ($v)" "$rc" "$WORK/log/check.$v"
  python3 -c 'import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r["kind"]=="ok" and r["output"]==open(sys.argv[2]).read() else 1)' \
    "$out" "$sample" || { echo "ledger_overhead: $v did not echo the payload: $out" >&2; exit 1; }
done
python3 -c 'import json,sys; s=json.loads(sys.argv[1]); sys.exit(0 if s["rows"]["tasks"]==1 and s["rows"]["attempts"]==1 and s["states"]=={"ok":1} else 1)' \
  "$(store_stats "$WORK/stores/check")" || { echo "ledger_overhead: the store of the sanity run is not as expected" >&2; exit 1; }

fs_type=$(df -PT "$WORK/stores" | awk 'NR == 2 { print $2 }')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "pillbox ledger benchmark: $TASKS tasks, $JOBS jobs, $ROUNDS rounds; store on $fs_type; load average before: $load_before (cores: $(nproc))" >&2

# Warm-up: page cache, binaries, dynamic loader caches, SQLite's first open.
for v in "${VARIANTS[@]}"; do
  rc=0; pillbox_run "$v" --quiet "$WORK/warm" "$WORK/stores/warm" >/dev/null 2>"$WORK/log/warm.$v" || rc=$?
  [[ $rc == 0 ]] || bench_fail_run "warm-up ($v)" "$rc" "$WORK/log/warm.$v"
done

: >"$WORK/times.tsv"; : >"$WORK/failed_runs.tsv"; : >"$WORK/loads.tsv"; : >"$WORK/stores.jsonl"
# timed LOG VARIANT FLAG DIR STORE: one measured run of pillbox_run (stdout to
# /dev/null, stderr to LOG). Prints, tab-separated: wall ns; CPU ms of the
# pillbox process itself (the supervisor: dispatch, ledger, SQLite); CPU ms
# of the descendants it reaped (zygote, fork server, tasks); exit code. CPU
# times come from /proc/PID/stat of the exited, not yet reaped process
# (waitid WNOWAIT), in clock ticks (10 ms). A shell function cannot be run by
# python, so the command line is pillbox_run's, written out again here.
timed() {
  local log=$1 v=$2 flag=$3 dir=$4 store=$5
  local -a cmd
  case "$v" in
    ledger_off) cmd=("$PB" run --handler echo --jobs "$JOBS" "$flag" --no-store "$dir") ;;
    ledger_on)  cmd=("$PB" run --handler echo --jobs "$JOBS" "$flag" --store "$store" "$dir") ;;
  esac
  python3 - "$log" "${cmd[@]}" <<'PY'
import os, subprocess, sys, time
tick = os.sysconf("SC_CLK_TCK")
with open(sys.argv[1], "w") as err:
    t0 = time.monotonic_ns()
    p = subprocess.Popen(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=err)
    os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOWAIT)
    t1 = time.monotonic_ns()
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    rc = p.wait()
utime, stime, cutime, cstime = (int(x) for x in f[11:15])
ms = lambda t: t * 1000 // tick
print(f"{t1 - t0}\t{ms(utime + stime)}\t{ms(cutime + cstime)}\t{rc}")
PY
}
for ((r = 1; r <= ROUNDS; r++)); do
  for ((k = 0; k < 2; k++)); do  # odd rounds: off then on; even rounds: on then off
    v=${VARIANTS[$(((k + r - 1) % 2))]}
    store="$WORK/stores/round-$r"   # does not exist yet: pillbox creates it (0700)
    res=$(timed "$WORK/log/$v.$r" "$v" --quiet "$WORK/corpus" "$store")
    IFS=$'\t' read -r ns self_ms child_ms rc <<<"$res"
    check_rc "$v" "$rc" "$v (round $r)" "$WORK/log/$v.$r"
    printf '%s\t%d\t%d\t%d\t%d\n' "$v" "$r" "$ns" "$self_ms" "$child_ms" >>"$WORK/times.tsv"
    printf '  round %d  %-10s %7.2f s  (cpu: supervisor %d ms, its children %d ms)\n' "$r" "$v" \
      "$(awk -v ns="$ns" 'BEGIN{print ns/1e9}')" "$self_ms" "$child_ms" >&2
  done
  store_stats "$WORK/stores/round-$r" >>"$WORK/stores.jsonl"
  rm -rf "$WORK/stores/round-$r"
  load=$(cut -d' ' -f1 /proc/loadavg)
  printf '%d\t%s\n' "$r" "$load" >>"$WORK/loads.tsv"
  echo "  round $r done; load average: $load" >&2
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Write transactions of one more ledger-on run (not timed), when strace is
# there: SQLite takes the WAL write lock (byte 120 of pillbox.db-shm) with
# fcntl(F_SETLK, F_WRLCK) once per write transaction (BEGIN IMMEDIATE ... COMMIT),
# plus a few for opening and migrating the store. Only the supervisor is traced.
# strace slows the supervisor, so its dispatcher turns may group slightly
# differently than in the timed runs.
txns=-1
if command -v strace >/dev/null; then
  rc=0
  strace -o "$WORK/strace.txt" -e trace=fcntl "$PB" run --handler echo --jobs "$JOBS" --quiet \
    --store "$WORK/stores/strace" "$WORK/corpus" >/dev/null 2>"$WORK/log/strace" || rc=$?
  if [[ $rc == 0 ]]; then
    txns=$(grep -c 'F_SETLK, {l_type=F_WRLCK, l_whence=SEEK_SET, l_start=120, l_len=1}) = 0' "$WORK/strace.txt" || true)
  else
    echo "  (strace run failed, exit $rc: transactions not counted)" >&2
  fi
fi

# --- report ----------------------------------------------------------------
python3 - "$WORK" "$TASKS" "$JOBS" "$ROUNDS" "$load_before" "$load_after" "$(nproc)" "$fs_type" "$txns" <<'EOF'
import json, statistics, sys

work, tasks, jobs, rounds, load_before, load_after, cores, fs_type, txns = sys.argv[1:10]
tasks, jobs, rounds, cores, txns = int(tasks), int(jobs), int(rounds), int(cores), int(txns)

names = {"ledger_off": "ledger off (--no-store)", "ledger_on": "ledger on  (--store)"}
secs = {v: {} for v in names}
cpu_self = {v: {} for v in names}   # ms, the pillbox process (supervisor)
cpu_kids = {v: {} for v in names}   # ms, its reaped descendants (zygote, fork server, tasks)
for line in open(f"{work}/times.tsv"):
    v, r, ns, self_ms, kids_ms = line.split("\t")
    secs[v][int(r)] = int(ns) / 1e9
    cpu_self[v][int(r)] = int(self_ms)
    cpu_kids[v][int(r)] = int(kids_ms)
rs = sorted(secs["ledger_on"])
rate = {v: [tasks / secs[v][r] for r in rs] for v in names}
med = {v: statistics.median(rate[v]) for v in names}
ratio = [secs["ledger_off"][r] / secs["ledger_on"][r] for r in rs]   # = on tasks/s / off tasks/s
ratio_med = statistics.median(ratio)
cost = (1 - ratio_med) * 100

print(f"\npillbox ledger benchmark — {tasks} echo tasks, {jobs} jobs, {rounds} rounds (median); store on {fs_type}")
print(f"{'variant':<26}{'tasks/s':>10}{'vs ledger off':>16}")
print(f"{names['ledger_off']:<26}{med['ledger_off']:>10.0f}{1.0:>15.2f}x")
print(f"{names['ledger_on']:<26}{med['ledger_on']:>10.0f}{ratio_med:>15.3f}x")

print("\nper round (tasks/s; on/off ratio and cost in the same round):")
for i, r in enumerate(rs):
    first = "off first" if r % 2 == 1 else "on first "
    print(f"  round {r} ({first})  off {rate['ledger_off'][i]:7.0f}  on {rate['ledger_on'][i]:7.0f}"
          f"  ratio {ratio[i]:.3f}  cost {(1 - ratio[i]) * 100:5.1f} %")
for v, label in names.items():
    spread = (max(rate[v]) - min(rate[v])) / med[v] * 100
    print(f"  spread of {label}: {spread:.0f}% of median")
loads = [l.split("\t")[1].strip() for l in open(f"{work}/loads.tsv") if l.strip()]
print("  load average (1 min) at the end of each round: " + "  ".join(loads))

# CPU per task: less sensitive to other load than wall time. When the box is
# CPU-bound (2 cores, 2 jobs), the supervisor's extra CPU per task over the
# whole CPU per task is roughly what the ledger takes from throughput.
per_task = lambda d, v: [d[v][r] / tasks for r in rs]
extra = [(cpu_self["ledger_on"][r] - cpu_self["ledger_off"][r]) / tasks for r in rs]
total_off = [(cpu_self["ledger_off"][r] + cpu_kids["ledger_off"][r]) / tasks for r in rs]
print("\nCPU per task, ms (median over rounds; clock ticks of 10 ms over the whole run):")
for v, label in names.items():
    sv, kv = statistics.median(per_task(cpu_self, v)), statistics.median(per_task(cpu_kids, v))
    print(f"  {label:<26}supervisor {sv:.3f}   children {kv:.3f}   total {sv + kv:.3f}")
extra_med = statistics.median(extra)
cpu_cost = statistics.median(e / t * 100 for e, t in zip(extra, total_off))
print(f"  ledger's extra supervisor CPU: {extra_med:.3f} ms per task (per round: "
      + "  ".join(f"{e:.3f}" for e in extra) + f"), {cpu_cost:.1f} % of the CPU a task takes without it")

stores = [json.loads(l) for l in open(f"{work}/stores.jsonl") if l.strip()]
db = statistics.median(s["sizes"].get("pillbox.db", 0) for s in stores)
wal = statistics.median(s["sizes"].get("pillbox.db-wal", 0) for s in stores)
att = sorted({s["rows"]["attempts"] for s in stores})
tks = sorted({s["rows"]["tasks"] for s in stores})
states = stores[-1]["states"]
print(f"\nledger on, store after each run: pillbox.db {db / 1024:.0f} KiB (wal {wal / 1024:.0f} KiB), "
      f"attempts rows {'/'.join(map(str, att))}, tasks rows {'/'.join(map(str, tks))}, "
      f"task states {states} ({db / max(att[0], 1):.0f} bytes per attempt); write transactions "
      + (f"{txns} ({txns / tasks:.2f} per task, counted in one extra run under strace)" if txns >= 0
         else "not counted (no strace)"))

failed_runs = [l.rstrip("\n").split("\t") for l in open(f"{work}/failed_runs.tsv") if l.strip()]
if failed_runs:
    print("\nruns in which some tasks did not end ok (their times are still counted):")
    for v, what in failed_runs:
        print(f"  {what}")

print(f"\ntarget: the ledger costs < 10 % of throughput — measured {cost:.1f} % "
      f"(median on/off ratio {ratio_med:.3f}): " + ("met" if cost < 10 else "NOT met"))
print(f"load average before: {load_before}; after: {load_after}; cores: {cores}"
      + ("  (machine busy: load above core count)" if max(float(load_before.split()[0]), float(load_after.split()[0])) > cores else ""))

raw = {"tasks": tasks, "jobs": jobs, "rounds": rounds, "cores": cores, "fs": fs_type,
       "load_before": load_before, "load_after": load_after, "load_per_round": loads,
       "seconds": {v: [secs[v][r] for r in rs] for v in names},
       "tasks_per_s_median": {v: round(med[v], 1) for v in names},
       "ratio_on_off": [round(x, 4) for x in ratio], "ratio_on_off_median": round(ratio_med, 4),
       "cost_percent": round(cost, 2), "write_transactions": txns,
       "cpu_ms": {v: {"supervisor": [cpu_self[v][r] for r in rs], "children": [cpu_kids[v][r] for r in rs]} for v in names},
       "extra_supervisor_cpu_ms_per_task_median": round(extra_med, 4), "cpu_cost_percent": round(cpu_cost, 2),
       "stores": stores, "failed_runs": [w for _, w in failed_runs]}
print("\nraw: " + json.dumps(raw, sort_keys=True))
EOF
