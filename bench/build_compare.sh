#!/usr/bin/env bash
# bench/build_compare.sh — throughput of one build against another, same run.
#
# usage: bench/build_compare.sh BASE_BUILD NEW_BUILD [TASKS]   (TASKS default 1000)
#   env: ROUNDS (default 5), JOBS (default: nproc), KEEP=1 keeps the temp dir
#
# "Did this change cost throughput?" asked the only way a shared, noisy host
# can answer: both builds run the same corpus, interleaved round by round (the
# order alternates), and the answer is the ratio NEW/BASE of their median
# tasks/s per variant. Variants (all --no-store, --quiet, --jobs JOBS):
#
#   echo     --handler echo DIR                    (zygote, in-process handler)
#   exec     DIR -- echo_stdin                     (zygote, execve per task)
#   ledger   --store S --handler echo DIR          (the store's ledger in the way)
#
# Each build is copied into the temp dir first (a rebuild meanwhile cannot
# swap binaries). Nothing is written into the repository.
set -euo pipefail

BENCH=build_compare
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_help "$@"
[[ $# -ge 2 ]] || { bench_usage >&2; exit 2; }

ROUNDS=${ROUNDS:-5}
JOBS=${JOBS:-$(nproc)}
TASKS=${3:-1000}
bench_positive_ints TASKS ROUNDS JOBS
bench_need cc python3
bench_workdir corpus

declare -A PBS
for side in base new; do
  if [[ $side == base ]]; then bench_build_dir "$1" pillbox pillbox-sandbox; else bench_build_dir "$2" pillbox pillbox-sandbox; fi
  mkdir -p "$WORK/$side"
  for f in pillbox pillbox-sandbox libpillbox-crash.so; do
    [[ -e "$BUILD_DIR/$f" ]] && cp "$BUILD_DIR/$f" "$WORK/$side/"
  done
  chmod 0755 "$WORK/$side" "$WORK/$side/"*
  PBS[$side]="$WORK/$side/pillbox"
done

bench_echo_stdin
bench_text_corpus "$WORK/corpus" "$TASKS"
chmod -R a+rX "$WORK"

# run SIDE VARIANT: seconds of one run, or fails the script.
run() {
  local pb=${PBS[$1]} t0 t1 rc=0 store="$WORK/store-$1-$RANDOM"
  local args=(run --quiet --jobs "$JOBS")
  case $2 in
    echo) args+=(--no-store --handler echo "$WORK/corpus") ;;
    exec) args+=(--no-store "$WORK/corpus" -- "$WORK/echo_stdin") ;;
    ledger) args+=(--store "$store" --handler echo "$WORK/corpus") ;;
  esac
  t0=$(date +%s.%N)
  "$pb" "${args[@]}" >/dev/null 2>"$WORK/log" || rc=$?
  t1=$(date +%s.%N)
  rm -rf "$store"
  [[ $rc == 0 ]] || bench_fail_run "$1 $2" "$rc" "$WORK/log"
  python3 -c "print($t1 - $t0)"
}

declare -A TIMES
for variant in echo exec ledger; do run base "$variant" >/dev/null; run new "$variant" >/dev/null; done  # warm up
for ((r = 1; r <= ROUNDS; r++)); do
  for variant in echo exec ledger; do
    if ((r % 2)); then order=(base new); else order=(new base); fi
    for side in "${order[@]}"; do TIMES[$side.$variant]+="$(run "$side" "$variant") "; done
  done
done

echo "build_compare: $TASKS tasks, $ROUNDS rounds, --jobs $JOBS"
echo "  base: $1"
echo "  new:  $2"
printf '%-8s %12s %12s %10s\n' variant "base tasks/s" "new tasks/s" "new/base"
for variant in echo exec ledger; do
  python3 - "$TASKS" "${TIMES[base.$variant]}" "${TIMES[new.$variant]}" "$variant" <<'EOF'
import statistics, sys
tasks = int(sys.argv[1])
base = statistics.median(tasks / float(t) for t in sys.argv[2].split())
new = statistics.median(tasks / float(t) for t in sys.argv[3].split())
print("%-8s %12.0f %12.0f %10.2f" % (sys.argv[4], base, new, new / base))
EOF
done
