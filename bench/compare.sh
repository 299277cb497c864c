#!/usr/bin/env bash
# bench/compare.sh — what per-task isolation costs, against fork itself and peers, in one run.
#
# usage: bench/compare.sh [BUILD_DIR] [TASKS]   (defaults: build, 3000)
#   env: ROUNDS (default 3; 0: only the resource run), JOBS (default: nproc), FLAT (tasks of the resource run, default 100000; 0 skips it),
#        BASE=BUILD_DIR (another build: its pillbox rows run in the same rounds, ratios new/base printed),
#        KEEP=1 keeps the temp dir
#
# Prints every row of the table of issue 15 and the ratios of its goals:
#   fork ceiling              fork + _exit + waitpid in a C loop, one loop per job slot
#   pillbox echo              run --no-store --handler echo (zygote)
#   pillbox echo + store      the same with a fresh store per run
#   pillbox exec              run --no-store -- cat1 {} (policy exec, all confinement on)
#   pillbox exec, 10% crash   the same over a corpus where one input in ten crashes cat1 (SIGSEGV)
#   xargs timeout prlimit     xargs -P JOBS -n1 timeout 10 prlimit ... cat1
#   xargs bwrap               xargs -P JOBS -n1 bwrap --unshare-all ... cat1
#   confined floor, in-process  bench/peers/confined_floor.c inproc: echo's (strict) required child steps in C
#   confined floor, exec        the exec policy's steps in C, then execve cat1 (both: lower bounds, no pillbox code)
# then FLAT echo tasks from stdin with a store, sampling the supervisor's RSS and
# fds and the zygote's RSS as it goes. bench/README.md explains the figures.
set -euo pipefail

BENCH=compare
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_help "$@"

ROUNDS=${ROUNDS:-3}
JOBS=${JOBS:-$(nproc)}
TASKS=${2:-3000}
FLAT=${FLAT:-100000}
bench_positive_ints TASKS JOBS
[[ "$ROUNDS" =~ ^[0-9]+$ ]] || bench_die "ROUNDS must be a number (got '$ROUNDS')"
((ROUNDS > 0 || FLAT > 0)) || bench_die "nothing to do: ROUNDS=0 and FLAT=0"
[[ "$FLAT" =~ ^[0-9]+$ ]] || bench_die "FLAT must be a number (got '$FLAT')"
bench_need cc python3 xargs timeout prlimit
bench_build_dir "${1:-build}" pillbox pillbox-sandbox
bench_workdir clean mixed
bench_snapshot_build
BASE_PB=()
if [[ -n "${BASE:-}" ]]; then
  [[ -x "$BASE/pillbox" && -x "$BASE/pillbox-sandbox" ]] || bench_die "BASE=$BASE has no pillbox and pillbox-sandbox"
  mkdir -p "$WORK/base"
  for f in pillbox pillbox-sandbox libpillbox-crash.so; do [[ -e "$BASE/$f" ]] && cp "$BASE/$f" "$WORK/base/"; done
  chmod 0755 "$WORK/base" "$WORK/base/"*
  BASE_PB=("$WORK/base/pillbox")
fi

cc -O2 -o "$WORK/fork_ceiling" "$REPO_ROOT/bench/peers/fork_ceiling.c"
cc -O2 -o "$WORK/cat1" "$REPO_ROOT/bench/peers/cat1.c"
# The confined floor rows need libseccomp's headers; without them they are
# skipped, saying why. Steps it cannot take here (no root, no cgroup) are
# named by its probe and printed under the table. FLOOR_SKIP and
# FLOOR_SECCOMP are its breakdown knobs (bench/floor_breakdown.sh): never
# inherited here, the rows are the whole floor.
unset FLOOR_SKIP FLOOR_SECCOMP
export CONFINED_SKIP="" CONFINED_NOTES=""
if ! echo '#include <seccomp.h>' | cc -E - >/dev/null 2>&1; then
  CONFINED_SKIP="no libseccomp headers (Debian: apt-get install libseccomp-dev)"
elif ! cc -O2 -Wall -Wextra -o "$WORK/confined_floor" "$REPO_ROOT/bench/peers/confined_floor.c" -lseccomp 2>"$WORK/confined_floor.log"; then
  CONFINED_SKIP="confined_floor.c does not build here: $(head -c 300 "$WORK/confined_floor.log")"
fi
bench_text_corpus "$WORK/clean" "$TASKS"
# The mixed corpus: the clean one with every tenth file (shuffled, fixed seed) made poison.
python3 - "$WORK/clean" "$WORK/mixed" <<'PY'
import os, random, shutil, sys
names = sorted(os.listdir(sys.argv[1]))
random.seed(15)
poison = set(random.sample(names, len(names) // 10))
for n in names:
    shutil.copy(os.path.join(sys.argv[1], n), os.path.join(sys.argv[2], n))
    if n in poison:
        with open(os.path.join(sys.argv[2], n), "r+b") as f:
            f.write(b"CRASH")
PY
chmod -R a+rX "$WORK"
# The bwrap row needs bubblewrap and namespaces; without them it is skipped, saying why.
export BWRAP_SKIP=""
if ! command -v bwrap >/dev/null; then
  BWRAP_SKIP="no bwrap on PATH (Debian: apt-get install bubblewrap)"
elif ! bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc "$WORK/cat1" "$WORK/clean/t000000" >/dev/null 2>&1; then
  BWRAP_SKIP="bwrap --unshare-all cannot run here (no user or mount namespaces?)"
fi

if [[ -z "$CONFINED_SKIP" ]]; then
  if CONFINED_NOTES=$({ "$WORK/confined_floor" probe "$JOBS" "$WORK/clean" "$WORK/cat1" "$REPO_ROOT/policies/exec.policy" &&
      "$WORK/confined_floor" probe "$JOBS" "$WORK/clean" "$WORK/cat1" "$REPO_ROOT/policies/strict.policy"; } 2>&1); then
    # The same skip is named by both probes: once is enough.
    CONFINED_NOTES=$(awk '!seen[$0]++' <<<"${CONFINED_NOTES//confined_floor: /}")
  else
    CONFINED_SKIP="its setup failed: $CONFINED_NOTES"
    CONFINED_NOTES=""
  fi
fi

python3 "$REPO_ROOT/bench/compare.py" "$WORK" "$PB" "$TASKS" "$ROUNDS" "$JOBS" "$FLAT" "${BASE_PB[@]}"
