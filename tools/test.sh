#!/usr/bin/env bash
# Quick start (b): installs what is missing, builds, and runs the whole test
# suite twice: a normal build, then an AddressSanitizer/UBSan build.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
jobs=$(nproc)

tools/build.sh build
ctest --test-dir build --output-on-failure --timeout 900 -j "$jobs"

tools/build.sh build-asan -DPILLBOX_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure --timeout 1800 -j "$jobs"
echo "test: all suites passed (normal and ASan/UBSan), $jobs cores"
