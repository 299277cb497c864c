#!/usr/bin/env bash
# Quick start (b): installs what is missing, builds, and runs every test:
# the suite on a normal (GCC) build, the tests of what is hostile (labelled
# asan, tests/CMakeLists.txt) on an AddressSanitizer/UBSan (clang) build,
# and a short smoke run of every fuzz harness (fuzz/smoke.sh).
#
# CI has 2 cores and 30 minutes, so the work is arranged to waste neither:
# - each test runs once: those the sanitizer build runs with no less to
#   check (the unit tests, 19 end-to-end tests) are left out of the normal
#   build (-DPILLBOX_SANITIZER_ONLY_TESTS=OFF);
# - while the normal suite runs (about a fifth of the CPU idle: it waits on
#   the processes it starts), the fuzz smoke and then the sanitizer build run
#   beside it at the lowest priority (nice 19), so they take what is idle
#   and the suite's timing is not disturbed; their output is shown after.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh --tests
jobs=$(nproc)

# Lean (no debug info, tools/build.sh says why), as tools/demo.sh builds, so
# a demo's build is reused here; the tests are turned on in case it was one.
tools/build.sh --lean build -DPILLBOX_TESTS=ON -DPILLBOX_SANITIZER_ONLY_TESTS=OFF

# The sanitizer build, with clang (installed for fuzz/ anyway): an
# instrumented file compiles in about 0.57 of GCC 12's time (the same three
# files: 29 s against 51 s). The normal build above is GCC's, as the
# product ships. Line tables only (-g1): reports keep file:line. The tests'
# own code is compiled without instrumentation (tests/CMakeLists.txt);
# everything they test is instrumented.
# It lives under /tmp, in a directory whose name has a space: every test
# then also runs from a tree that tasks see privately (each gets its own
# /tmp) and that the loader cannot name in LD_PRELOAD, wherever the clone
# is (issue 24). One per clone (the hash of its path); PILLBOX_ASAN_BUILD
# chooses another. Only what the sanitizer run needs: the asan_suite target.
asan_build=${PILLBOX_ASAN_BUILD:-/tmp/pillbox clang-asan-$(pwd -P | sha256sum | cut -c1-12)}
logs=$(mktemp -d)
background() {
  # libFuzzer harnesses (fuzz/): a clang build of only the harnesses, then
  # each one for a fixed time from its seed corpus; a finding fails CI, its
  # input is saved in fuzz/ (fuzz/README.md).
  fuzz/smoke.sh "${PILLBOX_FUZZ_SECONDS:-6}" build-fuzz >"$logs/fuzz.log" 2>&1 || { echo fuzz >"$logs/failed"; return 1; }
  CC=clang CXX=clang++ PILLBOX_BUILD_TARGET=asan_suite tools/build.sh "$asan_build" -DPILLBOX_SANITIZE=ON \
    -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g1" -DCMAKE_C_FLAGS_DEBUG="-g1" >"$logs/asan-build.log" 2>&1 ||
    { echo asan-build >"$logs/failed"; return 1; }
}
background_started=$SECONDS
# Its own process group (setsid), so that an early exit stops all of it.
logs="$logs" asan_build="$asan_build" setsid nice -n 19 bash -c "$(declare -f background); background" &
background_pid=$!
trap 'kill -- "-$background_pid" 2>/dev/null || true' EXIT

normal_rc=0
ctest --test-dir build --output-on-failure --timeout 900 -j "$jobs" || normal_rc=$?
echo "test: the normal suite ended after $((SECONDS - background_started)) s; waiting for the fuzz smoke and the sanitizer build"
background_rc=0
wait "$background_pid" || background_rc=$?
trap - EXIT
echo "test: the fuzz smoke and the sanitizer build ('$asan_build') ended after $((SECONDS - background_started)) s"
cat "$logs/fuzz.log" 2>/dev/null || true
if [ "$background_rc" -ne 0 ]; then
  failed=$(cat "$logs/failed" 2>/dev/null || echo "the background job")
  [ "$failed" = asan-build ] && tail -n 60 "$logs/asan-build.log"
  echo "test: $failed failed" >&2
  exit 1
fi
[ "$normal_rc" -eq 0 ] || { echo "test: the normal suite failed (above)" >&2; exit "$normal_rc"; }

# One test more than cores: these tests wait on the processes they start
# (a quarter to two fifths of the CPU sat idle at -j 2 on 2 cores, vmstat
# every 10 s over the 268 s of this phase).
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir "$asan_build" -L asan --output-on-failure --timeout 1800 -j "$((jobs + 1))"
rm -rf "$logs"
echo "test: all suites passed (normal, fuzz smoke and the ASan/UBSan selection), $jobs cores, $SECONDS s"
