#!/usr/bin/env bash
# bench/worker_throughput.sh — 2 workers on one local Redis against `run`, same files, same run.
#
# usage: bench/worker_throughput.sh [BUILD_DIR] [TASKS]   (default build/, 3000 tasks)
#   env: ROUNDS (default 3), KEEP=1 keeps the temp dir
#
# The question of docs/distributed.md: what does taking tasks from a Redis
# stream (read, a history per entry, a fenced settle with its result) cost
# against `pillbox run` over files? Both sides get 2 slots: `run --jobs 2`,
# and 2 workers with --jobs 1 each, on one redis-server started here (no
# persistence: this measures pillbox, not the disk). Per variant and round:
#
#   run-store   pillbox run --jobs 2 --store S                (the default: a ledger)
#   run-nostore pillbox run --jobs 2 --no-store               (nothing kept)
#   workers     the corpus submitted (not timed), then 2 workers until NAME:results
#               holds every task (polled every 10 ms; the workers are stopped after)
#   worker1     the same with 1 worker --jobs 2: one supervisor, as `run` has, so
#               the ratio to run-nostore is the per-task cost of the Redis path
#
# for two payload paths: echo (--handler echo, zygote) and exec (-- echo_stdin).
# Prints median tasks/s per variant and the ratios to run.
set -euo pipefail

BENCH=worker_throughput
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_help "$@"

ROUNDS=${ROUNDS:-3}
TASKS=${2:-3000}
bench_positive_ints TASKS ROUNDS
bench_need cc python3 redis-server
bench_build_dir "${1:-build}" pillbox pillbox-sandbox
bench_workdir corpus
bench_snapshot_build

bench_echo_stdin
bench_text_corpus "$WORK/corpus" "$TASKS"
chmod -R a+rX "$WORK"

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$PORT" --bind 127.0.0.1 --dir "$WORK" --save '' --appendonly no --daemonize yes \
  --logfile "$WORK/redis.log" --pidfile "$WORK/redis.pid"
trap 'kill "$(cat "$WORK/redis.pid" 2>/dev/null)" 2>/dev/null || true; bench_cleanup' EXIT
URL="redis://127.0.0.1:$PORT"
python3 - "$PORT" <<'EOF'
import socket, sys, time
for _ in range(500):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.1).close(); break
    except OSError:
        time.sleep(0.01)
EOF

# what_runs PATH: the handler or command arguments of a payload path.
what_runs() { if [[ $1 == echo ]]; then echo "--handler echo"; else echo "-- $WORK/echo_stdin"; fi; }

# run_files PATH VARIANT: seconds of one `pillbox run`.
run_files() {
  local t0 t1 rc=0 store="$WORK/store-$RANDOM" args=(run --quiet --jobs 2)
  [[ $2 == run-store ]] && args+=(--store "$store") || args+=(--no-store)
  if [[ $1 == echo ]]; then args+=(--handler echo "$WORK/corpus"); else args+=("$WORK/corpus" -- "$WORK/echo_stdin"); fi
  t0=$(date +%s.%N)
  "$PB" "${args[@]}" >/dev/null 2>"$WORK/log" || rc=$?
  t1=$(date +%s.%N)
  rm -rf "$store"
  [[ $rc == 0 ]] || bench_fail_run "run $1 $2" "$rc" "$WORK/log"
  python3 -c "print($t1 - $t0)"
}

# run_workers PATH N JOBS: seconds from starting N workers (--jobs JOBS) to
# every result in NAME:results.
run_workers() {
  local stream="bench$RANDOM" w pids=() rc=0
  "$PB" submit --quiet --redis "$URL" --stream "$stream" "$WORK/corpus" 2>"$WORK/log" || bench_fail_run submit 1 "$WORK/log"
  local t0 t1
  t0=$(date +%s.%N)
  for ((w = 1; w <= $2; w++)); do
    # shellcheck disable=SC2046
    "$PB" worker --quiet --redis "$URL" --stream "$stream" --jobs "$3" --consumer "w$w" $(what_runs "$1") \
      >/dev/null 2>"$WORK/worker$w.log" &
    pids+=($!)
  done
  python3 - "$PORT" "$stream:results" "$TASKS" <<'EOF' || rc=$?
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
key, want = sys.argv[2].encode(), int(sys.argv[3])
deadline = time.time() + 600
while time.time() < deadline:
    s.sendall(b"*2\r\n$4\r\nXLEN\r\n$%d\r\n%s\r\n" % (len(key), key))
    reply = s.recv(64)
    if int(reply[1:].split(b"\r\n")[0]) >= want:
        sys.exit(0)
    time.sleep(0.01)
sys.exit(1)
EOF
  t1=$(date +%s.%N)
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  [[ $rc == 0 ]] || bench_fail_run "workers $1" "$rc" "$WORK/worker1.log"
  python3 -c "print($t1 - $t0)"
}

declare -A TIMES
for path in echo exec; do run_files "$path" run-store >/dev/null; run_workers "$path" 2 1 >/dev/null; done  # warm up
for ((r = 1; r <= ROUNDS; r++)); do
  for path in echo exec; do
    for variant in run-store run-nostore workers worker1; do
      case $variant in
        workers) t=$(run_workers "$path" 2 1) ;;
        worker1) t=$(run_workers "$path" 1 2) ;;
        *) t=$(run_files "$path" "$variant") ;;
      esac
      TIMES[$path.$variant]+="$t "
    done
  done
done

echo "worker_throughput: $TASKS tasks, $ROUNDS rounds, 2 slots each (run --jobs 2; 2 workers x --jobs 1; 1 worker x --jobs 2), $(nproc) cores"
printf '%-6s %12s %13s %10s %10s %14s %16s %16s\n' path "run-store/s" "run-nostore/s" "workers/s" "worker1/s" \
  "workers/store" "workers/nostore" "worker1/nostore"
for path in echo exec; do
  python3 - "$TASKS" "${TIMES[$path.run-store]}" "${TIMES[$path.run-nostore]}" "${TIMES[$path.workers]}" \
    "${TIMES[$path.worker1]}" "$path" <<'EOF'
import statistics, sys
tasks = int(sys.argv[1])
rate = lambda ts: statistics.median(tasks / float(t) for t in ts.split())
store, nostore, workers, one = (rate(a) for a in sys.argv[2:6])
print("%-6s %12.0f %13.0f %10.0f %10.0f %14.2f %16.2f %16.2f" %
      (sys.argv[6], store, nostore, workers, one, workers / store, workers / nostore, one / nostore))
EOF
done
