#!/usr/bin/env bash
# bench/worker_throughput.sh — 2 workers on one local Redis (RabbitMQ, Kafka) against `run`, same files, same run.
#
# usage: bench/worker_throughput.sh [BUILD_DIR] [TASKS]   (default build/, 3000 tasks)
#   env: ROUNDS (default 3), KEEP=1 keeps the temp dir, NO_RABBITMQ=1 leaves RabbitMQ out, NO_KAFKA=1 Kafka
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
#   amqp        the corpus submitted to a RabbitMQ queue (not timed), then 2
#               workers --amqp until their ok verdicts (summed from their
#               /metrics, polled every 10 ms) count every task
#   amqp1       the same with 1 worker --jobs 2
#   amqp-p4     as amqp, with --prefetch 4 (4 x --jobs; the default is --jobs)
# RabbitMQ (Debian's rabbitmq-server) is started here with a node name,
# ports, epmd and Mnesia dir of its own; without it the amqp columns say so.
# The broker runs on the same cores: its CPU time per task over the amqp
# runs is printed, with the ceiling it puts on them (2 cores shared by the
# broker and what `run` does alone).
#   kafka       the corpus submitted to a topic of 2 partitions (not timed), then 2
#               workers --kafka (one group) until their ok verdicts (from their
#               /metrics, as amqp) count every task
#   kafka1      the same with 1 worker --jobs 2
# Kafka is librdkafka's mock cluster (BUILD_DIR/fixtures/pillbox-kafka-mock, the
# tests' cluster: 3 brokers on loopback, everything in memory, no disk, no
# replication traffic): what it measures is pillbox's Kafka path (a start
# entry acknowledged before each task runs, its end, the result, the settled
# entry, the commit), not a real cluster. Its CPU time per task is printed too.
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

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# said_ready PATTERN FILE PID SECONDS: whether the server PID wrote a line
# matching PATTERN to FILE within SECONDS (looked at every 0.1 s; not after
# it died).
said_ready() {
  local i
  for ((i = 0; i < $4 * 10; i++)); do
    grep -q "$1" "$2" && return 0
    kill -0 "$3" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "$1" "$2"
}

# RabbitMQ, as tests/e2e/rabbit_server.cpp starts it: loopback only, a node
# name, ports, epmd, cookie (HOME) and Mnesia dir of its own, none of the
# host's /etc/rabbitmq read. AMQP_URL is empty when it is not here.
AMQP_URL=
RABBIT_SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server
if [[ "${NO_RABBITMQ:-0}" != 1 && -x $RABBIT_SERVER ]] && command -v epmd >/dev/null; then
  RD="$WORK/rabbit"
  mkdir -p "$RD"
  RPORT=$(free_port) EPMD_PORT=$(free_port) DIST_PORT=$(free_port) CTL_PORT=$(free_port)
  echo '[].' >"$RD/enabled_plugins"
  printf 'listeners.tcp.default = 127.0.0.1:%s\ndefault_user = pillbox\ndefault_pass = bench\nloopback_users = none\nlog.console = true\nlog.file = false\ndisk_free_limit.absolute = 1MB\n' \
    "$RPORT" >"$RD/rabbitmq.conf"
  ERL_ARGS="-start_epmd false -kernel inet_dist_use_interface {127,0,0,1}"
  epmd -port "$EPMD_PORT" -address 127.0.0.1 >/dev/null 2>&1 &
  EPMD_PID=$!
  env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME="$RD" ERL_EPMD_PORT="$EPMD_PORT" \
    RABBITMQ_NODENAME="pbbench-$$@localhost" RABBITMQ_DIST_PORT="$DIST_PORT" \
    RABBITMQ_CTL_DIST_PORT_MIN="$CTL_PORT" RABBITMQ_CTL_DIST_PORT_MAX="$CTL_PORT" \
    RABBITMQ_CONF_ENV_FILE="$RD/rabbitmq-env.conf" RABBITMQ_ADVANCED_CONFIG_FILE="$RD/advanced.config" \
    RABBITMQ_CONFIG_FILE="$RD/rabbitmq.conf" RABBITMQ_ENABLED_PLUGINS_FILE="$RD/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$RD/mnesia" RABBITMQ_LOG_BASE="$RD/log" RABBITMQ_PID_FILE="$RD/pid" \
    ERL_CRASH_DUMP="$RD/erl_crash.dump" RABBITMQ_ALLOW_INPUT=1 \
    RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-noinput $ERL_ARGS" RABBITMQ_CTL_ERL_ARGS="$ERL_ARGS" \
    "$RABBIT_SERVER" </dev/null >"$RD/out.log" 2>&1 &
  RABBIT_PID=$!
  # Ready when it says so (its listener is open, its user there): at most
  # 90 s, and not after it died.
  if said_ready 'completed with' "$RD/out.log" "$RABBIT_PID" 90; then
    AMQP_URL="amqp://pillbox:bench@127.0.0.1:$RPORT/%2f"
    # The Erlang VM under the start script: the one with this Mnesia dir.
    for b in $(pgrep beam.smp); do grep -qa "$RD/mnesia" "/proc/$b/environ" 2>/dev/null && BEAM_PID=$b; done
  else
    echo "$BENCH: rabbitmq-server did not start; the amqp columns are left out:" >&2
    tail -n 20 "$RD/out.log" >&2
  fi
fi
# Kafka: librdkafka's mock cluster, as tests/e2e/kafka_mock.h starts it (3
# brokers on loopback; it serves until its stdin ends), with every topic the
# runs use made at its start (the mock implements no CreateTopics): per run
# a topic of 2 partitions and its three (NAME.pillbox-attempts, NAME.dlq,
# NAME.results), so that each run's group starts on a fresh topic. KAFKA is
# empty when the mock is not built.
KAFKA=
KAFKA_MOCK="$BUILD_DIR/fixtures/pillbox-kafka-mock"
kafka_topic() { echo "kb-$1-$2"; }  # PATH RUN: the topic of one run
if [[ "${NO_KAFKA:-0}" != 1 && -x $KAFKA_MOCK ]]; then
  mock_args=(--brokers 3)
  for path in echo exec; do
    for run in warm $(seq -f 'kafka-%g' "$ROUNDS") $(seq -f 'kafka1-%g' "$ROUNDS"); do
      for suffix in "" .pillbox-attempts .dlq .results; do mock_args+=(--topic "$(kafka_topic "$path" "$run")$suffix:2"); done
    done
  done
  mkfifo "$WORK/kafka.in"
  "$KAFKA_MOCK" "${mock_args[@]}" <"$WORK/kafka.in" >"$WORK/kafka.out" 2>"$WORK/kafka.err" &
  KAFKA_PID=$!
  exec 7>"$WORK/kafka.in"  # its stdin, held open until the end
  if said_ready '^bootstrap ' "$WORK/kafka.out" "$KAFKA_PID" 30; then
    KAFKA=$(sed -n 's/^bootstrap //p' "$WORK/kafka.out")
  else
    echo "$BENCH: the Kafka mock cluster did not start; the kafka columns are left out:" >&2
    tail -n 20 "$WORK/kafka.err" >&2
  fi
elif [[ "${NO_KAFKA:-0}" != 1 ]]; then
  echo "$BENCH: no $KAFKA_MOCK (build the pillbox-kafka-mock target); the kafka columns are left out" >&2
fi
stop_servers() {
  kill "$(cat "$WORK/redis.pid" 2>/dev/null)" 2>/dev/null || true
  if [[ -n "${KAFKA_PID:-}" ]]; then
    exec 7>&-
    kill -TERM "$KAFKA_PID" 2>/dev/null || true
    wait "$KAFKA_PID" 2>/dev/null || true
  fi
  if [[ -n "${RABBIT_PID:-}" ]]; then
    kill -TERM "$RABBIT_PID" 2>/dev/null || true
    wait "$RABBIT_PID" 2>/dev/null || true
  fi
  if [[ -n "${EPMD_PID:-}" ]]; then kill "$EPMD_PID" 2>/dev/null || true; fi
}
trap 'stop_servers; bench_cleanup' EXIT

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

# end_workers T0 RC LABEL PID...: once the wait for results ended (RC 0:
# all came), the workers are stopped; prints the seconds since T0, or fails
# the run with the first worker's log.
end_workers() {
  local t1 t0=$1 rc=$2 label=$3
  t1=$(date +%s.%N)
  shift 3
  kill -TERM "$@" 2>/dev/null || true
  wait "$@" 2>/dev/null || true
  [[ $rc == 0 ]] || bench_fail_run "$label" "$rc" "$WORK/worker1.log"
  python3 -c "print($t1 - $t0)"
}

# run_workers PATH N JOBS: seconds from starting N workers (--jobs JOBS) to
# every result in NAME:results.
run_workers() {
  local stream="bench$RANDOM" w pids=() rc=0
  "$PB" submit --quiet --redis "$URL" --stream "$stream" "$WORK/corpus" 2>"$WORK/log" || bench_fail_run submit 1 "$WORK/log"
  local t0
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
  end_workers "$t0" "$rc" "workers $1" "${pids[@]}"
}

# The CPU time (clock ticks) process PID has used so far.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# wait_for_ok PORT...: waits until the ok verdicts the workers serving
# /metrics on PORT... count (pillbox_tasks_total{verdict="ok"}, polled
# every 10 ms) reach every task; fails after 600 s.
wait_for_ok() {
  python3 - "$TASKS" "$@" <<'EOF'
import re, sys, time, urllib.request
want, ports = int(sys.argv[1]), sys.argv[2:]
ok = re.compile(r'^pillbox_tasks_total\{[^}]*verdict="ok"[^}]*\} (\d+)', re.M)
def count(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % port, timeout=5) as r:
            return sum(int(n) for n in ok.findall(r.read().decode()))
    except OSError:
        return 0  # not listening yet
deadline = time.time() + 600
while time.time() < deadline:
    if sum(count(p) for p in ports) >= want:
        sys.exit(0)
    time.sleep(0.01)
sys.exit(1)
EOF
}

# run_metered_workers PATH N JOBS PID TICKS BROKER... [-- OPTION...]: the
# corpus submitted to BROKER (--amqp URL --queue NAME, --kafka LIST --topic
# NAME; not timed), then seconds from starting N workers there (--jobs
# JOBS, and each OPTION) to their ok verdicts counting every task
# (wait_for_ok: a queue or topic cannot be counted cheaply from outside).
# The CPU time process PID (the broker) used meanwhile goes to
# $WORK/TICKS.PATH (a line per run).
run_metered_workers() {
  local path=$1 n=$2 jobs=$3 pid=$4 ticks=$5 w pids=() ports=() rc=0 broker=() options=()
  shift 5
  while (($#)) && [[ $1 != -- ]]; do broker+=("$1"); shift; done
  (($# == 0)) || shift
  options=("$@")
  "$PB" submit --quiet "${broker[@]}" "$WORK/corpus" 2>"$WORK/log" || bench_fail_run "submit ${broker[0]}" 1 "$WORK/log"
  local t0 c0
  c0=$(cpu_ticks "$pid")
  t0=$(date +%s.%N)
  rm -f "$WORK"/stamps.w*
  for ((w = 1; w <= n; w++)); do
    ports+=("$(free_port)")
    if [[ ${broker[0]} == --kafka ]]; then
      # Each verdict line timed as it comes (below).
      # shellcheck disable=SC2046
      "$PB" worker --quiet "${broker[@]}" --jobs "$jobs" --consumer "w$w" --metrics "${ports[-1]}" --json \
        "${options[@]}" $(what_runs "$path") > >(stamp_lines "$WORK/stamps.w$w") 2>"$WORK/worker$w.log" &
    else
      # shellcheck disable=SC2046
      "$PB" worker --quiet "${broker[@]}" --jobs "$jobs" --consumer "w$w" --metrics "${ports[-1]}" "${options[@]}" \
        $(what_runs "$path") >/dev/null 2>"$WORK/worker$w.log" &
    fi
    pids+=($!)
  done
  wait_for_ok "${ports[@]}" || rc=$?
  echo $(($(cpu_ticks "$pid") - c0)) >>"$WORK/$ticks.$path"
  local seconds
  seconds=$(end_workers "$t0" "$rc" "workers ${broker[0]} $path" "${pids[@]}")
  if [[ ${broker[0]} == --kafka ]]; then
    # Kafka: the rate from the first verdict to the last, over every task.
    # Before the first, the group forms (the mock waits 3 s for members, and
    # a second member's join is a rebalance of several more): once per
    # fleet start, not per task, so reported apart ($WORK/kafka_join.PATH).
    seconds=$(python3 - "$t0" "$TASKS" "$WORK/kafka_join.$path" "$WORK"/stamps.w* <<'EOF'
import sys, time
t0, tasks, join_file = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def read():
    return sorted(float(line) for f in sys.argv[4:] for line in open(f) if line.endswith("\n"))
stamps, deadline = read(), time.time() + 2
while len(stamps) < tasks and time.time() < deadline:  # the last lines may still be on their way through the pipe
    time.sleep(0.05)
    stamps = read()
if len(stamps) < 2:
    sys.exit("kafka: fewer than 2 verdict lines were timed")
with open(join_file, "a") as out:
    out.write("%f\n" % (stamps[0] - t0))
print((stamps[-1] - stamps[0]) * tasks / (len(stamps) - 1))
EOF
    ) || bench_fail_run "timing workers ${broker[0]} $path" 1 "$WORK/worker1.log"
  fi
  echo "$seconds"
}

# stamp_lines FILE: the time (epoch seconds) of each JSON line read on stdin, a line each, written as it comes.
stamp_lines() {
  python3 -u -c '
import sys, time
with open(sys.argv[1], "w") as out:
    for line in sys.stdin:
        if line.startswith("{"):
            out.write("%f\n" % time.time())
            out.flush()
' "$1"
}

# run_amqp_workers PATH N JOBS [PREFETCH]: on RabbitMQ (a fresh queue),
# --prefetch PREFETCH or its default.
run_amqp_workers() {
  run_metered_workers "$1" "$2" "$3" "$BEAM_PID" broker_ticks --amqp "$AMQP_URL" --queue "bench$RANDOM" \
    -- ${4:+--prefetch "$4"}
}

# run_kafka_workers PATH N JOBS RUN: on Kafka, RUN's topic (made at the
# mock's start), the workers in one group.
run_kafka_workers() {
  run_metered_workers "$1" "$2" "$3" "$KAFKA_PID" kafka_ticks --kafka "$KAFKA" --topic "$(kafka_topic "$1" "$4")"
}

VARIANTS=(run-store run-nostore workers worker1)
[[ -z $AMQP_URL ]] || VARIANTS+=(amqp amqp1 amqp-p4)
[[ -z $KAFKA ]] || VARIANTS+=(kafka kafka1)

declare -A TIMES
for path in echo exec; do  # warm up
  run_files "$path" run-store >/dev/null
  run_workers "$path" 2 1 >/dev/null
  [[ -z $AMQP_URL ]] || run_amqp_workers "$path" 2 1 >/dev/null
  [[ -z $KAFKA ]] || run_kafka_workers "$path" 2 1 warm >/dev/null
done
rm -f "$WORK"/broker_ticks.* "$WORK"/kafka_ticks.* "$WORK"/kafka_join.*
for ((r = 1; r <= ROUNDS; r++)); do
  for path in echo exec; do
    for variant in "${VARIANTS[@]}"; do
      case $variant in
        workers) t=$(run_workers "$path" 2 1) ;;
        worker1) t=$(run_workers "$path" 1 2) ;;
        amqp) t=$(run_amqp_workers "$path" 2 1) ;;
        amqp1) t=$(run_amqp_workers "$path" 1 2) ;;
        amqp-p4) t=$(run_amqp_workers "$path" 2 1 4) ;;
        kafka) t=$(run_kafka_workers "$path" 2 1 "kafka-$r") ;;
        kafka1) t=$(run_kafka_workers "$path" 1 2 "kafka1-$r") ;;
        *) t=$(run_files "$path" "$variant") ;;
      esac
      TIMES[$path.$variant]+="$t "
    done
  done
done

echo "worker_throughput: $TASKS tasks, $ROUNDS rounds, 2 slots each (run --jobs 2; 2 workers x --jobs 1; 1 worker x --jobs 2), $(nproc) cores"
[[ -n $AMQP_URL ]] || echo "(no amqp columns: RabbitMQ was not started; see above)"
[[ -n $KAFKA ]] || echo "(no kafka columns: the Kafka mock cluster was not started; see above)"
for path in echo exec; do
  args=()
  for variant in "${VARIANTS[@]}"; do args+=("$variant=${TIMES[$path.$variant]}"); done
  ticks=$(paste -sd' ' "$WORK/broker_ticks.$path" 2>/dev/null || true)
  kafka_ticks=$(paste -sd' ' "$WORK/kafka_ticks.$path" 2>/dev/null || true)
  python3 - "$TASKS" "$path" "$ticks" "$(getconf CLK_TCK)" "$(nproc)" "$WORK/broker_notes" "$kafka_ticks" "${args[@]}" <<'EOF'
import statistics, sys
tasks, path = int(sys.argv[1]), sys.argv[2]
ticks, clk, cores, notes = [int(t) for t in sys.argv[3].split()], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
kafka_ticks = [int(t) for t in sys.argv[7].split()]
sys.argv[1:] = sys.argv[1:3] + sys.argv[8:]
rate = {}
for a in sys.argv[3:]:
    name, times = a.split("=", 1)
    rate[name] = statistics.median(tasks / float(t) for t in times.split())
cols = [(v + "/s", rate[v]) for v in rate]
nostore = rate["run-nostore"]
cols += [("workers/store", rate["workers"] / rate["run-store"]), ("workers/nostore", rate["workers"] / nostore),
         ("worker1/nostore", rate["worker1"] / nostore)]
if "amqp" in rate:
    cols += [("amqp/store", rate["amqp"] / rate["run-store"]), ("amqp/nostore", rate["amqp"] / nostore),
             ("amqp1/nostore", rate["amqp1"] / nostore), ("amqp-p4/store", rate["amqp-p4"] / rate["run-store"])]
if "kafka" in rate:
    cols += [("kafka/store", rate["kafka"] / rate["run-store"]), ("kafka/nostore", rate["kafka"] / nostore),
             ("kafka1/nostore", rate["kafka1"] / nostore)]
if path == "echo":
    print("path   " + " ".join("%15s" % c[0] for c in cols))
print("%-6s " % path + " ".join(("%15.0f" if c[0].endswith("/s") else "%15.2f") % c[1] for c in cols))
if ticks:
    # The broker's CPU per task, and the most the amqp columns could reach
    # against run-store if pillbox cost nothing more: the cores run's tasks
    # keep busy for 1/rate s each, plus the broker's share.
    broker_s = sum(ticks) / clk / (len(ticks) * tasks)
    run = rate["run-store"]
    ceiling = 1 / (1 / run + broker_s / cores)
    with open(notes, "a") as f:
        f.write("%s: rabbitmq-server used %.2f ms of CPU per task over the amqp runs; on %d cores shared with the "
                "tasks (if run keeps them busy), amqp/store could reach at most %.2f\n" % (path, broker_s * 1000, cores, ceiling / run))
if kafka_ticks:
    mock_s = sum(kafka_ticks) / clk / (len(kafka_ticks) * tasks)
    with open(notes, "a") as f:
        f.write("%s: the Kafka mock cluster (in memory) used %.2f ms of CPU per task over the kafka runs\n" % (path, mock_s * 1000))
EOF
  if [[ -s $WORK/kafka_join.$path ]]; then
    python3 - "$path" "$WORK/kafka_join.$path" >>"$WORK/broker_notes" <<'EOF'
import statistics, sys
joins = [float(line) for line in open(sys.argv[2])]
print("%s: the kafka columns run from each run's first verdict to its last; before the first, the group formed: "
      "%.1f to %.1f s (median %.1f), not counted" % (sys.argv[1], min(joins), max(joins), statistics.median(joins)))
EOF
  fi
done
[[ ! -s $WORK/broker_notes ]] || cat "$WORK/broker_notes"
