#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang and runs each one for a short,
# fixed time from its seed corpus. Exit status 0: no harness found anything.
#   fuzz/smoke.sh [SECONDS_PER_HARNESS] [BUILD_DIR]     # defaults: 20, build-fuzz
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
build="${2:-build-fuzz}"
if ! command -v clang++ >/dev/null; then
  echo "fuzz/smoke.sh: clang++ not found; install it with: apt-get install clang" >&2
  exit 3
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DPILLBOX_FUZZ=ON -DPILLBOX_TESTS=OFF >/dev/null
cmake --build "$build" --target fuzz_wire_frame fuzz_policy_parser fuzz_crash_report
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
status=0
for harness in wire_frame policy_parser crash_report; do
  mkdir -p "$scratch/$harness"
  # New inputs go to the scratch dir (first), the seeds are only read.
  if "$build/fuzz/fuzz_$harness" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$scratch/$harness-" -print_final_stats=1 \
      "$scratch/$harness" "fuzz/corpus/$harness" >"$scratch/$harness.log" 2>&1; then
    echo "fuzz $harness: clean for ${seconds}s ($(grep -m1 -o 'stat::number_of_executed_units: *[0-9]*' "$scratch/$harness.log" | grep -o '[0-9]*$') executions)"
  else
    status=1
    echo "fuzz $harness: FOUND SOMETHING; last lines of its log:" >&2
    tail -40 "$scratch/$harness.log" >&2
    for artifact in "$scratch/$harness-"*; do
      [ -e "$artifact" ] && cp "$artifact" "fuzz/" && echo "  reproducer saved: fuzz/$(basename "$artifact")" >&2
    done
  fi
done
exit "$status"
