#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang and runs each one for a short,
# fixed time from its seed corpus. Exit status 0: no harness found anything.
#   fuzz/smoke.sh [SECONDS_PER_HARNESS] [BUILD_DIR]     # defaults: 20, build-fuzz
# Environment: FUZZ_JOBS harnesses at a time (default: the number of cores).
#
# The harnesses and their libFuzzer flags are listed once, in
# fuzz/CMakeLists.txt; configuring writes the list to BUILD_DIR/fuzz/harnesses.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
build="${2:-build-fuzz}"
jobs="${FUZZ_JOBS:-$(nproc)}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz/smoke.sh: clang++ not found; install it with: apt-get install clang libclang-rt-14-dev" >&2
  exit 3
fi

# -O1 and line tables only: the build is part of CI's budget; findings still
# get file:line. No -DNDEBUG: assertions (nlohmann's among them) stay on.
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DPILLBOX_FUZZ=ON -DPILLBOX_TESTS=OFF >/dev/null
cmake --build "$build" --target fuzz --parallel "$(nproc)"
built_at=$SECONDS

harnesses=()
declare -A flags
while read -r name rest; do
  [ -n "$name" ] || continue
  harnesses+=("$name")
  flags[$name]="$rest"
done <"$build/fuzz/harnesses.txt"
if [ ${#harnesses[@]} -eq 0 ]; then
  echo "fuzz/smoke.sh: no harnesses listed in $build/fuzz/harnesses.txt" >&2
  exit 2
fi

# Symbolized reports when LLVM's symbolizer is installed (Debian: llvm-14).
for symbolizer in llvm-symbolizer llvm-symbolizer-14 /usr/lib/llvm-14/bin/llvm-symbolizer; do
  if command -v "$symbolizer" >/dev/null; then
    export ASAN_SYMBOLIZER_PATH
    ASAN_SYMBOLIZER_PATH="$(command -v "$symbolizer")"
    break
  fi
done

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# One harness: new inputs go to the scratch dir (first), the seeds are only read.
run_harness() {
  local harness="$1"
  local -a extra
  read -r -a extra <<<"${flags[$harness]}"
  mkdir -p "$scratch/$harness"
  if "$build/fuzz/fuzz_$harness" -max_total_time="$seconds" "${extra[@]}" \
      -artifact_prefix="$scratch/$harness-" -print_final_stats=1 \
      "$scratch/$harness" "fuzz/corpus/$harness" >"$scratch/$harness.log" 2>&1; then
    echo 0 >"$scratch/$harness.rc"
  else
    echo $? >"$scratch/$harness.rc"
  fi
}

echo "fuzz: configured and built in ${built_at}s; running ${#harnesses[@]} harnesses, ${seconds}s each, $jobs at a time"
running=0
for harness in "${harnesses[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  run_harness "$harness" &
  running=$((running + 1))
done
wait
echo "fuzz: ran in $((SECONDS - built_at))s"

status=0
for harness in "${harnesses[@]}"; do
  log="$scratch/$harness.log"
  if [ "$(cat "$scratch/$harness.rc" 2>/dev/null || echo 1)" = 0 ]; then
    execs=$(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "fuzz $harness: clean for ${seconds}s ($execs executions)"
  else
    status=1
    echo "fuzz $harness: FOUND SOMETHING; last lines of its log:" >&2
    tail -40 "$log" >&2
    for artifact in "$scratch/$harness-"*; do
      [ -f "$artifact" ] && cp "$artifact" "fuzz/" && echo "  reproducer saved: fuzz/$(basename "$artifact")" >&2
    done
    echo "  replay it: $build/fuzz/fuzz_$harness fuzz/$harness-<artifact>" >&2
  fi
done
exit "$status"
